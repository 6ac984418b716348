package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// chinookQueries run unchanged on SQLite and PostgreSQL; MySQL gets backticks for the double
// quotes. ordered: compare row order too.
var chinookQueries = []struct {
	SQL     string
	Ordered bool
}{
	{`SELECT count(*) FROM Track`, false},
	{`SELECT Name, Milliseconds FROM Track ORDER BY Milliseconds DESC, TrackId LIMIT 10`, true},
	{`SELECT g.Name, count(*) FROM Track t JOIN Genre g ON g.GenreId = t.GenreId GROUP BY g.Name`, false},
	{`SELECT BillingCountry, sum(Total) FROM Invoice GROUP BY BillingCountry`, false},
	{`SELECT avg(UnitPrice), min(UnitPrice), max(UnitPrice) FROM Track`, false},
	{`SELECT count(*) - count(Composer) FROM Track`, false},
	{`SELECT FirstName, Company, Fax, State FROM Customer WHERE Country = 'Brazil'`, false},
	{`SELECT InvoiceDate, Total FROM Invoice WHERE InvoiceId IN (1, 2, 100)`, false},
	{chinookMonthSQL, true},
	{`SELECT count(*) FROM Invoice WHERE InvoiceDate >= '2010-06-01' AND InvoiceDate < '2011-01-01'`, false},
	{`SELECT min(InvoiceDate), max(HireDate) FROM Invoice, Employee`, false},
	{`SELECT ar.Name, count(*) AS n FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId, ar.Name ORDER BY n DESC, ar.ArtistId LIMIT 5`, true},
	{`SELECT e.FirstName, m.FirstName FROM Employee e LEFT JOIN Employee m ON e.ReportsTo = m.EmployeeId`, false},
	{`SELECT BirthDate, HireDate FROM Employee ORDER BY EmployeeId`, true},
	{`SELECT Title FROM Album WHERE lower(Title) LIKE 'the %'`, false},
	{`SELECT t.Name, il.UnitPrice * il.Quantity FROM InvoiceLine il JOIN Track t ON t.TrackId = il.TrackId WHERE il.InvoiceId = 5`, false},
	{`SELECT count(DISTINCT BillingCity) FROM Invoice`, false},
	{`SELECT CustomerId, sum(Total) AS s FROM Invoice GROUP BY CustomerId HAVING sum(Total) > 45`, false},
	{`SELECT round(sum(Total), 2), round(avg(Total), 4) FROM Invoice`, false},
	{`SELECT Name FROM MediaType WHERE MediaTypeId NOT IN (SELECT MediaTypeId FROM Track) ORDER BY MediaTypeId`, true},
	{`SELECT p.Name, count(pt.TrackId) FROM Playlist p LEFT JOIN PlaylistTrack pt ON pt.PlaylistId = p.PlaylistId GROUP BY p.PlaylistId, p.Name`, false},
}

// chinookMonthSQL groups by month with SQLite's text functions on the DATETIME column.
const chinookMonthSQL = `SELECT substr(InvoiceDate, 1, 7) AS m, count(*) FROM Invoice GROUP BY substr(InvoiceDate, 1, 7) ORDER BY m`

// chinookDialectSQL rewrites the queries that need a dialect's own date functions (the
// copies hold InvoiceDate as timestamp/DATETIME).
var chinookDialectSQL = map[datasets.Dialect]map[string]string{
	datasets.Postgres: {chinookMonthSQL: `SELECT to_char(InvoiceDate, 'YYYY-MM') AS m, count(*) FROM Invoice GROUP BY to_char(InvoiceDate, 'YYYY-MM') ORDER BY m`},
	datasets.MySQL:    {chinookMonthSQL: `SELECT DATE_FORMAT(InvoiceDate, '%Y-%m') AS m, count(*) FROM Invoice GROUP BY DATE_FORMAT(InvoiceDate, '%Y-%m') ORDER BY m`},
}

// serverCounts reads the row count of every table of a copy.
func serverCounts(t *testing.T, db DB, tables []Table) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tb := range tables {
		r := mustExec(t, db, "SELECT count(*) FROM "+tb.Name, ExecOptions{}) // unquoted: folds in PostgreSQL
		if !r.OK() {
			t.Fatalf("count %s: %+v", tb.Name, r)
		}
		out[tb.Name] = r.Rows[0][0].(int64)
	}
	return out
}

