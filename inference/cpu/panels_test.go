package cpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/hugemem"
)

// panelPair returns a random q8 matrix in rows (varied scales, each a half's value, as
// Quantize8's are) and the same packed in panels.
func panelPair(t testing.TB, rows, cols int, seed uint64) (w, p *Matrix) {
	w = fastMatrix(Q8, rows, cols, seed)
	for i := range w.Scales {
		w.Scales[i] = F16ToF32(F32ToF16(float32(i%13+1) / 500))
	}
	return w, convertedCopy(t, w, packQ8Panels)
}

// convertedCopy returns a copy of the q8 matrix w (its own weights and f32 scales) given to
// convert (packQ8Panels, HalveQ8Scales), which must take it.
func convertedCopy(t testing.TB, w *Matrix, convert func(*Matrix) bool) *Matrix {
	c := *w
	c.Q8, c.Scales = slices.Clone(w.Q8), slices.Clone(w.Scales)
	if !convert(&c) {
		t.Fatalf("%d×%d: not converted", w.Rows, w.Cols)
	}
	return &c
}

// TestQ8Panels checks q8 weights in panels against the same weights in rows: decode (one input
// row, dot128Q8P in quarters, dot64Q8P and dot32Q8P on the groups left over) and the
// matrix-matrix kernel reading the panels in place give the results of gemmQ8VNNI on the rows
// packed per product, to the bit, for every thread count; RowF32 gives the row's values; and with the assembly kernels
// off every product is the portable reference's.
func TestQ8Panels(t *testing.T) {
	if !useVNNI() {
		t.Skip("the panel layout is for the AVX512_VNNI kernels, which this CPU (or tier) lacks")
	}
	shapes := [][2]int{{32, 32}, {64, 96}, {96, 896}, {416, 896}, {544, 160}, {128, 4864}, {4864, 128}} // the last: dot128Q8P on ranges past group 0 at 2 and 3 threads
	for si, sh := range shapes {
		rows, cols := sh[0], sh[1]
		w, p := panelPair(t, rows, cols, uint64(si+1))
		for _, n := range []int{1, 2, 7, 17} {
			x := fastMatrix(F32, n, cols, uint64(100+si)).F32
			want := make([]float32, n*rows)
			matMulGemm(want, w, x, n) // the rows, packed for this product
			for _, th := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%dx%d/n=%d/t%d", rows, cols, n, th), func(t *testing.T) {
					defer withThreads(th)()
					got := make([]float32, n*rows)
					MatMul(got, p, x, n)
					exact := cols <= q8KC || n > 1 // decode reads all columns at once, the gemm path in chunks
					for i := range want {
						d := math.Abs(float64(got[i] - want[i]))
						if exact && d != 0 || d > 1e-4*(1+math.Abs(float64(want[i]))) {
							t.Fatalf("row %d of input %d: %g, want %g", i%rows, i/rows, got[i], want[i])
						}
					}
				})
			}
		}
		rw, rp := make([]float32, cols), make([]float32, cols)
		for r := range rows {
			RowF32(rw, w, r)
			RowF32(rp, p, r)
			if !slices.Equal(rw, rp) {
				t.Fatalf("%d×%d: RowF32 of row %d differs in panels", rows, cols, r)
			}
		}
	}
	t.Run("portable", func(t *testing.T) {
		w, p := panelPair(t, 96, 160, 9)
		x := fastMatrix(F32, 3, 160, 10).F32
		was := UseSIMD(false)
		defer UseSIMD(was)
		for _, n := range []int{1, 3} {
			want, got := make([]float32, n*96), make([]float32, n*96)
			MatMul(want, w, x, n)
			MatMul(got, p, x, n)
			if !slices.Equal(got, want) {
				t.Fatalf("n=%d: the portable path in panels differs from rows", n)
			}
		}
	})
}

