package view

import (
	"context"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// BenchEnv names a directory holding run/ and dataset/ for the viewer's benchmarks, as curate's
// BenchmarkBuild leaves them with CHAINEDSQL_BENCH_KEEP (its synthetic generator at full size,
// 75,858 trajectories):
//
//	CHAINEDSQL_BENCH_FULL=1 CHAINEDSQL_BENCH_KEEP=/tmp/bench75k go test -run '^$' -bench BenchmarkBuild -benchtime 1x ./curate
//	CHAINEDSQL_VIEW_BENCH=/tmp/bench75k go test -run '^$' -bench . -benchtime 3x ./view
//
// Without it the benchmarks use the test fixture (112 rows).
const BenchEnv = "CHAINEDSQL_VIEW_BENCH"

func benchPath(b *testing.B, kind string) string {
	if d := os.Getenv(BenchEnv); d != "" {
		return filepath.Join(d, kind)
	}
	fx := getFixture(b)
	if kind == "run" {
		return fx.run
	}
	return fx.dataset
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapAfterGC is the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// benchOpen measures building the index over path: the time per build, rows, and the heap the
// opened server keeps (bytes live after a collection, minus those before it was opened).
func benchOpen(b *testing.B, path string) {
	var s *Server
	var held uint64
	cpu0 := cpuTime()
	for b.Loop() {
		if s != nil {
			s.Close()
			s = nil
		}
		before := heapAfterGC()
		var err error
		// The full-text index is BenchmarkSearch's.
		if s, err = Open(context.Background(), Options{Paths: []string{path}, NoFullText: true}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		held = heapAfterGC() - before
		b.StartTimer()
	}
	// CPU seconds per build: the machine is shared, and wall time counts the others' load.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(s.Rows()), "rows")
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(held)/float64(s.Rows()), "heap-B/row")
	if hwm := shared.PeakRSS(); hwm > 0 {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	}
	s.Close()
}

// BenchmarkIndexDataset builds the index of a dataset dir (the index columns of every row).
func BenchmarkIndexDataset(b *testing.B) { benchOpen(b, benchPath(b, "dataset")) }

// BenchmarkIndexRun reads a run dir (every trajectory, kept in memory).
func BenchmarkIndexRun(b *testing.B) { benchOpen(b, benchPath(b, "run")) }

// BenchmarkQuery answers table queries over the dataset's index: the first page unfiltered,
// flags and a facet, a text search, a sort by tokens.
func BenchmarkQuery(b *testing.B) {
	s := openBench(b)
	benchQueries(b, func(q Query) (Page, error) { return s.ix.Query(q, nil), nil }, map[string]string{
		"page":    "",
		"filters": "teacher=glm&dialect=postgres&correct=0&violations=none&turns_min=2",
		"search":  "q=" + url.QueryEscape(`count "group by"`),
		"sort":    "sort=-tokens&offset=1000",
	}, nil)
}

// benchQueries runs a sub-benchmark of answer per named query (URL form), reporting the
// matches and what more reports.
func benchQueries(b *testing.B, answer func(Query) (Page, error), queries map[string]string, more func(b *testing.B)) {
	names := slices.Sorted(maps.Keys(queries))
	for _, name := range names {
		v, _ := url.ParseQuery(queries[name])
		q, err := ParseQuery(v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var p Page
			for b.Loop() {
				if p, err = answer(q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Total), "matches")
			if more != nil {
				more(b)
			}
		})
	}
}

// openBench opens the benchmark dataset without its full-text index (BenchmarkSearch's), for
// the length of the benchmark.
func openBench(b *testing.B) *Server {
	s, err := Open(context.Background(), Options{Paths: []string{benchPath(b, "dataset")}, NoFullText: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

// BenchmarkRow reads one row's whole record from the Parquet file and builds its page.
func BenchmarkRow(b *testing.B) {
	s := openBench(b)
	n := s.Rows()
	i := 0
	for b.Loop() {
		id := (i * 7919) % n
		i++
		e, _ := s.ix.get(id)
		if d, _ := s.load(e, id); d.Error != "" {
			b.Fatal(d.Error)
		}
	}
}

// BenchmarkSearch answers full-text queries over the dataset's messages (the table's first
// page and the match count), after building the full-text index once; it reports that build's
// CPU time and the heap the index holds.
func BenchmarkSearch(b *testing.B) {
	before := heapAfterGC()
	cpu0 := cpuTime()
	s, err := Open(context.Background(), Options{Paths: []string{benchPath(b, "dataset")}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitSearch(context.Background()); err != nil {
		b.Fatal(err)
	}
	build := cpuTime() - cpu0
	held := heapAfterGC() - before
	benchQueries(b, s.Query, map[string]string{
		"reasoning-word":      "text=great&in=reasoning",
		"reasoning-two-words": "text=" + url.QueryEscape("while people") + "&in=reasoning",
		"reasoning-prefix":    "text=th&in=reasoning",
		"all-fields":          "text=count",
		"with-filters":        "text=great&in=reasoning&teacher=glm&correct=0&sort=-tokens",
	}, func(b *testing.B) {
		b.ReportMetric(build.Seconds(), "index-build-cpu-s")
		b.ReportMetric(float64(held)/(1<<20), "rows+text-index-heap-MiB")
	})
}

// BenchmarkExport writes the rows of a filter as Parquet (to a discarding writer): 12,643 of
// the 75,858 rows for teacher=glm&dialect=sqlite|mysql, spread over every row group.
func BenchmarkExport(b *testing.B) {
	s := openBench(b)
	v, _ := url.ParseQuery("teacher=glm&dialect=sqlite&dialect=mysql")
	q, _ := ParseQuery(v)
	var n int
	var err error
	cpu0 := cpuTime()
	for b.Loop() {
		if n, err = s.Export(context.Background(), q, FormatParquet, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "rows")
	// CPU seconds per export: the machine is shared, and wall time counts the others' load.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkCharts computes the charts of the rows page over the dataset's index: no filter,
// and a teacher with a range of turns.
func BenchmarkCharts(b *testing.B) {
	s := openBench(b)
	for _, c := range []struct{ name, query string }{{"all", ""}, {"filtered", "teacher=glm&turns_min=2"}} {
		v, _ := url.ParseQuery(c.query)
		q, _ := ParseQuery(v)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Charts(q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
