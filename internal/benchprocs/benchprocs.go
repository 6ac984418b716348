// Package benchprocs gives the benchmarks that run on GOMAXPROCS threads (their thread count
// set by go test -cpu) that count, and refuses the -cpu lists under which Go's testing package
// measures a benchmark's first row on another value's GOMAXPROCS (golang/go#49980). For tests
// only.
package benchprocs

import (
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Threads returns runtime.GOMAXPROCS(0), the thread count of a benchmark that follows -cpu. It
// fails tb when the -test.cpu list ends with another value than it starts with: the testing
// package runs every test once per value first, leaving GOMAXPROCS at the last, and a
// benchmark's first round (all of a b.Loop benchmark's measuring) then runs under it, so the
// first row would carry one thread count and be measured on another. One value per process, or
// a list that ends with its first value (-cpu 2,1,2), measures every row as labelled. Call it in
// the benchmark that measures: a parent that only calls b.Run runs once, at the GOMAXPROCS the
// tests left, whatever the rows of its sub-benchmarks say.
func Threads(tb testing.TB) int {
	tb.Helper()
	if f := flag.Lookup("test.cpu"); f != nil {
		if err := Check(f.Value.String()); err != nil {
			tb.Fatal(err)
		}
	}
	return runtime.GOMAXPROCS(0)
}

// Check returns an error for a -test.cpu list (comma-separated GOMAXPROCS values, as go test
// takes it) whose first row a GOMAXPROCS-following benchmark would measure on another value:
// the last differs from the first. An empty list, one value, or a list ending with its first
// value is fine.
func Check(list string) error {
	var vals []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("benchprocs: -test.cpu %q: %v", list, err)
		}
		vals = append(vals, v)
	}
	if len(vals) < 2 || vals[0] == vals[len(vals)-1] {
		return nil
	}
	fixed := make([]string, 0, len(vals)+1)
	for _, v := range append(vals, vals[0]) {
		fixed = append(fixed, strconv.Itoa(v))
	}
	return fmt.Errorf("benchprocs: under -cpu %s the first row (-%d) would run with GOMAXPROCS %d, the list's last value (golang/go#49980): run one -cpu value per process, or end the list with its first value (-cpu %s)",
		list, vals[0], vals[len(vals)-1], strings.Join(fixed, ","))
}
