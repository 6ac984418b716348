// Package testbin builds a command of this module for tests that drive the real binary.
package testbin

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build compiles the package at pkg (a path relative to the test's package directory, e.g.
// "." or "../cmd/distill") into a temporary directory of tb and returns the binary's path. It
// skips the test when no go command is on PATH.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command to build the binary with")
	}
	abs, err := filepath.Abs(pkg)
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(tb.TempDir(), filepath.Base(abs))
	if out, err := exec.Command(gobin, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Run runs cmd to its end and returns its exit status, stdout and stderr. It fails the test
// only when cmd could not be run at all.
func Run(tb testing.TB, cmd *exec.Cmd) (code int, stdout, stderr string) {
	tb.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		tb.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// Shortest runs run n times and returns the shortest wall time, for kill and interrupt tests
// that draw their signal times within a run's length: the first run of a package's tests can
// be several times slower than the rest (go test still compiling other packages, cold caches).
func Shortest(n int, run func()) time.Duration {
	best := time.Duration(1<<63 - 1)
	for i := 0; i < n; i++ {
		began := time.Now()
		run()
		best = min(best, time.Since(began))
	}
	return best
}

// NodeModulesEnv names the environment variable that points the tests at a node_modules folder;
// DuckDB uses its npm package @duckdb/node-api.
const NodeModulesEnv = "CHAINEDSQL_NODE_MODULES"

// DuckDB runs query in DuckDB (through node and the npm package @duckdb/node-api in the
// folder NodeModulesEnv names) and returns its rows as JSON, every value as DuckDB's JSON
// form writes it (counts as strings). Without NodeModulesEnv set it returns false and runs
// nothing; a query that fails fails the test.
func DuckDB(tb testing.TB, query string) (string, bool) {
	tb.Helper()
	mods := os.Getenv(NodeModulesEnv)
	if mods == "" {
		return "", false
	}
	script := `const { DuckDBInstance } = require("@duckdb/node-api");
(async () => {
  const c = await (await DuckDBInstance.create(":memory:")).connect();
  const r = await c.runAndReadAll(process.argv[1]);
  process.stdout.write(JSON.stringify(r.getRowObjectsJson()));
})().catch((e) => { console.error(String(e)); process.exit(1); });`
	cmd := exec.Command("node", "-e", script, query)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("duckdb %s: %v: %s", query, err, out)
	}
	return string(out), true
}

// Interrupt sends SIGINT to the started cmd and waits up to within for it to exit; an exit
// that is not status 0, or none within that time, is a test error.
func Interrupt(tb testing.TB, cmd *exec.Cmd, within time.Duration) {
	tb.Helper()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		tb.Errorf("SIGINT: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			tb.Errorf("after SIGINT: %v", err)
		}
	case <-time.After(within):
		tb.Errorf("no exit %v after SIGINT", within)
	}
}
