package rollout

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // dropping the test schema

	"github.com/chainedsql/chainedsql/datasets"
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
	ctx := context.Background()
	name := fmt.Sprintf("cs_ro%d_%d_%s", os.Getpid(), time.Now().UnixNano()%1e6, strings.ToLower(task.DBID))
	if _, err := sandbox.CopySQLite(ctx, task.DBPath, datasets.Postgres, shared.PostgresDSN(), name); err != nil {
		t.Fatalf("copy into postgres: %v (set CHAINEDSQL_NO_SERVERS=1 to skip)", err)
	}
	pg, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	defer pg.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE")
	reader := fmt.Sprintf("cs_rd_ro%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: reader}, []string{name}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), reader); err != nil {
			t.Errorf("drop reader: %v", err)
		}
	}()
	g, _ := task.GoldFor(datasets.SQLite)
	task.DBID = name
	task.Gold = map[datasets.Dialect]string{datasets.SQLite: "SELECT * FROM (" + strings.TrimSuffix(strings.TrimSpace(g), ";") + ") AS g WHERE ifnull(1, 0) = 1"}
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: sandbox.Access{Reader: reader}}
	defer conn.Close()
	cfg.Tasks, cfg.Dialect, cfg.Opener = []datasets.Task{task}, datasets.Postgres, conn
	rows, _, err := Run(ctx, cfg)
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
