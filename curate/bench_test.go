package curate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chainedsql/chainedsql/internal/benchprocs"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// BenchmarkBuild curates a synthetic run (realistic shapes, see synth) on GOMAXPROCS workers and
// reports rows/s, tokens/s and the process's peak resident memory. The run has 3,000
// trajectories by default; CHAINEDSQL_BENCH_FULL=1 makes it the full 75,858 (BIRD dev × 4
// teachers × 3 dialects, rounded as in the issue), CHAINEDSQL_BENCH_ROWS=N any size.
//
//	CHAINEDSQL_BENCH_FULL=1 go test -run '^$' -bench BenchmarkBuild -benchtime 1x -cpu 2 ./curate
//
// CHAINEDSQL_BENCH_KEEP=DIR keeps the run and the last dataset as DIR/run and DIR/dataset (the
// viewer's benchmarks read them, see view/bench_test.go).
func BenchmarkBuild(b *testing.B) {
	benchprocs.Threads(b) // Build's workers follow GOMAXPROCS (-cpu)
	keep := os.Getenv("CHAINEDSQL_BENCH_KEEP")
	n := 3000
	if os.Getenv("CHAINEDSQL_BENCH_FULL") == "1" {
		n = 75858
	}
	if v := os.Getenv("CHAINEDSQL_BENCH_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("CHAINEDSQL_BENCH_ROWS: %v", err)
		}
	}
	tok := loadTokenizer(b)
	tmp := b.TempDir()
	run := filepath.Join(tmp, "run")
	// Stream the run to disk so that generation does not raise the peak memory figure.
	w := newRunWriter(b, run, 5000)
	s := newSynth(42)
	for i := 0; i < n; i++ {
		w.add(s.trajectory(i))
	}
	w.close()
	var rep *BuildReport
	i := 0
	b.ResetTimer()
	for b.Loop() {
		out := filepath.Join(tmp, fmt.Sprintf("ds%d", i))
		i++
		var err error
		if rep, err = Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if keep == "" {
			os.RemoveAll(out)
		}
		b.StartTimer()
	}
	if keep != "" {
		if err := keepOutputs(keep, run, filepath.Join(tmp, fmt.Sprintf("ds%d", i-1))); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(rep.Trajectories)/sec, "rows/s")
	b.ReportMetric(float64(rep.Tokens.Sum)/sec, "tokens/s")
	b.ReportMetric(rep.Tokens.Mean, "tokens/row")
	if hwm := shared.PeakRSS(); hwm > 0 {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	}
}

// keepOutputs moves the benchmark's run and dataset to dir/run and dir/dataset.
func keepOutputs(dir, run, dataset string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, mv := range [][2]string{{run, filepath.Join(dir, "run")}, {dataset, filepath.Join(dir, "dataset")}} {
		os.RemoveAll(mv[1])
		if err := os.Rename(mv[0], mv[1]); err != nil {
			return fmt.Errorf("CHAINEDSQL_BENCH_KEEP: %w", err)
		}
	}
	return nil
}