// copyServer returns an admin connection to dialect d's test server and the server's DSN.
func copyServer(tb testing.TB, d datasets.Dialect) (*sql.DB, string) {
	tb.Helper()
	if d == datasets.Postgres {
		return pgAdmin(tb), shared.PostgresDSN()
	}
	return myAdmin(tb), shared.MySQLDSN()
}

// dropCopy removes a copy CopySQLite made, with its MySQL marker row.
func dropCopy(admin *sql.DB, d datasets.Dialect, target string) {
	if d == datasets.Postgres {
		admin.Exec("DROP SCHEMA IF EXISTS " + QuoteIdent(d, target) + " CASCADE")
		return
	}
	admin.Exec("DROP DATABASE IF EXISTS " + QuoteIdent(d, target))
	admin.Exec("DELETE FROM "+mysqlMetaDB+".copies WHERE target = ?", target)
}

// openCopy opens a copy CopySQLite made, as a reader of its own granted the copy.
func openCopy(t testing.TB, ctx context.Context, d datasets.Dialect, dsn, target string) (DB, error) {
	acc := testReader(t, d, target)
	if d == datasets.Postgres {
		return OpenPostgres(ctx, dsn, target, acc)
	}
	return OpenMySQL(ctx, dsn, target, acc)
}

// copyChinook copies Chinook into dialect d under a fresh name, dropped when the test ends.
func copyChinook(t *testing.T, d datasets.Dialect) (DB, CopyStats) {
	t.Helper()
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	ctx := context.Background()
	target := srvName("cs_chinook")
	admin, dsn := copyServer(t, d)
	t.Cleanup(func() { dropCopy(admin, d, target) })
	st, err := CopySQLite(ctx, src, d, dsn, target)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped || st.Tables != 11 || st.Rows != 15607 || st.PrimaryKeys != 11 || st.ForeignKeys != 11 {
		t.Errorf("stats: %+v", st)
	}
	for _, n := range st.Notes {
		t.Logf("note: %s", n)
	}
	// A second copy of the same file is skipped.
	again, err := CopySQLite(ctx, src, d, dsn, target)
	if err != nil || !again.Skipped || again.Marker != st.Marker {
		t.Errorf("second copy: %+v %v", again, err)
	}
	db, err := openCopy(t, ctx, d, dsn, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, st
}

// TestCopyRedoesInterrupted: a target whose marker is missing (an interrupted copy, or one
// tampered with) is dropped and copied again, and leftovers of the temporary place go.
func TestCopyRedoesInterrupted(t *testing.T) {
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	ctx := context.Background()
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			target := srvName("cs_redo")
			admin, dsn := copyServer(t, d)
			t.Cleanup(func() { dropCopy(admin, d, target) })
			if d == datasets.Postgres {
				for _, s := range []string{"CREATE SCHEMA " + target, "CREATE TABLE " + target + ".junk (x int)",
					"CREATE SCHEMA " + tempName(target), "CREATE TABLE " + tempName(target) + ".half (x int)"} {
					if _, err := admin.Exec(s); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				for _, s := range []string{"CREATE DATABASE " + target, "CREATE TABLE " + target + ".junk (x int)",
					"CREATE DATABASE " + tempName(target), "CREATE TABLE " + tempName(target) + ".half (x int)"} {
					if _, err := admin.Exec(s); err != nil {
						t.Fatal(err)
					}
				}
			}
			st, err := CopySQLite(ctx, src, d, dsn, target)
			if err != nil || st.Skipped || st.Rows != 15607 {
				t.Fatalf("copy over a partial one: %+v %v", st, err)
			}
			var n int
			q := "SELECT count(*) FROM information_schema.tables WHERE table_schema IN ($1, $2) AND table_name IN ('junk', 'half')"
			if d == datasets.MySQL {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
			}
			if err := admin.QueryRow(q, target, tempName(target)).Scan(&n); err != nil || n != 0 {
				t.Errorf("leftover tables: %d %v", n, err)
			}
		})
	}
}

func TestCopyBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := CopySQLite(ctx, "/nonexistent.sqlite", datasets.Postgres, "postgres://x", "ok"); err == nil || !strings.Contains(err.Error(), "/nonexistent.sqlite") {
		t.Errorf("missing file: %v", err)
	}
	for _, target := range []string{"", "a b", "x;drop", strings.Repeat("a", 49)} {
		if _, err := CopySQLite(ctx, "/nonexistent.sqlite", datasets.MySQL, "root@tcp(127.0.0.1:3306)/", target); err == nil || !strings.Contains(err.Error(), "target name") {
			t.Errorf("target %q: %v", target, err)
		}
	}
	if _, err := CopySQLite(ctx, "/x.sqlite", datasets.SQLite, "", "ok"); err == nil || !strings.Contains(err.Error(), "dialect") {
		t.Errorf("dialect: %v", err)
	}
}

