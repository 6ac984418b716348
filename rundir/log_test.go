package rundir

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

// TestLog adds trajectories, refuses a key twice and an Add after Close, appends on a resume of
// the same manifest and refuses another one.
func TestLog(t *testing.T) {
	dir := t.TempDir()
	m := &Manifest{Format: RunFormat, Protocol: "p", MaxTurns: 5}
	l, err := OpenLog(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	tr := func(key string) *Trajectory {
		return &Trajectory{Key: key, TaskID: "t", Teacher: "env", Dialect: datasets.SQLite, Turns: []Turn{{Index: 1, Content: "x"}}}
	}
	if err := l.Add(tr("a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Add(tr("a")); err == nil || !strings.Contains(err.Error(), "already there") {
		t.Errorf("a key twice: %v", err)
	}
	if !l.Done("a") || l.Done("b") {
		t.Error("Done")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Add(tr("b")); err == nil {
		t.Error("an Add after Close succeeded")
	}
	if _, err := OpenLog(dir, &Manifest{Format: RunFormat, Protocol: "p", MaxTurns: 3}); err == nil || !strings.Contains(err.Error(), "max_turns") {
		t.Errorf("another manifest: %v", err)
	}
	l, err = OpenLog(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(tr("b")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	var keys []string
	if err := ReadRun(dir, func(tr *Trajectory) error { keys = append(keys, tr.Key); return nil }); err != nil || strings.Join(keys, ",") != "a,b" {
		t.Errorf("read back %v: %v", keys, err)
	}
}

// TestLogConcurrent adds from many goroutines at once (group commits), one key twice, and reads
// back every key once.
func TestLogConcurrent(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(dir, &Manifest{Format: RunFormat})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 101)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			errs[i] = l.Add(&Trajectory{Key: fmt.Sprint(i % 100), Teacher: "env", Dialect: datasets.SQLite})
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	keys := map[string]bool{}
	err = ReadRun(dir, func(tr *Trajectory) error { keys[tr.Key] = true; return nil })
	if err != nil || failed != 1 || len(keys) != 100 {
		t.Fatalf("%v: %d failed Adds, %d keys; want 1, 100", err, failed, len(keys))
	}
}
