package cpu

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/hugemem"
)

// readAlign is the granularity of a ReadProbe's parts in uint64s (512 bytes): readSumAVX2 takes
// multiples of 32.
const readAlign = 64

// minReadBuffer is the smallest buffer a ReadProbe reads: 256 MiB, at least 4× the L3 of any
// one CCD of the EPYC parts we run on, for VMs that report no L3 size.
const minReadBuffer = 256 << 20

// ReadProbe measures the machine's memory read bandwidth: Threads() workers each stream their
// own contiguous part of a buffer of at least 4× the L3 cache (and at least minReadBuffer) with
// pure loads into several independent accumulators (readSum), so that nothing of it is
// cache-resident and no per-part hand-off or arithmetic limits the rate. The buffer is held as
// the weights are (huge pages where the kernel gives them) and filled with its own indices, so
// that every sweep's per-part sums are checked: a load skipped or misplaced fails the
// measurement. Not safe for concurrent use.
type ReadProbe struct {
	mem *hugemem.Buffer
	buf []uint64
}

// NewReadProbe allocates and fills the buffer: at least size bytes, 4× the L3 and
// minReadBuffer.
func NewReadProbe(size int) *ReadProbe {
	size = max(size, 4*CPU().L3, minReadBuffer)
	return newReadProbe((size/8 + readAlign - 1) / readAlign * readAlign)
}

// newReadProbe returns a probe of n uint64s (a multiple of readAlign).
func newReadProbe(n int) *ReadProbe {
	mem := hugemem.Alloc(8 * n)
	buf := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem.Bytes))), n)
	for i := range buf {
		buf[i] = uint64(i)
	}
	return &ReadProbe{mem: mem, buf: buf}
}

// Bytes returns the buffer's size.
func (p *ReadProbe) Bytes() int { return 8 * len(p.buf) }

// Close frees the buffer.
func (p *ReadProbe) Close() error {
	p.buf = nil
	return p.mem.Free()
}

// sweep reads the whole buffer once over Threads() parts and returns its duration, checking
// every part's sum.
func (p *ReadProbe) sweep() (time.Duration, error) {
	th := Threads()
	n := len(p.buf)
	bound := func(i int) int { return n / readAlign * i / th * readAlign }
	sums := make([]uint64, th)
	t0 := time.Now()
	parallelRows(th, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sums[i] = readSum(p.buf[bound(i):bound(i+1)])
		}
	})
	d := time.Since(t0)
	for i, s := range sums {
		lo, hi := uint64(bound(i)), uint64(bound(i+1))
		if want := (lo + hi - 1) * (hi - lo) / 2; s != want {
			return 0, fmt.Errorf("read bandwidth: part %d of %d summed to %d, want %d", i, th, s, want)
		}
	}
	return d, nil
}

// Pass sweeps the buffer repeatedly for about d (at least twice) and returns the bytes per
// second of the fastest sweep. ctx cancels between sweeps.
func (p *ReadProbe) Pass(ctx context.Context, d time.Duration) (float64, error) {
	if p.buf == nil {
		return 0, errors.New("read bandwidth: probe closed")
	}
	var best time.Duration
	start := time.Now()
	for i := 0; i < 2 || time.Since(start) < d; i++ {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("read bandwidth: %w", err)
		}
		s, err := p.sweep()
		if err != nil {
			return 0, err
		}
		if best == 0 || s < best {
			best = s
		}
	}
	return float64(p.Bytes()) / best.Seconds(), nil
}

// readSumGo is readSum in Go: eight independent accumulators.
func readSumGo(s []uint64) uint64 {
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for len(s) >= 8 {
		a0 += s[0]
		a1 += s[1]
		a2 += s[2]
		a3 += s[3]
		a4 += s[4]
		a5 += s[5]
		a6 += s[6]
		a7 += s[7]
		s = s[8:]
	}
	for _, v := range s {
		a0 += v
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}
