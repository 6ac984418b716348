package bench

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/chainedsql/chainedsql/inference/cpu"
)

// Reading is what ReadBandwidth measured: the machine's memory read bandwidth alone, with no
// model, as the roofline measures it around each decode run. A peer's decode run (llama-bench)
// measured between two Readings can be set against the same probe as ours, so that runs met in
// different states of the host's memory are told apart (scripts/decode-depth.sh).
type Reading struct {
	CPU       cpu.Machine `json:"cpu"`
	Threads   int         `json:"threads"`
	ReadGBs   float64     `json:"read_gb_s"`         // the best pass
	Samples   []float64   `json:"read_samples_gb_s"` // every pass, in order
	BufferMiB float64     `json:"read_buffer_mib"`
}

// ReadBandwidth measures passes read bandwidth passes (each rooflinePass long, the fastest
// sweep of each counting) on threads threads (0 keeps cpu.Threads()).
func ReadBandwidth(ctx context.Context, threads, passes int) (*Reading, error) {
	switch {
	case passes < 1:
		return nil, fmt.Errorf("bench: read passes %d must be >= 1", passes)
	case threads < 0:
		return nil, fmt.Errorf("bench: threads %d must be >= 0", threads)
	}
	if threads > 0 {
		cpu.SetThreads(threads)
	}
	probe := cpu.NewReadProbe(0)
	defer probe.Close()
	r := &Reading{CPU: cpu.CPU(), Threads: cpu.Threads(), BufferMiB: float64(probe.Bytes()) / (1 << 20)}
	for range passes {
		bw, err := probe.Pass(ctx, rooflinePass)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		r.Samples = append(r.Samples, bw/1e9)
		r.ReadGBs = max(r.ReadGBs, bw/1e9)
	}
	return r, nil
}

// WriteText prints r in a line or two.
func (r *Reading) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu      %s\n", r.CPU)
	fmt.Fprintf(&b, "read     %.1f GB/s on %d threads (best of passes %s GB/s, %.0f MiB buffer)\n",
		r.ReadGBs, r.Threads, joinf(r.Samples, "%.1f"), r.BufferMiB)
	_, err := io.WriteString(w, b.String())
	return err
}
