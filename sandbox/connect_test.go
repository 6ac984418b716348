package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

func TestConnectorServers(t *testing.T) {
	my := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1), (2)")
	pg := sandboxtest.PGSchema(t, sandboxtest.PGAdmin(t), "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1), (2), (3)")
	reader := sandboxtest.FreshReaderName()
	sandboxtest.GrantReader(t, datasets.MySQL, reader, my)
	sandboxtest.GrantReader(t, datasets.Postgres, reader, pg)
	c := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: sandbox.Access{Reader: reader}}
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		d    datasets.Dialect
		db   string
		want int64
	}{{datasets.MySQL, my, 2}, {datasets.Postgres, pg, 3}} {
		task := datasets.Task{ID: "t-" + string(tc.d), DBID: tc.db}
		a, err := c.Open(ctx, tc.d, task)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Open(ctx, tc.d, task)
		if err != nil || a != b {
			t.Fatalf("%s: second open: %v, same DB %v", tc.d, err, a == b)
		}
		if r := sandboxtest.MustExec(t, a, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != tc.want {
			t.Errorf("%s: %+v", tc.d, r)
		}
		if _, err := c.Open(ctx, tc.d, datasets.Task{ID: "t-missing", DBID: tc.db + "_missing"}); err == nil || !strings.Contains(err.Error(), "t-missing") {
			t.Errorf("%s: missing database: %v", tc.d, err)
		}
	}
	var none sandbox.Connector
	if _, err := none.Open(ctx, datasets.Postgres, datasets.Task{ID: "x", DBID: "y"}); err == nil || !strings.Contains(err.Error(), "no postgres DSN") {
		t.Errorf("no DSN: %v", err)
	}
	if _, err := none.Open(ctx, datasets.Dialect("oracle"), datasets.Task{ID: "x", DBID: "y"}); err == nil || !strings.Contains(err.Error(), "unknown dialect") {
		t.Errorf("unknown dialect: %v", err)
	}
}
