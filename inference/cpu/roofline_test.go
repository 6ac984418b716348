package cpu

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestReadSum: the read kernel (readSumAVX2 where the CPU has AVX2) and its Go version sum
// every element once, at every length the probe hands them, with values that wrap.
func TestReadSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]uint64, 4096+7)
	for i := range buf {
		buf[i] = r.Uint64()
	}
	for _, n := range []int{0, 64, 128, 192, 1024, 4096} {
		for _, off := range []int{0, 1, 7} { // unaligned starts too
			s := buf[off : off+n]
			var want uint64
			for _, v := range s {
				want += v
			}
			if got := readSum(s); got != want {
				t.Errorf("readSum(%d at %d) = %d, want %d (AVX2 kernel %v)", n, off, got, want, hasReadAVX2)
			}
			if got := readSumGo(s); got != want {
				t.Errorf("readSumGo(%d at %d) = %d, want %d", n, off, got, want)
			}
		}
	}
	if got, want := readSumGo(buf[:13]), readSumGo(buf[:8])+readSumGo(buf[8:13]); got != want {
		t.Errorf("readSumGo of 13: %d, want %d", got, want)
	}
	// A change in either stream's half changes the sum.
	s := buf[:1024]
	base := readSum(s)
	for _, i := range []int{0, 31, 511, 512, 1023} {
		s[i]++
		if readSum(s) != base+1 {
			t.Errorf("readSum missed element %d", i)
		}
		s[i]--
	}
}

// TestReadProbe: a pass checks each part's sum over 1, 2 and 3 threads (a corrupted element
// fails it, wherever it lies), and a closed or cancelled probe reports an error.
func TestReadProbe(t *testing.T) {
	defer SetThreads(Threads())
	p := newReadProbe(64 * 1000)
	defer p.Close()
	for _, th := range []int{1, 2, 3} {
		SetThreads(th)
		bw, err := p.Pass(context.Background(), time.Millisecond)
		if err != nil || !(bw > 0) {
			t.Fatalf("%d threads: %v, %v", th, bw, err)
		}
		for _, i := range []int{0, len(p.buf) / 2, len(p.buf) - 1} {
			p.buf[i] ^= 1 << 40
			if _, err := p.Pass(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "summed to") {
				t.Errorf("%d threads, element %d corrupted: error %v", th, i, err)
			}
			p.buf[i] ^= 1 << 40
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Pass(ctx, 0); err == nil {
		t.Error("cancelled: no error")
	}
	p.Close()
	if _, err := p.Pass(context.Background(), 0); err == nil {
		t.Error("closed: no error")
	}
}

// TestNewReadProbeSize: the buffer is at least 4× the L3 and minReadBuffer, filled with its
// indices.
func TestNewReadProbeSize(t *testing.T) {
	p := NewReadProbe(1 << 20)
	defer p.Close()
	if p.Bytes() < minReadBuffer || p.Bytes() < 4*CPU().L3 || p.Bytes()%(8*readAlign) != 0 {
		t.Errorf("probe of %d bytes; L3 %d", p.Bytes(), CPU().L3)
	}
	if p.buf[12345] != 12345 {
		t.Errorf("buffer not filled with its indices: %d", p.buf[12345])
	}
}
