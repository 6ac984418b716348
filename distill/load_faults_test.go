//go:build faults

package distill_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/teachers"
)

// TestFaultsSustainedLoadPostgres runs 22,400 episodes with up to 2,000 in flight against a
// local endpoint (each reply 250 ms), 20-60 s depending on the machine, every statement executed
// in PostgreSQL on the bundled sample, and samples turns/s and heap every 2 s: both must hold
// steady (at most two windows, 4 s, under half the median rate between ramp-up and ramp-down;
// heap at the end within 1.5x of its first steady value). (Windows of 5 s left a 20 s run on a
// fast machine too few to judge.)
// loadWindow is how often TestFaultsSustainedLoadPostgres samples the rate and the heap.
const loadWindow = 2 * time.Second

func TestFaultsSustainedLoadPostgres(t *testing.T) {
	tasks, err := datasets.LoadTasks("sample", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tasks, access := loadServers(t, tasks)
	const inflight = 2000
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		resp := dialectTeacher(tasks)(r)
		resp.Delay = 250 * time.Millisecond
		return resp
	}, oaitest.WithoutBodies())
	h := fakeTeacher(t, "wide", srv, func(e *teachers.Endpoint) { e.MaxConcurrency = inflight })
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: access}
	defer conn.Close()
	cfg := distill.RunConfig{Dir: t.TempDir(), Tasks: tasks, TaskSpec: "sample", Dialects: []datasets.Dialect{datasets.Postgres},
		Policies: []*episode.PolicyHandle{h}, Samples: 400, Opener: conn, Schemas: episode.NewSchemaCache(3), Concurrency: inflight}

	type window struct {
		requests int
		heapMiB  float64
		inFlight int // at the endpoint, when the window closed
	}
	var (
		mu      sync.Mutex
		windows []window
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := 0
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(loadWindow):
			}
			runtime.ReadMemStats(&ms)
			n := srv.Count()
			mu.Lock()
			windows = append(windows, window{requests: n - last, heapMiB: float64(ms.HeapInuse) / (1 << 20), inFlight: srv.InFlight()})
			mu.Unlock()
			last = n
		}
	}()
	start := time.Now()
	res, err := distill.Run(context.Background(), cfg)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if res.Failed != 0 || res.Done != len(tasks)*400 {
		t.Fatalf("%d done, %d failed, want %d done", res.Done, res.Failed, len(tasks)*400)
	}
	// Steady part: all but the first window (ramp-up) and the last (ramp-down, partial).
	if len(windows) < 6 {
		t.Fatalf("only %d windows of %v (run took %v): too short to judge: %+v", len(windows), loadWindow, el, windows)
	}
	steady := windows[1 : len(windows)-1]
	rates := make([]float64, len(steady))
	for i, w := range steady {
		rates[i] = float64(w.requests) / loadWindow.Seconds()
	}
	sorted := slices.Clone(rates)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	// A stall that lasts (a pool running dry, latency that grows) keeps several windows low in a
	// row, or many; a dip of up to 4 s on a shared machine (another package's test starting, the
	// server's checkpoint: one low window every 15-20 s, caught up in the next, on this stop's
	// machine at e52aa6d as at HEAD) is not one.
	var low []int
	run, longest := 0, 0
	for i, r := range rates {
		if r < median/2 {
			low = append(low, i)
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	if longest > 2 || len(low) > len(rates)/4 {
		t.Fatalf("windows %v under half the median %.0f turns/s (%d in a row): throughput is not steady (%v)", low, median, longest, rates)
	}
	if first, lastH := steady[0].heapMiB, steady[len(steady)-1].heapMiB; lastH > 1.5*first+64 {
		t.Fatalf("heap grew from %.0f to %.0f MiB over the steady part: memory is not bounded", first, lastH)
	}
	t.Logf("%d episodes, %d requests in %v; steady windows: turns/s %v (median %.0f), heap MiB first %.0f last %.0f; max in flight %d; windows %+v",
		res.Done, srv.Count(), el.Round(time.Second), rates, median, steady[0].heapMiB, steady[len(steady)-1].heapMiB, srv.MaxInFlight(), windows)
}