func TestChooseKind(t *testing.T) {
	for _, c := range []struct {
		decl                     string
		ints, reals, texts, blob int64
		want                     CopyKind
	}{
		{"INTEGER", 5, 0, 0, 0, CopyInt},
		{"INTEGER", 5, 0, 1, 0, CopyText}, // dirty: text in an integer column
		{"NUMERIC(10,2)", 2, 3, 0, 0, CopyDecimal},
		{"NUMERIC(10,2)", 2, 0, 0, 0, CopyInt},
		{"REAL", 0, 3, 0, 0, CopyFloat},
		{"DATETIME", 0, 0, 3, 0, CopyText},
		{"DATETIME", 0, 0, 0, 0, CopyText},
		{"", 0, 0, 0, 0, CopyText},
		{"BLOB", 0, 0, 0, 0, CopyBlob},
		{"", 0, 0, 2, 1, CopyBlob},
		{"BOOLEAN", 0, 0, 0, 0, CopyInt},
		{"NVARCHAR(40)", 0, 0, 0, 0, CopyText},
	} {
		if got := chooseKind(c.decl, c.ints, c.reals, c.texts, c.blob); got != c.want {
			t.Errorf("chooseKind(%q, %d, %d, %d, %d) = %d, want %d", c.decl, c.ints, c.reals, c.texts, c.blob, got, c.want)
		}
	}
}

// TestCopyManyDatabases copies shared SQLite databases (Northwind, the defog set, Spider's,
// dirty data included) into both servers; CopySQLite checks each table's row count.
func TestCopyManyDatabases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: copies ~30 databases into two servers")
	}
	var paths []string
	paths = append(paths, shared.Path(t, "data/multi/northwind/northwind.sqlite"))
	defog, _ := filepath.Glob(filepath.Join(filepath.Dir(shared.Path(t, "data/multi/defog/sqlite/academic.sqlite")), "*.sqlite"))
	spider, _ := filepath.Glob(filepath.Join(filepath.Dir(shared.Path(t, "data/spider/dev.json")), "database", "*", "*.sqlite"))
	if os.Getenv("CHAINEDSQL_COPY_ALL") == "" {
		// Every 8th Spider database keeps the suite quick; CHAINEDSQL_COPY_ALL=1 copies all 156
		// (measured: all 168 databases copy into both servers, 33 s).
		var some []string
		for i := 0; i < len(spider); i += 8 {
			some = append(some, spider[i])
		}
		spider = some
	}
	paths = append(append(paths, defog...), spider...)
	ctx := context.Background()
	for _, d := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			admin, dsn := copyServer(t, d)
			notes := 0
			for i, p := range paths {
				target := fmt.Sprintf("m%d_%d", os.Getpid(), i)
				st, err := CopySQLite(ctx, p, d, dsn, target)
				dropCopy(admin, d, target)
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				notes += len(st.Notes)
				if testing.Verbose() {
					for _, n := range st.Notes {
						t.Logf("%s: %s", filepath.Base(p), n)
					}
				}
			}
			t.Logf("%s: %d databases copied (row counts checked by CopySQLite), %d notes", d, len(paths), notes)
		})
	}
}

// TestCopyFailureCleansUp: a copy that fails part-way (MySQL has no infinity for DOUBLE) says
// which table, leaves no temporary database behind, and publishes nothing.
func TestCopyFailureCleansUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inf.sqlite")
	w, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec("CREATE TABLE ok (x INTEGER); INSERT INTO ok VALUES (1); CREATE TABLE bad (r REAL); INSERT INTO bad VALUES (1e999)"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	admin, dsn := copyServer(t, datasets.MySQL)
	target := srvName("cs_fail")
	t.Cleanup(func() { dropCopy(admin, datasets.MySQL, target) })
	_, err = CopySQLite(context.Background(), path, datasets.MySQL, dsn, target)
	if err == nil || !strings.Contains(err.Error(), "table bad") || !strings.Contains(err.Error(), "no infinity") {
		t.Fatalf("want an error naming table bad, got %v", err)
	}
	var n int
	if err := admin.QueryRow("SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN (?, ?)", target, tempName(target)).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d of target/temporary databases left: %v", n, err)
	}
}