// TestQ8PanelsFused checks MatMuls over matrices in panels (one quantised input, one pass over
// their rows together) against one MatMul each, to the bit, and that a matrix left in rows
// (rows not a multiple of 32) among them is multiplied in its own layout.
func TestQ8PanelsFused(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX512_VNNI kernels")
	}
	_, q := panelPair(t, 96, 896, 1)
	_, k := panelPair(t, 32, 896, 2)
	_, v := panelPair(t, 64, 896, 3)
	odd := fastMatrix(Q8, 40, 896, 4)
	x := fastMatrix(F32, 1, 896, 5).F32
	for _, th := range []int{1, 2, 3} {
		restore := withThreads(th)
		for _, ws := range [][]*Matrix{{q, k, v}, {q, odd, v}} {
			dsts, want := make([][]float32, len(ws)), make([][]float32, len(ws))
			for j, w := range ws {
				dsts[j], want[j] = make([]float32, w.Rows), make([]float32, w.Rows)
				MatMul(want[j], w, x, 1)
			}
			MatMuls(dsts, ws, x, 1)
			for j := range ws {
				if !slices.Equal(dsts[j], want[j]) {
					t.Fatalf("threads %d: matrix %d of %d (%d rows) differs fused", th, j, len(ws), ws[j].Rows)
				}
			}
		}
		restore()
	}
}

// TestPackQ8PanelsDeclines: matrices the layout does not fit are left as they are.
func TestPackQ8PanelsDeclines(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX512_VNNI kernels")
	}
	odd := fastMatrix(Q8, 40, 64, 1)
	before := slices.Clone(odd.Q8)
	bf := fastMatrix(BF16, 64, 64, 2)
	_, p := panelPair(t, 64, 64, 3)
	packed := slices.Clone(p.Q8)
	wide := fastMatrix(Q8, 64, 64, 4) // one scale no half holds: panels would change the products
	wide.Scales[77] = 1.0 / 3
	wideQ, wideS := slices.Clone(wide.Q8), slices.Clone(wide.Scales)
	for _, c := range []struct {
		name string
		w    *Matrix
	}{{"rows not a multiple of 32", odd}, {"bf16", bf}, {"already in panels", p}, {"a scale no half holds", wide}} {
		if packQ8Panels(c.w) {
			t.Errorf("%s: packed", c.name)
		}
	}
	if !slices.Equal(odd.Q8, before) || odd.Q8Panels || !slices.Equal(p.Q8, packed) ||
		!slices.Equal(wide.Q8, wideQ) || !slices.Equal(wide.Scales, wideS) || wide.Scales16 != nil {
		t.Error("a declined matrix was changed")
	}
}

// TestQ8PanelsHalfScales: packing moves the scales to Scales16, as halves of the same values, in
// the memory the f32 scales had (nothing allocated), and Scales goes; the weights Quantize8
// writes are packed.
func TestQ8PanelsHalfScales(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX512_VNNI kernels")
	}
	w, p := panelPair(t, 96, 128, 5)
	if p.Scales != nil || len(p.Scales16) != len(w.Scales) {
		t.Fatalf("in panels: %d f32 scales, %d halves; want 0 and %d", len(p.Scales), len(p.Scales16), len(w.Scales))
	}
	nb := w.Cols / Q8Block
	for r := range w.Rows {
		for b := range nb {
			if got, want := q8ScaleAt(p, r, b), w.Scales[r*nb+b]; got != want {
				t.Fatalf("row %d block %d: scale %g in panels, %g in rows", r, b, got, want)
			}
		}
	}
	f := fastMatrix(F32, 64, 96, 6)
	q := Quantize8(f)
	mem := unsafe.SliceData(q.Scales)
	if !packQ8Panels(q) {
		t.Fatal("Quantize8's matrix was not packed")
	}
	if unsafe.Pointer(unsafe.SliceData(q.Scales16)) != unsafe.Pointer(mem) {
		t.Error("the halves are not in the f32 scales' memory")
	}
}

// BenchmarkQ8PanelsAB times the q8 weight products of one 0.5B decode token (24 distinct layers
// and the LM head, huge pages) in rows (the plan's kernels without panels, f32 scales) and in
// panels (half scales: 34 bytes per 32 weights to the rows' 36), alternating in one process, each
// round between two passes of the read probe: rows% and panels% are their GB/s (each its own
// bytes) against the better pass, speedup the rows' time over the panels' (medians; q8LayoutAB).
func BenchmarkQ8PanelsAB(b *testing.B) {
	if !useVNNI() {
		b.Skip("no AVX512_VNNI kernels")
	}
	q8LayoutAB(b, [2]string{"rows", "panels"}, packQ8Panels)
}

