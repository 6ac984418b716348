package sandbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/sandbox"
)

// refuse is an Execer that fails every statement.
type refuse struct{}

func (refuse) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errors.New("permission denied")
}

// TestSetupExec: a failed setup statement is named by its first line, cut before the engine's
// password keyword, so the password never reaches an error.
func TestSetupExec(t *testing.T) {
	exec := sandbox.SetupExec(context.Background(), refuse{}, " PASSWORD ")
	err := exec("ALTER ROLE r LOGIN PASSWORD 'hunter2'\nmore")
	if err == nil || !strings.Contains(err.Error(), "ALTER ROLE r LOGIN") || !strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v: want the statement without its password, and the cause", err)
	}
}

// TestStoredPassword: the stored password comes back as stored; with no row a new 48-digit one
// comes back, not stored; a failing query is an error saying what it read.
func TestStoredPassword(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE readers (name TEXT PRIMARY KEY, password TEXT NOT NULL); INSERT INTO readers VALUES ('r', 'kept')"); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT password FROM readers WHERE name = ?"
	if p, stored, err := sandbox.StoredPassword(ctx, db, q, "r"); err != nil || !stored || p != "kept" {
		t.Errorf("stored: %q %v %v", p, stored, err)
	}
	if p, stored, err := sandbox.StoredPassword(ctx, db, q, "new"); err != nil || stored || len(p) != 48 {
		t.Errorf("none stored: %q %v %v", p, stored, err)
	}
	if _, _, err := sandbox.StoredPassword(ctx, db, "SELECT password FROM nowhere WHERE name = ?", "r"); err == nil || !strings.Contains(err.Error(), "read the stored password") {
		t.Errorf("failing query: %v", err)
	}
}
