// Package shared locates the project's shared test data (../shared relative to the repository
// root, or $CHAINEDSQL_SHARED) for tests and benchmarks.
package shared

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvVar overrides the shared data directory.
const EnvVar = "CHAINEDSQL_SHARED"

// Dir returns the shared data directory: $CHAINEDSQL_SHARED, else ../shared next to the
// directory holding go.mod.
func Dir() string {
	if d := os.Getenv(EnvVar); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Join("..", "shared")
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared")
		}
		if filepath.Dir(d) == d {
			return filepath.Join("..", "shared")
		}
	}
}

// Path returns the shared file at rel (slash-separated), skipping the test with a clear message
// when it is absent.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(Dir(), filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared test data %s not found (set %s to the shared directory): %v", p, EnvVar, err)
	}
	return p
}
