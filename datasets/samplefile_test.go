package datasets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

const testScript = `CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE player (id INTEGER PRIMARY KEY, team_id INTEGER REFERENCES team(id), name TEXT);
INSERT INTO team VALUES (1, 'Ålesund'), (2, 'O''Higgins');
INSERT INTO player VALUES (1, 1, 'Ada'), (2, 2, 'Bo'), (3, 2, NULL);`

func countRows(t *testing.T, path, table string) int64 {
	t.Helper()
	n, err := readCount(context.Background(), path, table)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readCount counts table's rows in the SQLite file at path, opened read-only; the error wraps
// errNoFile when the file is not there.
func readCount(ctx context.Context, path, table string) (int64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("%w: %v", errNoFile, err)
	}
	db, err := sql.Open("sqlite3", sqliteURI(path, "mode=ro"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n)
	return n, err
}

// errNoFile is readCount's error for a missing file.
var errNoFile = errors.New("no database file")

func TestMaterialiseBuildsReusesAndRebuilds(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	calls := 0
	script := func(db string) (string, error) {
		calls++
		if db != "league" {
			return "", fmt.Errorf("unknown db %q", db)
		}
		return testScript, nil
	}
	p, err := materialise(ctx, root, "league", "v1", script)
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(root, "league", "league.sqlite") || countRows(t, p, "player") != 3 || calls != 1 {
		t.Fatalf("%s, %d script calls", p, calls)
	}
	st1, _ := os.Stat(p)
	if _, err := materialise(ctx, root, "league", "v1", script); err != nil || calls != 1 {
		t.Fatalf("reuse: %v, %d script calls", err, calls)
	}
	if st2, _ := os.Stat(p); !os.SameFile(st1, st2) {
		t.Fatal("reuse replaced the file")
	}
	// Another content version rebuilds in place.
	if _, err := materialise(ctx, root, "league", "v2", script); err != nil || calls != 2 {
		t.Fatalf("rebuild: %v, %d script calls", err, calls)
	}
	if app, v, err := readStamp(ctx, p); err != nil || app != sampleAppID || v != versionStamp("v2") {
		t.Fatalf("stamp %x %d %v", app, v, err)
	}
	// A file that is not a sample database is never replaced.
	other := filepath.Join(root, "mine", "mine.sqlite")
	os.MkdirAll(filepath.Dir(other), 0o755)
	for _, content := range []string{"not a database at all, just text that is long enough to be a header.....", ""} {
		os.WriteFile(other, []byte(content), 0o644)
		if _, err := materialise(ctx, root, "mine", "v1", func(string) (string, error) { return testScript, nil }); err == nil ||
			!strings.Contains(err.Error(), other) {
			t.Fatalf("foreign file %q: %v", content, err)
		}
		if b, _ := os.ReadFile(other); string(b) != content {
			t.Fatal("foreign file changed")
		}
	}
	// A broken script leaves nothing behind: no database, no temporary files.
	bad := func(string) (string, error) { return testScript + "\nINSERT INTO nowhere VALUES (1);", nil }
	if _, err := materialise(ctx, root, "broken", "v1", bad); err == nil || !strings.Contains(err.Error(), "sample database broken") {
		t.Fatalf("broken script: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, "broken")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := materialise(ctx, root, "nosuch", "v1", script); err == nil || !strings.Contains(err.Error(), `unknown db "nosuch"`) {
		t.Fatalf("unknown db: %v", err)
	}
}

// TestMaterialiseRace builds the same database from many goroutines at once while readers open
// it: every builder ends with the same complete file, and no reader ever sees a partial one.
func TestMaterialiseRace(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	script := func(string) (string, error) { return testScript, nil }
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	path := filepath.Join(root, "league", "league.sqlite")
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			version := "v1"
			if i%2 == 1 {
				version = "v2" // two versions racing: each build is still complete
			}
			if _, err := materialise(ctx, root, "league", version, script); err != nil {
				errs <- err
			}
		}(i)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				n, err := readCount(ctx, path, "player")
				if errors.Is(err, errNoFile) {
					continue // not there yet
				}
				if err != nil || n != 3 {
					errs <- fmt.Errorf("reader saw %v %d", err, n)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if countRows(t, path, "team") != 2 {
		t.Fatal("final file")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestSampleRoot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("os.UserCacheDir follows XDG_CACHE_HOME on Linux only")
	}
	if r, err := sampleRoot("/x", "abc"); err != nil || r != "/x" {
		t.Fatalf("%s %v", r, err)
	}
	t.Setenv("XDG_CACHE_HOME", "/cache")
	t.Setenv("HOME", "/home/u")
	if r, err := sampleRoot("", "abc"); err != nil || r != filepath.Join("/cache", "chainedsql", "sample-abc") {
		t.Fatalf("%s %v", r, err)
	}
}
