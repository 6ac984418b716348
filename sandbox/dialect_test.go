package sandbox

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

// fakeDialect is what a new dialect needs: the Dialect methods and an Engine; its one
// registration below makes it reachable from a Connector and the registry.
type fakeDialect struct{}

func (fakeDialect) Name() datasets.Dialect { return "fakedb" }
func (fakeDialect) Engine() string         { return "FakeDB" }
func (fakeDialect) Server() *Server {
	return &Server{Flag: "fake-dsn", Env: "CHAINEDSQL_FAKE_DSN", Usage: "FakeDB DSN", Namespace: "database"}
}
func (fakeDialect) Introspect(context.Context, DB) (*Schema, error) {
	return &Schema{Tables: []Table{{Name: "b"}, {Name: "a"}}}, nil
}
func (fakeDialect) QuoteIdent(name string) string { return "[" + name + "]" }
func (fakeDialect) Connect(_ context.Context, c *Connector) (Engine, error) {
	return &fakeEngine{dsn: c.DSN["fakedb"]}, nil
}

type fakeEngine struct {
	dsn    string
	opened int
	closed bool
}

func (e *fakeEngine) Key(t datasets.Task) (string, error) { return t.DBID, nil }
func (e *fakeEngine) Open(context.Context, datasets.Task) (DB, error) {
	e.opened++
	return fakeDB{}, nil
}
func (e *fakeEngine) Runaways() Runaways { return Runaways{Total: int64(e.opened)} }
func (e *fakeEngine) Close() error       { e.closed = true; return nil }

type fakeDB struct{}

func (fakeDB) Dialect() datasets.Dialect { return "fakedb" }
func (fakeDB) Version() string           { return "FakeDB 1" }
func (fakeDB) Exec(context.Context, string, ExecOptions) (*Result, error) {
	return &Result{Outcome: OutcomeOK}, nil
}
func (fakeDB) Close() error { return nil }

func init() { Register(fakeDialect{}) }

// TestRegistryNewDialect: one registered dialect is reachable by name, listed, opened through
// a Connector (its DSN checked, one DB per task database, its Engine closed with the
// Connector), introspected and quoted, with no other change.
func TestRegistryNewDialect(t *testing.T) {
	if d, ok := Lookup("fakedb"); !ok || d.Engine() != "FakeDB" || EngineName("fakedb") != "FakeDB" {
		t.Fatalf("lookup: %v %v", d, ok)
	}
	names := Names()
	if len(names) < 4 || names[0] != datasets.SQLite || names[len(names)-1] != "fakedb" {
		t.Errorf("names %v", names)
	}
	if _, err := Check("nosuch"); err == nil || !strings.Contains(err.Error(), "mysql or fakedb") {
		t.Errorf("check: %v", err)
	}
	ctx := context.Background()
	task := datasets.Task{ID: "t1", DBID: "db1"}
	var none Connector
	if _, err := none.Open(ctx, "fakedb", task); err == nil || !strings.Contains(err.Error(), "no fakedb DSN") {
		t.Errorf("open without a DSN: %v", err)
	}
	c := &Connector{DSN: map[datasets.Dialect]string{"fakedb": "fake://x"}}
	a, err := c.Open(ctx, "fakedb", task)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Open(ctx, "fakedb", datasets.Task{ID: "t2", DBID: "db1"})
	c.Open(ctx, "fakedb", datasets.Task{ID: "t3", DBID: "db2"})
	eng := c.engines["fakedb"].(*fakeEngine)
	if a != b || eng.opened != 2 || eng.dsn != "fake://x" || c.Runaways("fakedb").Total != 2 {
		t.Errorf("one DB per database: opened %d, dsn %q", eng.opened, eng.dsn)
	}
	s, err := Introspect(ctx, a, 0)
	if err != nil || s.Tables[0].Name != "a" || QuoteIdent("fakedb", "x") != "[x]" {
		t.Errorf("introspect %+v %v", s, err)
	}
	if _, err := EnsureReader(ctx, "fakedb", "", ReaderSetup{}, nil); err == nil || !strings.Contains(err.Error(), "want postgres or mysql") {
		t.Errorf("a dialect without ReaderAdmin: %v", err)
	}
	c.Close()
	if !eng.closed {
		t.Error("engine not closed")
	}
}

// dialectNames are the dialect constants only engine code may branch on.
var dialectNames = map[string]bool{"SQLite": true, "Postgres": true, "MySQL": true}

// allowedBranches are the files outside sandbox that may compare with a dialect constant, and
// why.
var allowedBranches = map[string]string{
	// The official BIRD and Spider evaluators read SQLite through Python's sqlite3; the judge
	// imitates their value model there and nowhere else.
	"judge/judge.go": "official evaluators on SQLite",
}

// TestNoDialectBranches fails when code outside sandbox branches on a dialect: a switch case,
// a comparison or a map keyed by datasets.SQLite, datasets.Postgres or datasets.MySQL. What
// differs per dialect belongs to its Dialect (dialect_*.go); callers go through the registry.
func TestNoDialectBranches(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	isDialect := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || !dialectNames[sel.Sel.Name] {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == "datasets"
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "sandbox" || rel == "datasets" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || allowedBranches[filepath.ToSlash(rel)] != "" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var hit ast.Expr
			switch x := n.(type) {
			case *ast.CaseClause:
				for _, e := range x.List {
					if isDialect(e) {
						hit = e
					}
				}
			case *ast.BinaryExpr:
				if (x.Op == token.EQL || x.Op == token.NEQ) && (isDialect(x.X) || isDialect(x.Y)) {
					hit = x
				}
			case *ast.KeyValueExpr:
				if isDialect(x.Key) {
					hit = x.Key
				}
			}
			if hit != nil {
				t.Errorf("%s: branches on a dialect; give the difference to the Dialect (sandbox/dialect_*.go)", fset.Position(hit.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
