package cpu

import (
	"sync/atomic"
	"unsafe"
)

// The q8 panel layout (Matrix.Q8Panels). Rows are held in groups of 32, each group where its
// rows were (32·Cols bytes of Q8, 32·Cols/Q8Block scales): within a group, the 64 bytes at
// 128·q hold columns 4q..4q+3 of rows 0-15 (four bytes per row, row after row), the 64 bytes at
// 128·q+64 the same of rows 16-31, each byte XORed with 0x80 (w+128: VPDPBUSD multiplies
// unsigned by signed bytes); the scales are IEEE halves (Matrix.Scales16, in the memory the f32
// scales had), the 64 bytes at 64·b holding block b's scale of rows 0-15, then of rows 16-31. It
// is the packing the int8 matrix-matrix kernel reads (packRows, gemmQ8VNNI), done once at load
// instead of once per product, with half the bytes of scales (gemmQ8VNNIH): q8 decode streams 34
// bytes per 32 weights instead of 36, as llama.cpp's q8_0 does. The halves hold the scales
// exactly: Quantize8 keeps its scales rounded to halves, and PackQ8Panels packs no matrix with a
// scale a half does not hold.
//
// Decode reads it through dot128Q8P: four groups a call, one from each quarter of a thread's
// range (four sequential streams, as matVecQuarters reads rows), one 64-byte load and one
// VPDPBUSD per 64 weights, the int32 sums of a block widened once per 16 rows. The row layout
// takes eight instructions per 64 weights of a row (dot4Q8VNNIFar: the bias, the correction,
// the dot product, the widening, two scale broadcasts, the scale product, the accumulation). On
// Zen 5 the panels stream the 0.5B decode token's q8 products faster in every round of the
// in-process A/B (BenchmarkQ8PanelsAB: medians 11% at one thread, 9% at two) and the whole
// model decodes 10-17% faster (docs/BENCHMARKS.md, "Issue 30: q8 weights in panels").

// panelRows is the number of rows of one panel group.
const panelRows = 32

// PackQ8Panels rearranges w into the panel layout in place, when w is Q8 in rows, its row count
// is a multiple of 32, every scale is a half's value (Quantize8's are), the AVX512_VNNI kernels
// are in use and the decode plan holds q8 weights in panels (DecodePlan's Q8Panels); it reports
// whether it did. The scales move to Scales16, in Scales' memory (its first half), and Scales
// becomes nil (scales in rows as halves already, HalveQ8Scales, are rearranged in their memory).
// Every product and RowF32 take either layout, with the same values of w.
func PackQ8Panels(w *Matrix) bool {
	if !q8Panels() {
		return false
	}
	return packQ8Panels(w)
}

// q8Panels reports whether PackQ8Panels packs: the VNNI kernels are in use and the plan asks.
func q8Panels() bool { return useVNNI() && DecodePlan().Q8Panels }

// packQ8Panels is PackQ8Panels without the plan's consent (the kernels must be in use).
func packQ8Panels(w *Matrix) bool {
	if w.DType != Q8 || w.Q8Panels || w.Rows == 0 || w.Rows%panelRows != 0 || w.Cols == 0 || w.check() != nil {
		return false
	}
	ns := w.Rows * w.Cols / Q8Block
	src := w.Scales // the f32 scales, rearranged in place
	var h []uint16  // where the halves go
	if src == nil { // halves in rows: widened into a copy, which is rearranged and put back
		h, src = w.Scales16[:ns], make([]float32, ns)
		for i, v := range h {
			src[i] = F16ToF32(v)
		}
	} else if !halvesHold(src[:ns]) {
		return false
	} else {
		h = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(src))), ns)
	}
	c, nb := w.Cols, w.Cols/Q8Block
	tq := make([]int8, panelRows*c)
	ts := make([]float32, panelRows*nb)
	for g := range w.Rows / panelRows {
		q := w.Q8[g*panelRows*c : (g+1)*panelRows*c]
		s := src[g*panelRows*nb : (g+1)*panelRows*nb]
		copy(tq, q)
		copy(ts, s)
		for pn := range 2 {
			packRows(unsafe.Pointer(&q[64*pn]), 128, unsafe.Pointer(&tq[0]), c, 16*pn, panelRows-1, panelRows, 0, c, 0x80808080)
			packRows(unsafe.Pointer(&s[16*pn]), 128, unsafe.Pointer(&ts[0]), 4*nb, 16*pn, panelRows-1, panelRows, 0, 4*nb, 0)
		}
	}
	// In place, front to back: half i takes bytes 2i and 2i+1, of scale i/2, read already.
	for i, s := range src[:ns] {
		h[i] = F32ToF16(s)
	}
	w.Scales, w.Scales16, w.Q8Panels = nil, h, true
	return true
}

// q8At returns w's int8 weight at row r, column j, in either layout.
func q8At(w *Matrix, r, j int) int8 {
	c := w.Cols
	if !w.Q8Panels {
		return w.Q8[r*c+j]
	}
	return int8(uint8(w.Q8[r/32*32*c+j/4*128+r%32/16*64+r%16*4+j%4]) ^ 0x80)
}

// q8ScaleAt returns the scale of w's row r, block b, in either layout.
func q8ScaleAt(w *Matrix, r, b int) float32 {
	nb := w.Cols / Q8Block
	switch {
	case w.Q8Panels:
	case w.Scales16 != nil:
		return F16ToF32(w.Scales16[r*nb+b])
	default:
		return w.Scales[r*nb+b]
	}
	return F16ToF32(w.Scales16[r/32*32*nb+b*32+r%32/16*16+r%16])
}

