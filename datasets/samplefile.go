package datasets

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3" // the SQLite driver materialising the sample databases

	"github.com/chainedsql/chainedsql/datasets/sample"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

const (
	// sampleBuildTimeout bounds building one sample database from its script.
	sampleBuildTimeout = 2 * time.Minute
	// sampleAppID is the SQLite header's application_id of the sample databases ("CSQL"): a file
	// without it is not one of ours and is never replaced.
	sampleAppID = 0x4353514c
)

// loadSample loads the bundled sample (package datasets/sample): it builds every sample database
// as <root>/<db>/<db>.sqlite, root being sampleRoot(dbRoot, sample.Version), unless a file of the
// same version is already there, and returns one task per question with IDs "sample/<n>".
func loadSample(dbRoot string) ([]Task, error) {
	qs, err := sample.Questions()
	if err != nil {
		return nil, err
	}
	root, err := sampleRoot(dbRoot, sample.Version)
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, db := range sample.Databases() {
		p, err := materialise(context.Background(), root, db, sample.Version, sample.Script)
		if err != nil {
			return nil, err
		}
		paths[db] = p
	}
	tasks := make([]Task, len(qs))
	for i, q := range qs {
		gold := make(map[Dialect]string, len(q.Gold))
		for d, s := range q.Gold {
			gold[Dialect(d)] = s
		}
		tasks[i] = Task{
			ID:         "sample/" + q.ID,
			Index:      i,
			DBID:       q.DBID,
			Question:   q.Question,
			Evidence:   q.Evidence,
			Gold:       gold,
			Difficulty: q.Difficulty,
			Source:     SpecSample,
			DBPath:     paths[q.DBID],
		}
	}
	return tasks, nil
}

// sampleRoot is where the sample databases live: dbRoot when set, else a per-version folder of the
// user's cache directory.
func sampleRoot(dbRoot, version string) (string, error) {
	if dbRoot != "" {
		return dbRoot, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the sample databases (pass a db root): %w", err)
	}
	return filepath.Join(cache, "chainedsql", "sample-"+version), nil
}

// versionStamp folds a content version into the SQLite header's user_version, so a file built
// from other data is rebuilt rather than reused.
func versionStamp(version string) int32 {
	h := sha256.Sum256([]byte(version))
	return int32(binary.BigEndian.Uint32(h[:4]) &^ (1 << 31)) // positive: never the default 0
}

// materialise makes <root>/<db>/<db>.sqlite from script unless a file stamped with version is
// already there, and returns its path. A sample database of another version is rebuilt; any other
// file at that path is an error, never overwritten. The file is built under a temporary name in the same folder
// and renamed into place, so readers never see a half-built database and two processes building it
// at once both end with a complete file.
func materialise(ctx context.Context, root, db, version string, script func(string) (string, error)) (string, error) {
	dir := filepath.Join(root, db)
	path := filepath.Join(dir, db+".sqlite")
	stamp := versionStamp(version)
	if _, err := os.Stat(path); err == nil {
		app, v, err := readStamp(ctx, path)
		switch {
		case err != nil:
			return "", fmt.Errorf("sample database %s: %s exists and cannot be read (%v); remove it or use another db root", db, path, err)
		case app != sampleAppID:
			return "", fmt.Errorf("sample database %s: %s exists and is not a sample database; remove it or use another db root", db, path)
		case v == stamp:
			return path, nil
		}
	}
	text, err := script(db)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sample database %s: %w", db, err)
	}
	// The database is built under a temporary name and renamed into place, so that a process
	// killed part way leaves no half-built file at path. Mode 0600, as it has always been.
	tmp, err := atomicfile.Create(path, 0o600)
	if err != nil {
		return "", fmt.Errorf("sample database %s: %w", db, err)
	}
	defer tmp.Abort()
	defer os.Remove(tmp.TempName() + "-journal")
	if err := buildSQLite(ctx, tmp.TempName(), text, stamp); err != nil {
		return "", fmt.Errorf("sample database %s: %w", db, err)
	}
	if err := tmp.Commit(); err != nil {
		return "", fmt.Errorf("sample database %s: %w", db, err)
	}
	return path, nil
}

// buildSQLite runs script into the empty SQLite file at path in one transaction and stamps it
// with sampleAppID and stamp.
func buildSQLite(ctx context.Context, path, script string, stamp int32) error {
	ctx, cancel := context.WithTimeout(ctx, sampleBuildTimeout)
	defer cancel()
	db, err := sql.Open("sqlite3", sqliteURI(path, "_foreign_keys=1"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, script); err != nil {
		tx.Rollback()
		return fmt.Errorf("script: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d", sampleAppID, stamp)); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return db.Close()
}

// readStamp returns the application_id and user_version of the SQLite file at path.
func readStamp(ctx context.Context, path string) (app, version int32, err error) {
	db, err := sql.Open("sqlite3", sqliteURI(path, "mode=ro"))
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
		return 0, 0, err
	}
	err = db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	return app, version, err
}

// sqliteURI is a go-sqlite3 file: URI for path with the query options.
func sqliteURI(path, options string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + options
}
