package distill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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

// spiderTasks reads n entries spread evenly over Spider dev (the datasets loader's format is not
// needed here: db_id, question and query are enough).
func spiderTasks(tb testing.TB, n int) []datasets.Task {
	tb.Helper()
	path := shared.Path(tb, "data/spider/dev.json")
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var raw []struct {
		DBID     string `json:"db_id"`
		Question string `json:"question"`
		Query    string `json:"query"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(filepath.Dir(path), "database")
	var out []datasets.Task
	stride := max(1, len(raw)/n)
	for i := 0; i < len(raw) && len(out) < n; i += stride {
		r := raw[i]
		out = append(out, datasets.Task{ID: fmt.Sprintf("spider-dev/%d", i), Index: i, DBID: r.DBID, Question: r.Question,
			Gold: map[datasets.Dialect]string{datasets.SQLite: r.Query}, Source: "spider",
			DBPath: filepath.Join(root, r.DBID, r.DBID+".sqlite")})
	}
	return out
}

func TestRunSpiderSQLite(t *testing.T) {
	tasks := spiderTasks(t, 60)
	srv := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)))
	conn := &sandbox.Connector{}
	defer conn.Close()
	dir := t.TempDir()
	cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "spider:dev", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}, fakeTeacher(t, "fake", srv, nil)},
		Opener:   conn, Schemas: testSchemas()}
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 120 || res.Failed != 0 {
		t.Fatalf("%+v", res)
	}
	dbs := map[string]bool{}
	for _, tr := range committed(t, dir) {
		dbs[tr.DBID] = true
		want := 2
		if tr.Teacher == "fake" {
			want = 3
		}
		if !tr.Repeated || !tr.ExecOK || len(tr.Turns) != want || tr.GoldError != "" {
			t.Errorf("%s: converged %v exec_ok %v turns %d gold error %q", tr.Key, tr.Repeated, tr.ExecOK, len(tr.Turns), tr.GoldError)
		}
		if matchReady() && !tr.Correct {
			t.Errorf("%s: not correct", tr.Key)
		}
	}
	if len(dbs) < 3 {
		t.Fatalf("only %d databases", len(dbs))
	}
}

// BenchmarkRunTurns measures the toolkit's own overhead: a zero-latency local endpoint (HTTP
// through the teachers client), real SQLite execution, shard writes with fsync. Reports turns/s.
func BenchmarkRunTurns(b *testing.B) {
	tasks := spiderTasks(b, 50)
	srv := oaitest.NewServer(b, teacherScript(goldByQuestion(tasks)), oaitest.WithoutBodies())
	conn := &sandbox.Connector{}
	defer conn.Close()
	h := fakeTeacher(b, "bench", srv, func(e *teachers.Endpoint) { e.MaxConcurrency = 64 })
	b.ResetTimer()
	turns := 0
	start := time.Now()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "spider:dev", Dialects: []datasets.Dialect{datasets.SQLite},
			Policies: []*episode.PolicyHandle{h}, Samples: 4, Opener: conn, Schemas: testSchemas(), Concurrency: 32}
		res, err := distill.Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res.Summary {
			turns += r.Turns
		}
	}
	b.ReportMetric(float64(turns)/time.Since(start).Seconds(), "turns/s")
}

// TestRunManyInFlight holds 1,200 requests in flight at once against a local endpoint (each
// reply waits 1 s) and reports peak heap and server-side concurrency. Heavy: skipped with -short.
func TestRunManyInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("heavy: 1,200 concurrent episodes")
	}
	_, shop := makeShopDB(t)
	gold := goldByQuestion(shop)
	const inflight = 1200
	// The first turns wait (up to 30 s) until 1,000 requests are in flight, so the figure does
	// not depend on how fast a loaded CI machine can start 1,200 episodes; a client that caps
	// its concurrency below that still fails the check below.
	var srv *oaitest.Server
	barrier := time.Now().Add(30 * time.Second)
	var opened atomic.Bool
	script := func(r oaitest.Request) oaitest.Response {
		resp := teacherScript(gold)(r)
		resp.Delay = time.Second
		for !opened.Load() && srv.InFlight() < 1000 && time.Now().Before(barrier) {
			time.Sleep(10 * time.Millisecond)
		}
		opened.Store(true)
		return resp
	}
	srv = oaitest.NewServer(t, script, oaitest.WithoutBodies())
	// A first-turn request can wait at the barrier for up to 30 s before its 1 s reply, so the
	// attempt timeout must outlast both (the default 5 s failed episodes on a loaded machine).
	h := fakeTeacher(t, "wide", srv, func(e *teachers.Endpoint) { e.MaxConcurrency, e.Timeout = inflight, 2*time.Minute })
	conn := &sandbox.Connector{}
	defer conn.Close()
	dir := t.TempDir()
	cfg := distill.RunConfig{Dir: dir, Tasks: shop, TaskSpec: "shop", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{h}, Samples: 200, Opener: conn, Schemas: testSchemas(), Concurrency: inflight}
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
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
	turns := 0
	for _, r := range res.Summary {
		turns += r.Turns
	}
	t.Logf("%d episodes, %d turns in %s (%.0f turns/s); server max in flight %d; peak heap in use %.1f MiB; goroutines after %d",
		res.Done, turns, el.Round(time.Millisecond), float64(turns)/el.Seconds(), srv.MaxInFlight(), float64(peak.Load())/(1<<20), runtime.NumGoroutine())
	if res.Done != len(shop)*200 {
		t.Fatalf("%d of %d done; failures: %s", res.Done, len(shop)*200, failureReasons(t, dir))
	}
	if srv.MaxInFlight() < 1000 {
		t.Fatalf("only %d requests in flight at once, want 1000+", srv.MaxInFlight())
	}
}

// failureReasons summarises a run dir's failures.jsonl: each reason with its count.
func failureReasons(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "failures.jsonl"))
	if err != nil {
		return err.Error()
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var f struct {
			Reason string `json:"reason"`
			Error  string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &f) == nil {
			counts[f.Reason+": "+f.Error]++
		}
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