// q8LayoutAB times the q8 weight products of one 0.5B decode token (24 distinct layers and the LM
// head, each copied into huge pages twice: once as it is, in rows with f32 scales, and once given
// to convert) in the two layouts, alternating in one process, each round between two passes of
// the read probe; it reports for each its GB/s (its own bytes, Matrix.Bytes) against the better
// pass ("names[i]%") and the first layout's time over the second's ("speedup"), medians.
func q8LayoutAB(b *testing.B, names [2]string, convert func(*Matrix) bool) {
	var mem hugemem.Arena
	defer mem.Free()
	var sets [2][]*Matrix
	add := func(m *Matrix) {
		c := hugeCopy(&mem, m)
		if !convert(c) {
			b.Fatalf("%d×%d: not converted to %s", m.Rows, m.Cols, names[1])
		}
		sets[0], sets[1] = append(sets[0], hugeCopy(&mem, m)), append(sets[1], c)
	}
	for l := range qLayers {
		for _, m := range layerMats(Q8, uint64(10*l)) {
			add(m)
		}
	}
	add(fastMatrix(Q8, qVocab, qHidden, 999))
	var bytes [2]float64
	for i, set := range sets {
		for _, m := range set {
			bytes[i] += float64(m.Bytes())
		}
	}
	x := fastMatrix(F32, 1, qInter, 5).F32
	dst := make([]float32, qVocab)
	probe := NewReadProbe(0)
	defer probe.Close()
	run := func(ms []*Matrix) float64 {
		t0 := time.Now()
		for _, m := range ms {
			MatVec(dst, m, x[:m.Cols])
		}
		return time.Since(t0).Seconds()
	}
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", th), func(b *testing.B) {
			defer withThreads(th)()
			var r0, r1, sp []float64
			for b.Loop() {
				p0, _ := probe.Pass(context.Background(), 150*time.Millisecond)
				t0, t1 := math.Inf(1), math.Inf(1)
				for range 3 {
					t0 = min(t0, run(sets[0]))
					t1 = min(t1, run(sets[1]))
				}
				p1, _ := probe.Pass(context.Background(), 150*time.Millisecond)
				pb := max(p0, p1)
				r0, r1, sp = append(r0, bytes[0]/t0/pb), append(r1, bytes[1]/t1/pb), append(sp, t0/t1)
			}
			b.ReportMetric(100*median(r0), names[0]+"%")
			b.ReportMetric(100*median(r1), names[1]+"%")
			b.ReportMetric(median(sp), "speedup")
			b.Logf("speedups %.2f", sp)
		})
	}
}

// TestDot64Q8P: dot64Q8P gives, for two panel groups ldw bytes apart (adjacent, and as far apart
// as panelRange's quarters put them), the results of one dot32Q8P call per group, to the bit.
func TestDot64Q8P(t *testing.T) {
	if !useVNNI() {
		t.Skip("the panel kernels are AVX512_VNNI assembly, which this CPU (or tier) lacks")
	}
	const cols = 160
	_, p := panelPair(t, 8*panelRows, cols, 3)
	x := fastMatrix(F32, 1, cols, 4).F32
	in := preparePanelVec(p, x)
	defer gemmInPool.Put(in)
	nb := cols / Q8Block
	for _, gs := range [][2]int{{0, 1}, {2, 7}, {5, 6}, {1, 4}} {
		var two [2 * panelRows]float32
		var want [2][panelRows]float32
		w0 := (*byte)(unsafe.Pointer(&p.Q8[gs[0]*panelRows*cols]))
		dot64Q8P(w0, (gs[1]-gs[0])*panelRows*cols, &p.Scales16[gs[0]*panelRows*nb], (gs[1]-gs[0])*panelRows*nb,
			&in.xq[0], &in.xs[0], &in.corr[0], nb, &two)
		for j, g := range gs {
			dot32Q8P((*byte)(unsafe.Pointer(&p.Q8[g*panelRows*cols])), &p.Scales16[g*panelRows*nb], &in.xq[0], &in.xs[0], &in.corr[0], nb, &want[j])
			if !slices.Equal(two[j*panelRows:(j+1)*panelRows], want[j][:]) {
				t.Fatalf("groups %v: group %d: %v, want %v", gs, g, two[j*panelRows:(j+1)*panelRows], want[j])
			}
		}
	}
}

