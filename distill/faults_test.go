//go:build faults

// The fault suite of the distill runner (go test -tags faults ./distill/): thousands of episodes
// against a teacher that injects every fault at several rates, and a long SIGKILL loop. Run by
// scripts/test.sh; figures in docs/BENCHMARKS.md ("Faults").

package distill_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/teachers"
)

// TestFaultsRates runs the shop tasks × 500 samples (3,000 episodes, 9,000-12,000 requests) per
// fault rate: every key ends in a shard or in failures.jsonl with a reason, none twice, requests
// stay within the retry bound, and wall time within a bound of the slowest path.
func TestFaultsRates(t *testing.T) {
	_, tasks := makeShopDB(t)
	const samples = 500
	for _, rate := range []float64{0.05, 0.2, 0.5} {
		srv := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)),
			oaitest.WithFaultRate(rate, uint64(rate*1000), oaitest.AllFaults...),
			oaitest.WithRetryAfter(time.Millisecond), oaitest.WithSlowDelay(2*time.Millisecond))
		dir := t.TempDir()
		const maxRetries = 3
		h := fakeTeacher(t, "flaky", srv, func(e *teachers.Endpoint) {
			e.Timeout = 200 * time.Millisecond
			e.MaxRetries = maxRetries
			e.MaxConcurrency = 128
		})
		cfg := baseConfig(t, dir, tasks, h)
		cfg.Samples = samples
		start := time.Now()
		res, err := distill.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		wall := time.Since(start)
		want := len(tasks) * samples
		done, fails, reasons := accounted(t, dir)
		if len(done)+len(fails) != want || res.Done+res.Failed != want {
			t.Fatalf("rate %.2f: %d keys accounted (%d done, %d failed), want %d: lost keys", rate, len(done)+len(fails), len(done), len(fails), want)
		}
		if lines := readShardLines(t, dir); len(lines) != len(done) {
			t.Fatalf("rate %.2f: %d shard lines for %d keys: duplicates", rate, len(lines), len(done))
		}
		// At most max-turns turns per episode, each at most 1+maxRetries attempts.
		if max := want * protocol.DefaultMaxTurns * (1 + maxRetries); srv.Count() > max {
			t.Fatalf("rate %.2f: %d requests, over the retry bound %d", rate, srv.Count(), max)
		}
		// Every request ends within the client timeout plus backoff; with 128 in flight the run
		// cannot take longer than requests/128 sequential timeouts.
		if bound := time.Duration(srv.Count()/128+1) * 300 * time.Millisecond; wall > bound+10*time.Second {
			t.Fatalf("rate %.2f: %v wall time, over the bound %v", rate, wall, bound)
		}
		t.Logf("rate %.2f: %d episodes, %d requests, faults %v; %d done, %d failed %v; %v wall",
			rate, want, srv.Count(), srv.FaultCounts(), len(done), len(fails), reasons, wall.Round(time.Millisecond))
	}
}

// TestFaultsKillLoop SIGKILLs a distilling process at 24 random moments, then lets a rerun
// finish: the keys are exactly the full set, each once, no temporary file is left, and every
// trajectory equals, in content, the one an uninterrupted run writes.
func TestFaultsKillLoop(t *testing.T) {
	if os.Getenv("DISTILL_KILL_DIR") != "" {
		t.Skip("in the child")
	}
	path, tasks := makeShopDB(t)
	gold := goldByQuestion(tasks)
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		resp := teacherScript(gold)(r)
		resp.Delay = 10 * time.Millisecond
		return resp
	})
	run := func(dir string) *exec.Cmd { return killChild(dir, srv.BaseURL(), path, "DISTILL_KILL_SAMPLES=300") }
	ref := t.TempDir()
	if out, err := run(ref).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	dir := t.TempDir()
	kills := killLoop(t, 24, rand.New(rand.NewPCG(3, 4)), 100, 500, func() *exec.Cmd { return run(dir) })
	got, want := committed(t, dir), committed(t, ref)
	if len(got) != len(want) {
		t.Fatalf("%d keys after the kill loop, %d in the uninterrupted run", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		if g == nil {
			t.Fatalf("key %s lost", k)
		}
		if a, b := content(t, g), content(t, w); !reflect.DeepEqual(a, b) {
			t.Fatalf("key %s differs from the uninterrupted run:\n%v\n%v", k, a, b)
		}
	}
	if lines := readShardLines(t, dir); len(lines) != len(want) {
		t.Fatalf("%d shard lines for %d keys: duplicates or leftovers", len(lines), len(want))
	}
	if left := tempFiles(t, dir); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	t.Logf("%d of 24 runs killed mid-run; %d keys complete and equal to the uninterrupted run", kills, len(got))
	if kills < 20 {
		t.Fatalf("only %d runs were killed mid-run, want at least 20", kills)
	}
}

// content is what a trajectory says, without timings, latencies and attempt counts.
func content(t *testing.T, tr *rundir.Trajectory) map[string]any {
	t.Helper()
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var strip func(v any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k := range x {
				switch k {
				case "duration_ns", "latency_ns", "started", "attempts":
					delete(x, k)
				default:
					strip(x[k])
				}
			}
		case []any:
			for _, e := range x {
				strip(e)
			}
		}
	}
	strip(m)
	return m
}

// tempFiles lists files under dir whose names mark them as temporary.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	err := walkFiles(dir, func(p string) {
		if isTemp(p) {
			left = append(left, p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func walkFiles(dir string, fn func(string)) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fn(p)
		}
		return nil
	})
}

// isTemp reports whether p is a temporary file of the run dir writer (".NAME.tmp-*").
func isTemp(p string) bool { return strings.Contains(filepath.Base(p), ".tmp-") }
