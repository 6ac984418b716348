package env

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // creating the benchmark's PostgreSQL database

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

var benchLive = flag.Int("env.live", 2000, "episodes in play at once in the env benchmarks")

// freshPostgres loads the sample's databases into a new PostgreSQL database and makes a reader
// for them, both dropped at the end, and returns a Connector running statements as the reader
// (as distill env serve does); it skips without servers.
func freshPostgres(tb testing.TB, tasks []datasets.Task) *sandbox.Connector {
	tb.Helper()
	shared.SkipServers(tb)
	reader := fmt.Sprintf("cs_rd_envb%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	tb.Cleanup(func() { // after the database's drop below (cleanups run last first)
		if err := sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), reader); err != nil {
			tb.Errorf("drop reader %s: %v", reader, err)
		}
	})
	dsn, drop := pgtest.FreshDB(tb, "cs_envb_")
	tb.Cleanup(drop)
	done := map[string]bool{}
	var ids []string
	for _, t := range tasks {
		if !done[t.DBID] {
			done[t.DBID] = true
			ids = append(ids, t.DBID)
			if _, err := sandbox.CopySQLite(context.Background(), t.DBPath, datasets.Postgres, dsn, t.DBID); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if _, err := sandbox.EnsureReader(context.Background(), datasets.Postgres, dsn, sandbox.ReaderSetup{Name: reader}, ids); err != nil {
		tb.Fatal(err)
	}
	return &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: dsn}, Access: sandbox.Access{Reader: reader}}
}

// benchClient is an HTTP client keeping a connection per episode in play.
func benchClient(live int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = live, live
	return &http.Client{Transport: tr}
}

func post(c *http.Client, url string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// BenchmarkStep plays sample episodes (the gold twice: one execution, then one plus the
// judge's gold) with -env.live episodes in play at once, over real HTTP on loopback, one step
// per request ("single") or each worker's group of 16 episodes in one batch-step ("batch").
// An op is one step; it reports step latency p50/p99 and steps/s.
func BenchmarkStep(b *testing.B) {
	tasks := tasksOf(b)
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			conn := &sandbox.Connector{}
			if d == datasets.Postgres {
				conn = freshPostgres(b, tasks)
			}
			benchSet(b, conn, tasks, d)
		})
	}
}

// BenchmarkStepSpider is BenchmarkStep/sqlite on Spider dev's first 300 tasks (../shared), whose
// gold SQL (joins, grouping, nesting) runs longer than the sample's.
func BenchmarkStepSpider(b *testing.B) {
	tasks, err := datasets.LoadTasks("spider:"+shared.Path(b, "data/spider/dev.json"), "")
	if err != nil {
		b.Fatal(err)
	}
	benchSet(b, &sandbox.Connector{}, tasks[:min(300, len(tasks))], datasets.SQLite)
}

// benchSet serves tasks in dialect d through conn and runs the exec floor and both step modes.
func benchSet(b *testing.B, conn *sandbox.Connector, tasks []datasets.Task, d datasets.Dialect) {
	b.Cleanup(func() { conn.Close() })
	_, url := testServer(b, Config{Tasks: tasks, Dialects: []datasets.Dialect{d}, Opener: conn, MaxEpisodes: 2 * *benchLive, MaxEpisodesPerClient: 2 * *benchLive})
	// The floor: the turns' statements executed directly, DefaultParallel at once.
	b.Run("exec", func(b *testing.B) { benchExec(b, conn, tasks, d) })
	for _, mode := range []string{"single", "batch"} {
		b.Run(mode, func(b *testing.B) { benchSteps(b, url, tasks, d, mode == "batch") })
	}
}

// BenchmarkStepLog is BenchmarkStep/sqlite without and with --log-dir (a run dir in the test's
// temporary directory): the cost of committing each finished episode (a shard line and a
// journal line, each fsynced) inside its last step.
func BenchmarkStepLog(b *testing.B) {
	tasks := tasksOf(b)
	for _, logged := range []bool{false, true} {
		cfg := Config{Tasks: tasks, Dialects: []datasets.Dialect{datasets.SQLite}, Opener: &sandbox.Connector{}, MaxEpisodes: 2 * *benchLive, MaxEpisodesPerClient: 2 * *benchLive}
		name := "nolog"
		if logged {
			lg, err := rundir.OpenLog(b.TempDir(), &rundir.Manifest{Format: rundir.RunFormat})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { lg.Close() })
			cfg.Log, name = lg, "log"
		}
		_, url := testServer(b, cfg)
		for _, mode := range []string{"single", "batch"} {
			b.Run(name+"/"+mode, func(b *testing.B) { benchSteps(b, url, tasks, datasets.SQLite, mode == "batch") })
		}
	}
}

