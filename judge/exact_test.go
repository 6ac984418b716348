package judge

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestServerExactNumbers: on the servers the judge's verdict on exact numbers is the one BIRD's
// official evaluation gives through psycopg / pymysql (Python's Decimal and int compare exactly;
// 1 == 1.0 == Decimal('1.00'), None == None, sets drop duplicates). An integer past int64 (a
// MySQL BIGINT UNSIGNED, CAST(-1 AS UNSIGNED) among them, a PostgreSQL numeric) was keyed as
// the float64 nearest it at 10 digits, so CAST(-1 AS UNSIGNED) and CAST(-2 AS UNSIGNED) read as
// one answer; a numeric past float64's range was keyed as its text, equal to a text of the same
// digits and not to itself written with a fraction of zeros.
func TestServerExactNumbers(t *testing.T) {
	shared.SkipServers(t)
	huge := "'1" + strings.Repeat("0", 400)
	for _, c := range []struct {
		d          datasets.Dialect
		gold, pred string
		correct    bool
	}{
		{datasets.MySQL, "SELECT CAST(-1 AS UNSIGNED)", "SELECT CAST(-2 AS UNSIGNED)", false},
		{datasets.MySQL, "SELECT CAST(-1 AS UNSIGNED)", "SELECT CAST(-1 AS UNSIGNED) UNION ALL SELECT 18446744073709551615", true},
		{datasets.MySQL, "SELECT 18446744073709551615", "SELECT 18446744073709551615.000", true},
		{datasets.MySQL, "SELECT 1, NULL", "SELECT CAST(1 AS DECIMAL(5,2)), NULL UNION ALL SELECT 1e0, NULL", true},
		{datasets.MySQL, "SELECT CAST(12.5 AS DECIMAL(6,3))", "SELECT 12.5e0", true},
		{datasets.Postgres, "SELECT 18446744073709551615::numeric", "SELECT 18446744073709551614::numeric", false},
		{datasets.Postgres, "SELECT 18446744073709551615::numeric", "SELECT 18446744073709551615.00::numeric", true},
		{datasets.Postgres, "SELECT (" + huge + "')::numeric", "SELECT (" + huge + ".00')::numeric", true},
		{datasets.Postgres, "SELECT (" + huge + "')::numeric", "SELECT " + huge + "'::text", false},
		{datasets.Postgres, "SELECT (" + huge + "')::numeric", "SELECT (" + huge + "1')::numeric", false},
		{datasets.Postgres, "SELECT 1, NULL", "SELECT 1.00::numeric, NULL UNION ALL SELECT 1::float8, NULL", true},
		{datasets.Postgres, "SELECT 'Infinity'::numeric, '-0'::float8", "SELECT 'Infinity'::float8, 0", true},
	} {
		dbid := "public" // statements that read no table
		if c.d == datasets.MySQL {
			dbid = "test"
		}
		db := serverDB(t, c.d, dbid)
		v, err := Judge{}.Run(context.Background(), db, c.gold, c.pred, nil, 0)
		if err != nil {
			t.Fatalf("%s %.60s: %v", c.d, c.pred, err)
		}
		if v.Outcome != string(sandbox.OutcomeOK) || v.Correct != c.correct {
			t.Errorf("%s: %.60s against %.60s: %s %q correct %v, want correct %v (Python's)", c.d, c.pred, c.gold, v.Outcome, v.Error, v.Correct, c.correct)
		}
	}
}

// serverDB opens the database (PostgreSQL: schema) dbid of the test server of dialect d as the
// DSN's user.
func serverDB(t *testing.T, d datasets.Dialect, dbid string) sandbox.DB {
	dsn := shared.PostgresDSN()
	if d == datasets.MySQL {
		dsn = shared.MySQLDSN()
	}
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{d: dsn}, Access: sandbox.Access{AsDSNUser: true}}
	t.Cleanup(func() { conn.Close() })
	db, err := conn.Open(context.Background(), d, datasets.Task{ID: dbid + "/0", DBID: dbid})
	if err != nil {
		t.Fatal(err)
	}
	return db
}