// TestPanelParts: a one-row product in panels below panelWholeWork weights is cut into one part
// per thread (the 0.5B layers' products), a larger one (its LM head) and any other route's into
// partsPerThread per thread; and mvPlan gives a one-row product over panels that route.
func TestPanelParts(t *testing.T) {
	defer withThreads(2)()
	for _, c := range []struct {
		rows, cols int
		panels     bool
		want       int32
	}{
		{896, 896, true, 2}, {9728, 896, true, 2}, {896, 4864, true, 2}, {151936, 896, true, 2 * partsPerThread},
		{896, 896, false, 7}, // 28 groups in parts of ⌈28/8⌉
	} {
		var n atomic.Int32
		r := mvRoute{align: panelRows, panels: c.panels}
		r.parallel(c.rows*c.cols, c.rows, func(lo, hi int) { n.Add(1) }, nil)
		if n.Load() != c.want {
			t.Errorf("%d×%d (panels %v): %d parts, want %d", c.rows, c.cols, c.panels, n.Load(), c.want)
		}
	}
	if !useVNNI() {
		return
	}
	// And MatMul's route for one input row over weights in panels is the one cut so.
	_, p := panelPair(t, 64, 96, 5)
	r, ok := mvPlan(p, make([]float32, 96), 1)
	if !ok || !r.panels || r.align != panelRows {
		t.Errorf("mvPlan on panels: route %v (panels %v, align %d), want the panel route", ok, r.panels, r.align)
	}
	if ok {
		r.release()
	}
}

// TestPrefetchNextPart: a thread waiting after part i of a product fetches the start of each
// stream panelRange reads of part i of the next product, as mvRoute.parallel cuts it (one part
// per thread under panelWholeWork, partsPerThread above it; a fused MatMuls's parts run across
// its matrices), within the stream and its scales, and nothing else.
func TestPrefetchNextPart(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX-512 VNNI: no q8 panels")
	}
	for _, th := range []int{2, 3} {
		restore := withThreads(th)
		cols := 64
		var group []*Matrix
		for i, rows := range []int{896, 128, 96} { // q, k, v: parts across the three
			_, p := panelPair(t, rows, cols, uint64(40+i))
			group = append(group, p)
		}
		total := 896 + 128 + 96
		// The parts mvRoute.parallel runs, in order.
		var parts [][2]int
		var mu sync.Mutex
		r := mvRoute{align: panelRows, panels: true}
		r.parallel(minParallelWork+total*cols, total, func(lo, hi int) {
			mu.Lock()
			parts = append(parts, [2]int{lo, hi})
			mu.Unlock()
		}, nil)
		slices.SortFunc(parts, func(a, b [2]int) int { return a[0] - b[0] })
		if len(parts) != th {
			t.Fatalf("%d threads: %d parts, want one per thread", th, len(parts))
		}
		const budget = 1024
		was := prefetchNextBytes.Swap(budget)
		for i, pt := range parts {
			type span struct{ p, n uintptr }
			var got []span
			prefetchNext(group, i, func(p *byte, lines int) {
				got = append(got, span{uintptr(unsafe.Pointer(p)), uintptr(64 * lines)})
			})
			// Want: per matrix the part covers, the start of each quarter of its groups.
			var want []span
			off := 0
			for _, w := range group {
				a, b := max(pt[0]-off, 0), min(pt[1]-off, w.Rows)
				off += w.Rows
				if a >= b {
					continue
				}
				g0, g1 := a/panelRows, b/panelRows
				m, streams := (g1-g0)/4, 4
				span1 := m
				if m == 0 {
					streams, span1 = 1, g1-g0
				}
				for j := range streams {
					g := g0 + j*m
					wb := min(budget, span1*panelRows*cols)
					want = append(want, span{uintptr(unsafe.Pointer(&w.Q8[g*panelRows*cols])), uintptr((wb + 63) / 64 * 64)})
					sb := min(budget/16, span1*panelRows*cols/Q8Block*2)
					want = append(want, span{uintptr(unsafe.Pointer(&w.Scales16[g*panelRows*cols/Q8Block])), uintptr((sb + 63) / 64 * 64)})
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%d threads, part %d %v: fetched %v, want %v", th, i, pt, got, want)
			}
		}
		prefetchNextBytes.Store(was)
		restore()
	}
}

