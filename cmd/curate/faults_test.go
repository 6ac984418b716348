//go:build faults

package main

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestFaultsCurateInterrupt sends SIGINT (Ctrl-C) to `curate build` at random moments: an
// interrupted build exits 130 and leaves nothing at or beside --out; one that finished first
// left a complete dataset.
func TestFaultsCurateInterrupt(t *testing.T) {
	tokPath := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	bin := testbin.Build(t, ".")
	tmp := t.TempDir()
	run := oracleRun(t, filepath.Join(tmp, "run"), 0, 40).Dir
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "ds")
	build := func() *exec.Cmd {
		return exec.Command(bin, "build", run, "--tokenizer", tokPath, "--out", out, "--rows-per-shard", "200", "--quiet")
	}
	// The signal falls within the length of an uncut build: the shortest of three, and shorter
	// still when a build finishes before its signal (the first ran while go test was still
	// compiling other packages on a cold cache, several times slower than the later ones).
	full := testbin.Shortest(3, func() {
		if b, err := build().CombinedOutput(); err != nil {
			t.Fatalf("uncut build: %v\n%s", err, b)
		}
		os.RemoveAll(out)
	})

	rng := rand.New(rand.NewPCG(3, 4))
	interrupted, finished := 0, 0
	for attempt := 0; interrupted < 8 && attempt < 24; attempt++ {
		cmd := build()
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Not before the build's temporary directory appears beside --out: a signal before
		// main installs its handler kills the process, which is the Go runtime's behaviour,
		// not curate's (and the start-up before the handler takes 50-80 ms under -race on a
		// busy machine). From then on, at a random point of the rest of an uncut build.
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var err error
		waited := false
		for !waited {
			select {
			case err = <-exited:
				waited = true
			case <-time.After(time.Millisecond):
				if ents, _ := os.ReadDir(work); len(ents) == 0 {
					continue
				}
				time.Sleep(time.Duration(rng.Int64N(int64(max(full-time.Since(began), time.Millisecond)))))
				cmd.Process.Signal(syscall.SIGINT)
				err, waited = <-exited, true
			}
		}
		var ee *exec.ExitError
		switch {
		case err == nil:
			finished++
			full = min(full, time.Since(began))
			if _, err := os.Stat(filepath.Join(out, "README.md")); err != nil {
				t.Fatalf("a build that exited 0 left no complete dataset: %v", err)
			}
			os.RemoveAll(out)
			continue
		case errors.As(err, &ee) && ee.ExitCode() == 130:
			interrupted++
		case errors.As(err, &ee) && !ee.Exited():
			t.Fatalf("the SIGINT killed the process instead of stopping it (%v): it came before the handler was set", err)
		default:
			t.Fatalf("interrupted build: %v, want exit status 130", err)
		}
		ents, err := os.ReadDir(work)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			t.Errorf("after Ctrl-C: %s left in the output's directory", e.Name())
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if interrupted < 8 {
		t.Fatalf("only %d builds were interrupted (%d finished first)", interrupted, finished)
	}
	t.Logf("%d interrupted builds (exit 130, nothing written), %d finished before the signal; uncut build %v", interrupted, finished, full.Round(time.Millisecond))
}
