// Package testbin builds a command of this module for tests that drive the real binary.
package testbin

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
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