// TestParallelIdle: a thread left without parts calls the task's idle with the first part it
// ran while another still runs its part (part 0 waits here for part 1's idle call, which comes
// from whichever thread ran part 1), and a call ends only when every part is done.
func TestParallelIdle(t *testing.T) {
	defer withThreads(2)()
	var stuck atomic.Bool
	for range 50 {
		called := make(chan int, 2)
		var done atomic.Int32
		parallelPartsIdle(2*panelRows, panelRows, 2, func(lo, hi int) {
			if lo == 0 {
				select {
				case f := <-called:
					if f != 1 {
						t.Errorf("idle(%d) while part 0 runs, want idle(1)", f)
					}
				case <-time.After(5 * time.Second):
					stuck.Store(true)
				}
			}
			done.Add(1)
		}, func(first int) { called <- first })
		if stuck.Load() {
			t.Fatal("part 0 still running after 5 s: no idle call from part 1's thread")
		}
		if done.Load() != 2 {
			t.Fatalf("parallelPartsIdle returned with %d of 2 parts done", done.Load())
		}
	}
}

// TestPrefetchNextInside: every line prefetchNext fetches lies in the Q8 or Scales16 memory of a
// matrix whose part it fetches, for fused groups of several sizes, 1-8 threads, every part index
// (past the last too) and budgets from 1 byte to more than a matrix; of a group MatMuls does not
// fuse (q in panels, k in rows with f32 scales, no Scales16) only next[0]'s, which runs first.
func TestPrefetchNextInside(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX-512 VNNI: no q8 panels")
	}
	type shape struct {
		rows  []int
		mixed bool // the second matrix in rows, f32 scales
	}
	for _, s := range []shape{{[]int{32}, false}, {[]int{160}, false}, {[]int{896, 128, 96}, false},
		{[]int{32, 32, 32}, false}, {[]int{4864, 4864}, false}, {[]int{96, 64, 32}, false}, {[]int{896, 4000}, true}} {
		for _, cols := range []int{32, 96, 896} {
			var group []*Matrix
			for i, r := range s.rows {
				w, p := panelPair(t, r, cols, uint64(50+i))
				if s.mixed && i > 0 {
					p = w
				}
				group = append(group, p)
			}
			fetched := group
			if s.mixed {
				fetched = group[:1]
			}
			for th := 1; th <= 8; th++ {
				restore := withThreads(th)
				for _, budget := range []int64{1, 100, 1024, 16 << 10, 1 << 30} {
					was := prefetchNextBytes.Swap(budget)
					for first := range partsPerThread*th + 2 {
						prefetchNext(group, first, func(p *byte, lines int) {
							a, e := uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(p))+uintptr(64*lines)
							for _, w := range fetched {
								q := uintptr(unsafe.Pointer(unsafe.SliceData(w.Q8)))
								sc := uintptr(unsafe.Pointer(unsafe.SliceData(w.Scales16)))
								if a >= q && e <= q+uintptr(len(w.Q8)) || a >= sc && e <= sc+2*uintptr(len(w.Scales16)) {
									return
								}
							}
							t.Errorf("rows %v×%d, %d threads, budget %d, part %d: %d lines at %#x outside the matrices fetched",
								s.rows, cols, th, budget, first, lines, a)
						})
					}
					prefetchNextBytes.Store(was)
				}
				restore()
			}
		}
	}
}
