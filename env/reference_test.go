package env

import (
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

// TestServerEpisodeJudgedOnSQLite: on PostgreSQL, a task with SQLite gold only that fails there
// (ifnull is SQLite's) is judged against the gold's answer on the task's SQLite file (judge.Judge.Reference), through
// the gold cache: the PostgreSQL gold twice is correct, with no gold error.
func TestServerEpisodeJudgedOnSQLite(t *testing.T) {
	task := tasksOf(t)[3]
	pg := gold(t, task, datasets.Postgres)
	lite := "SELECT * FROM (" + strings.TrimSuffix(strings.TrimSpace(gold(t, task, datasets.SQLite)), ";") + ") AS g WHERE ifnull(1, 0) = 1"
	task.Gold = map[datasets.Dialect]string{datasets.SQLite: lite}
	tasks := []datasets.Task{task}
	s, url := testServer(t, Config{Tasks: tasks, Dialects: []datasets.Dialect{datasets.Postgres}, Opener: freshPostgres(t, tasks)})
	ep := start(t, url, task.ID, "postgres")
	step(t, url, ep.EpisodeID, answer(pg))
	end := step(t, url, ep.EpisodeID, answer(pg))
	if r := end.Rewards.four(t); !*end.Done || r != [4]int{1, 1, 1, 1} || end.Info.GoldError != "" || end.Info.GoldDialect != "sqlite" {
		t.Fatalf("the PostgreSQL gold twice: done %v, rewards %v, gold error %q, judged against %q", *end.Done, r, end.Info.GoldError, end.Info.GoldDialect)
	}
	s.golds.mu.Lock()
	defer s.golds.mu.Unlock()
	var keys []string
	for k := range s.golds.m {
		keys = append(keys, strings.SplitN(k, "\x00", 2)[0])
	}
	if len(keys) == 0 || slices.ContainsFunc(keys, func(k string) bool { return k != string(datasets.SQLite) }) {
		t.Fatalf("gold cache keys by dialect: %q, want the SQLite file's only", keys)
	}
}
