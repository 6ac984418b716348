package rollout

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestRolloutServerJudgedOnSQLite: a rollout on PostgreSQL of a task with SQLite gold only,
// which fails there (ifnull is SQLite's), judges against the gold's answer on the task's
// SQLite file (judge.Judge.Reference), so its rows carry no gold error.
func TestRolloutServerJudgedOnSQLite(t *testing.T) {
	shared.SkipServers(t)
	s := tiny(t, 8)
	cfg := sampleConfig(t, s, 1, 2)
	task := cfg.Tasks[0]
	name, reader := pgtest.Copy(t, task.DBPath, "cs_ro")
	g, _ := task.GoldFor(datasets.SQLite)
	task.DBID = name
	task.Gold = map[datasets.Dialect]string{datasets.SQLite: "SELECT * FROM (" + strings.TrimSuffix(strings.TrimSpace(g), ";") + ") AS g WHERE ifnull(1, 0) = 1"}
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: sandbox.Access{Reader: reader}}
	defer conn.Close()
	cfg.Tasks, cfg.Dialect, cfg.Opener = []datasets.Task{task}, datasets.Postgres, conn
	rows, _, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, r := range rows {
		if r.GoldError != "" {
			t.Errorf("sample %d: gold error %q: judged on PostgreSQL, not on the SQLite file", r.Sample, r.GoldError)
		}
	}
}
