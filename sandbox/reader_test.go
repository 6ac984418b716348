package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestReaderMissing: with no reader, opening a server database fails with ErrReader naming
// distill load; AsDSNUser opens as the DSN's user.
func TestReaderMissing(t *testing.T) {
	ctx := context.Background()
	pg := sandboxtest.PGSchema(t, sandboxtest.PGAdmin(t), "CREATE TABLE t (x int)")
	my := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT)")
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		target := map[datasets.Dialect]string{datasets.Postgres: pg, datasets.MySQL: my}[d]
		c := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: sandbox.Access{Reader: sandboxtest.FreshReaderName()}}
		_, err := c.Open(ctx, d, datasets.Task{ID: "t1", DBID: target})
		if !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), "distill load") || !strings.Contains(err.Error(), c.Access.Reader) {
			t.Errorf("%s: %v", d, err)
		}
		c.Close()
		c = &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: sandbox.Access{AsDSNUser: true}}
		db, err := c.Open(ctx, d, datasets.Task{ID: "t1", DBID: target})
		if err != nil {
			t.Fatalf("%s as the DSN's user: %v", d, err)
		}
		if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("%s as the DSN's user: %+v", d, r)
		}
		c.Close()
		who, err := sandbox.DescribeDSNUser(ctx, d, sandboxtest.DSN(d))
		if err != nil || !strings.Contains(who, map[datasets.Dialect]string{datasets.Postgres: "SUPERUSER", datasets.MySQL: "SUPER"}[d]) {
			t.Errorf("%s: describe: %q %v", d, who, err)
		}
	}
	if _, err := sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: "Bad-Name"}, nil); err == nil {
		t.Error("bad reader name accepted")
	}
	if _, err := sandbox.EnsureReader(ctx, datasets.MySQL, shared.MySQLDSN(), sandbox.ReaderSetup{Name: sandboxtest.FreshReaderName(), Hosts: []string{"x'y"}}, nil); err == nil {
		t.Error("bad host accepted")
	}
	if _, err := sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: sandboxtest.FreshReaderName()}, []string{"cs_no_such_schema_x"}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing target: %v", err)
	}
}

func TestReservedTargets(t *testing.T) {
	for _, name := range []string{"chainedsql_meta", "mysql", "information_schema", "performance_schema", "sys", "public", "pg_catalog", "PG_toast", "cs_tmp_0011"} {
		if _, err := sandbox.CopySQLite(context.Background(), "/nonexistent.sqlite", datasets.Postgres, "postgres://x@127.0.0.1/x", name); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