func benchSteps(b *testing.B, url string, tasks []datasets.Task, d datasets.Dialect, batch bool) {
	group := 1
	if batch {
		group = 16
	}
	live := *benchLive
	workers := max(1, live/group)
	client := benchClient(workers)
	var left atomic.Int64
	left.Store(int64(b.N))
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; left.Add(-int64(2*group)) > -int64(2*group); i++ {
				ids := make([]string, group)
				answers := make([]string, group)
				for k := range group {
					task := tasks[(w*group+k+i)%len(tasks)]
					var ep createResponse
					if err := post(client, url+"/v1/episodes", createRequest{TaskID: task.ID}, &ep); err != nil {
						failed.Store(&err)
						return
					}
					g, _ := task.GoldFor(d)
					ids[k], answers[k] = ep.EpisodeID, answer(g)
				}
				for turn := 1; turn <= 2; turn++ {
					t0 := time.Now()
					if batch {
						var out struct {
							Results []struct {
								Done    bool        `json:"done"`
								Rewards rewardsJSON `json:"rewards"`
								Error   *apiError   `json:"error"`
							} `json:"results"`
						}
						items := make([]map[string]string, group)
						for k := range group {
							items[k] = map[string]string{"episode_id": ids[k], "content": answers[k]}
						}
						if err := post(client, url+"/v1/episodes:batch-step", map[string]any{"steps": items}, &out); err != nil {
							failed.Store(&err)
							return
						}
						for _, r := range out.Results {
							if r.Error != nil || r.Done != (turn == 2) || (turn == 2 && r.Rewards.Correct != 1) {
								err := fmt.Errorf("batch step: %+v", r)
								failed.Store(&err)
								return
							}
						}
					} else {
						var out stepResponse
						if err := post(client, url+"/v1/episodes/"+ids[0]+"/step", map[string]string{"content": answers[0]}, &out); err != nil {
							failed.Store(&err)
							return
						}
						if out.Done != (turn == 2) || (turn == 2 && out.Rewards.Correct != 1) {
							err := fmt.Errorf("step: %+v", out)
							failed.Store(&err)
							return
						}
					}
					// A batch's latency is each of its steps'.
					for range group {
						lat[w] = append(lat[w], time.Since(t0))
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	reportLatency(b, slices.Concat(lat...), elapsed, "steps/s")
}

// benchExec executes the tasks' gold SQL as a turn does (row cap 20), without the environment:
// DefaultParallel callers, the server's bound on statements in flight.
func benchExec(b *testing.B, conn *sandbox.Connector, tasks []datasets.Task, d datasets.Dialect) {
	dbs := make([]sandbox.DB, len(tasks))
	for i, t := range tasks {
		db, err := conn.Open(context.Background(), d, t)
		if err != nil {
			b.Fatal(err)
		}
		dbs[i] = db
	}
	var next atomic.Int64
	lat := make([][]time.Duration, DefaultParallel)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range DefaultParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				g, _ := tasks[i%len(tasks)].GoldFor(d)
				t0 := time.Now()
				res, err := dbs[i%len(tasks)].Exec(context.Background(), g, sandbox.ExecOptions{Timeout: 30 * time.Second, MaxRows: 20})
				if err != nil || !res.OK() {
					b.Errorf("%s: %+v %v", g, res, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatency(b, slices.Concat(lat...), elapsed, "execs/s")
}

// reportLatency reports the p50 and p99 of lat and the rate of len(lat) over elapsed.
func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration, rate string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), rate)
}

// BenchmarkLiveEpisodeMemory starts b.N episodes (run it with -benchtime 5000x for five
// thousand) and plays one turn of each, keeping them all in play, then reports the heap they
// hold (after GC) per episode.
func BenchmarkLiveEpisodeMemory(b *testing.B) {
	tasks := tasksOf(b)
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			conn := &sandbox.Connector{}
			if d == datasets.Postgres {
				conn = freshPostgres(b, tasks)
			}
			b.Cleanup(func() { conn.Close() })
			benchMemory(b, conn, tasks, d)
		})
	}
}

func benchMemory(b *testing.B, conn *sandbox.Connector, tasks []datasets.Task, d datasets.Dialect) {
	s, url := testServer(b, Config{Tasks: tasks, Dialects: []datasets.Dialect{d}, Opener: conn, MaxEpisodes: b.N, MaxEpisodesPerClient: b.N})
	client := benchClient(64)
	// Warm the schema cache and the pools, so that only the episodes count.
	for _, t := range tasks {
		var ep createResponse
		if err := post(client, url+"/v1/episodes", createRequest{TaskID: t.ID}, &ep); err != nil {
			b.Fatal(err)
		}
		s.store.remove(ep.EpisodeID, "")
	}
	before := heapInUse()
	b.ResetTimer()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range b.N {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			task := tasks[i%len(tasks)]
			var ep createResponse
			if err := post(client, url+"/v1/episodes", createRequest{TaskID: task.ID}, &ep); err != nil {
				b.Error(err)
				return
			}
			var st stepResponse
			if err := post(client, url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": answer("SELECT * FROM " + firstTable(task))}, &st); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	client.CloseIdleConnections()
	after := heapInUse()
	if stored, live := s.Episodes(); stored != b.N || live != b.N {
		b.Fatalf("%d episodes stored, %d in play, want %d", stored, live, b.N)
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "B/episode")
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// firstTable names a table of the task's sample database (so each episode holds a real
// observation of up to the observation's row cap).
func firstTable(t datasets.Task) string {
	switch t.DBID {
	case "library":
		return "book"
	case "clinic":
		return "patient"
	case "shop":
		return "product"
	}
	return "station"
}