// preparePanelVec quantises one input row x for panelRange (quantX8 with one correction per
// block), into buffers of the gemmIn pool: no padding rows, as no other row is read.
func preparePanelVec(w *Matrix, x []float32) *gemmIn {
	in := gemmInPool.Get().(*gemmIn)
	k := w.Cols
	in.k = k
	in.xq, in.corr, in.xs = grow(in.xq, k), grow(in.corr, k/Q8Block), grow(in.xs, k/4)
	quantX8(&in.xq[0], &in.corr[0], &in.xs[0], &x[0], k/Q8Block, 1)
	return in
}

// panelRange computes dst[lo:hi] (one input row, quantised by preparePanelVec; lo and hi multiples
// of 32) for w in panels: four groups a call, one from each quarter of the range, then of the
// 1-3 groups left over two in one call (dot64Q8P) and an odd last one alone (dot32Q8P).
func panelRange(dst []float32, w *Matrix, in *gemmIn, lo, hi int) {
	c, nb := w.Cols, w.Cols/Q8Block
	g0, g1 := lo/panelRows, hi/panelRows
	m := (g1 - g0) / 4
	wq := unsafe.Pointer(unsafe.SliceData(w.Q8))
	var out [4 * panelRows]float32
	for g := g0; g < g0+m; g++ {
		dot128Q8P((*byte)(unsafe.Add(wq, g*panelRows*c)), m*panelRows*c, &w.Scales16[g*panelRows*nb], m*panelRows*nb,
			&in.xq[0], &in.xs[0], &in.corr[0], nb, &out)
		for j := range 4 {
			r := (g + j*m) * panelRows
			copy(dst[r:r+panelRows], out[j*panelRows:(j+1)*panelRows])
		}
	}
	g := g0 + 4*m
	if g+2 <= g1 {
		var two [2 * panelRows]float32
		dot64Q8P((*byte)(unsafe.Add(wq, g*panelRows*c)), panelRows*c, &w.Scales16[g*panelRows*nb], panelRows*nb,
			&in.xq[0], &in.xs[0], &in.corr[0], nb, &two)
		copy(dst[g*panelRows:(g+2)*panelRows], two[:])
		g += 2
	}
	var one [panelRows]float32
	for ; g < g1; g++ {
		dot32Q8P((*byte)(unsafe.Add(wq, g*panelRows*c)), &w.Scales16[g*panelRows*nb], &in.xq[0], &in.xs[0], &in.corr[0], nb, &one)
		copy(dst[g*panelRows:(g+1)*panelRows], one[:])
	}
}

// prefetchNextBytes is how many bytes of each of its four streams a thread fetches into L2 from
// the start of its part of the next q8 product in panels while it waits (0: none).
var prefetchNextBytes atomic.Int64

func init() { prefetchNextBytes.Store(16 << 10) }

// SetDecodeOrder records the order in which decode runs its products: order[i+1] after
// order[i], and order[0] after the last (the next token), each one matrix or the matrices one
// MatMuls call takes together (same dtype, width and layout). A thread that finishes its part of a q8 product in panels early then
// fetches the start of its part of the next one while it waits (the other threads' parts, the
// norms and attention between products), instead of leaving memory idle. A hint only: results
// do not depend on it, and a product run out of order costs nothing but the fetched lines.
func SetDecodeOrder(order [][]*Matrix) {
	for i, g := range order {
		for _, w := range g {
			w.next = order[(i+1)%len(order)]
		}
	}
}

// prefetchNext fetches into L2 the start of each stream of part first of the product over next
// (the matrices of one MatMuls call, their rows one range), cut as mvRoute.parallel cuts it
// (panelParts, parallelParts): up to prefetchNextBytes of each of the four quarters
// panelRange reads and their scales. Matrices MatMuls does not fuse (sameKind) run one by one,
// next[0] first: only its part is fetched.
func prefetchNext(next []*Matrix, first int, fetch func(p *byte, lines int)) {
	if !sameKind(next) {
		next = next[:1]
	}
	w0 := next[0]
	if !w0.Q8Panels || !useVNNI() {
		return
	}
	rows := 0
	for _, w := range next {
		rows += w.Rows
	}
	size := partSize(rows, panelRows, panelParts(true, rows*w0.Cols)*Threads())
	lo, hi := first*size, min((first+1)*size, rows)
	budget := int(prefetchNextBytes.Load())
	off := 0
	for _, w := range next {
		if a, b := max(lo-off, 0), min(hi-off, w.Rows); a < b {
			prefetchPanelPart(w, a, b, budget, fetch)
		}
		off += w.Rows
	}
}

// prefetchPanelPart fetches (fetch: prefetchL2, or a test's recorder) up to budget bytes from the
// start of each of the streams panelRange(dst, w, in, lo, hi) reads, and a sixteenth of that of
// their scales.
func prefetchPanelPart(w *Matrix, lo, hi, budget int, fetch func(p *byte, lines int)) {
	c, nb := w.Cols, w.Cols/Q8Block
	g0, g1 := lo/panelRows, hi/panelRows
	m := (g1 - g0) / 4
	streams, span := 4, m
	if m == 0 {
		streams, span = 1, g1-g0
	}
	if span == 0 {
		return
	}
	wb := min(budget, span*panelRows*c)
	sb := min(budget/16, span*panelRows*nb*2)
	wq := unsafe.Pointer(unsafe.SliceData(w.Q8))
	sq := unsafe.Pointer(unsafe.SliceData(w.Scales16))
	for j := range streams {
		g := g0 + j*m
		fetch((*byte)(unsafe.Add(wq, g*panelRows*c)), (wb+63)>>6)
		if sb > 0 {
			fetch((*byte)(unsafe.Add(sq, 2*g*panelRows*nb)), (sb+63)>>6)
		}
	}
}
