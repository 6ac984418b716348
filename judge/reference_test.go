package judge

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// TestReference: a gold that fails on the prediction's database runs again on Reference and the
// verdict compares with that result (GoldOn says so), in every style; a gold that runs on the
// prediction's database never opens Reference; without Reference, where it does not open, or
// where the gold fails there too, the first failure is reported; a timeout there is the
// prediction's timeout, as on the server, not an unjudged gold.
func TestReference(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, ddl string) sandbox.DB {
		path := filepath.Join(dir, name+".sqlite")
		raw, err := sql.Open("sqlite3", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(ddl); err != nil {
			t.Fatal(err)
		}
		raw.Close()
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	// The reference has the gold's table; the prediction's database only a copy under another name.
	ref := mk("ref", `CREATE TABLE g (x INTEGER); INSERT INTO g VALUES (1), (2);`)
	db := mk("db", `CREATE TABLE h (x INTEGER); INSERT INTO h VALUES (1), (2); CREATE TABLE g2 (x INTEGER); INSERT INTO g2 VALUES (7);`)
	ctx := context.Background()
	opened := 0
	reference := func(context.Context) (sandbox.DB, error) { opened++; return ref, nil }
	for _, st := range []Style{StyleBIRD, StyleSpider, StyleSpiderStrict} {
		j := Judge{Style: st, Reference: reference}
		v, err := j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0)
		if err != nil || !v.Correct || v.GoldOn != datasets.SQLite || v.GoldError != "" || v.Outcome != "ok" {
			t.Errorf("%s: the reference's answer: %+v, %v", st, v, err)
		}
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM g2", nil, 0); err != nil || v.Correct || v.GoldOn != datasets.SQLite {
			t.Errorf("%s: another answer: %+v, %v", st, v, err)
		}
		opened = 0
		if v, err = j.Run(ctx, db, "SELECT x FROM h", "SELECT x FROM h", nil, 0); err != nil || !v.Correct || v.GoldOn != "" || opened != 0 {
			t.Errorf("%s: a gold that runs: %+v, %v, reference opened %d times", st, v, err, opened)
		}
		long := "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c, g"
		if v, err = j.Run(ctx, db, long, "SELECT x FROM h", nil, 300*time.Millisecond); err != nil || v.Correct || v.GoldOn != datasets.SQLite || v.GoldError != "" || v.Outcome != "timeout" {
			t.Errorf("%s: a gold that runs out of time on the reference: %+v, %v", st, v, err)
		}
		if v, err = j.Run(ctx, db, "SELECT x FROM nowhere", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || v.GoldError == "" {
			t.Errorf("%s: a gold that fails on both: %+v, %v", st, v, err)
		}
		j.Reference = func(context.Context) (sandbox.DB, error) { return nil, errors.New("no file") }
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || !strings.Contains(v.GoldError, "no such table: g") {
			t.Errorf("%s: a reference that does not open: %+v, %v", st, v, err)
		}
		j.Reference = nil
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || v.GoldError == "" {
			t.Errorf("%s: no reference: %+v, %v", st, v, err)
		}
	}
}
