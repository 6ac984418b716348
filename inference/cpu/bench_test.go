package cpu

import (
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/hugemem"
	"github.com/chainedsql/chainedsql/internal/benchprocs"
)

// Qwen2.5-0.5B shapes.
const (
	qHidden = 896
	qInter  = 4864
	qKV     = 128 // 2 KV heads × 64
	qLayers = 24
	qVocab  = 151936
)

// fastMatrix fills a Rows×Cols matrix of dtype dt with cheap pseudo-random values in [-1, 1)
// (an LCG: benchmark data only needs to be non-trivial, and generating ~0.5 G values must be fast).
func fastMatrix(dt DType, rows, cols int, seed uint64) *Matrix {
	n := rows * cols
	s := seed*0x9e3779b97f4a7c15 + 1
	next := func() uint32 {
		s = s*6364136223846793005 + 1442695040888963407
		return uint32(s >> 32)
	}
	m := &Matrix{DType: dt, Rows: rows, Cols: cols}
	switch dt {
	case F32:
		m.F32 = make([]float32, n)
		for i := range m.F32 {
			m.F32[i] = float32(int32(next())) / (1 << 31)
		}
	case BF16, F16:
		m.U16 = make([]uint16, n)
		for i := range m.U16 {
			v := next()
			if dt == BF16 {
				m.U16[i] = uint16(v&0x807f) | 0x3c00 | uint16(v>>16)&0x0380 // |x| in [2^-7, 1)
			} else {
				m.U16[i] = uint16(v&0x83ff) | 0x2000 | uint16(v>>16)&0x1800
			}
		}
	case Q8:
		m.Q8 = make([]int8, n)
		m.Scales = make([]float32, n/Q8Block)
		for i := range m.Q8 {
			m.Q8[i] = int8(next())
		}
		for i := range m.Scales {
			m.Scales[i] = F16ToF32(F32ToF16(1.0 / 127)) // a half's value, as Quantize8's scales: packQ8Panels takes it
		}
	}
	return m
}

// hugeCopy returns m copied into a (huge-page memory, as the model's weights are held).
func hugeCopy(a *hugemem.Arena, m *Matrix) *Matrix {
	o := *m
	switch m.DType {
	case F32:
		o.F32 = hugemem.Float32s(a.Alloc(4*len(m.F32)), len(m.F32))
		copy(o.F32, m.F32)
	case BF16, F16:
		o.U16 = hugemem.Uint16s(a.Alloc(2*len(m.U16)), len(m.U16))
		copy(o.U16, m.U16)
	case Q8:
		o.Q8 = hugemem.Int8s(a.Alloc(len(m.Q8)), len(m.Q8))
		copy(o.Q8, m.Q8)
		o.Scales = hugemem.Float32s(a.Alloc(4*len(m.Scales)), len(m.Scales))
		copy(o.Scales, m.Scales)
	}
	return &o
}

func weightBytes(m *Matrix) int64 {
	switch m.DType {
	case F32:
		return int64(m.Rows*m.Cols) * 4
	case BF16, F16:
		return int64(m.Rows*m.Cols) * 2
	}
	sb := 4 // f32 scales in rows, halves in panels or in rows after HalveQ8Scales
	if m.Scales16 != nil {
		sb = 2
	}
	return int64(m.Rows*m.Cols) + int64(m.Rows*m.Cols/Q8Block*sb)
}

var benchDTypes = []DType{F32, BF16, F16, Q8}

// BenchmarkMatVec: one matrix-vector product at the 0.5B shapes; MB/s is weight bytes streamed.
func BenchmarkMatVec(b *testing.B) {
	shapes := [][2]int{{qHidden, qHidden}, {qInter, qHidden}, {qHidden, qInter}, {qVocab, qHidden}}
	for _, dt := range benchDTypes {
		for _, sh := range shapes {
			w := fastMatrix(dt, sh[0], sh[1], 1)
			x := fastMatrix(F32, 1, sh[1], 2).F32
			dst := make([]float32, sh[0])
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("%v/%dx%d/t%d", dt, sh[0], sh[1], th), func(b *testing.B) {
					defer withThreads(th)()
					b.SetBytes(weightBytes(w))
					for b.Loop() {
						MatVec(dst, w, x)
					}
					b.ReportMetric(2*float64(sh[0]*sh[1])*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkMatMul: the prefill product of 512 input rows with the MLP's up projection.
func BenchmarkMatMul(b *testing.B) {
	const n = 512
	x := fastMatrix(F32, n, qHidden, 3).F32
	dst := make([]float32, n*qInter)
	for _, dt := range benchDTypes {
		w := fastMatrix(dt, qInter, qHidden, 4)
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/%dx%dx%d/t%d", dt, n, qHidden, qInter, th), func(b *testing.B) {
				defer withThreads(th)()
				for b.Loop() {
					MatMul(dst, w, x, n)
				}
				b.ReportMetric(2*float64(n*qHidden*qInter)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// layerMats returns the seven projections of one layer.
func layerMats(dt DType, seed uint64) []*Matrix {
	return []*Matrix{
		fastMatrix(dt, qHidden, qHidden, seed),   // q
		fastMatrix(dt, qKV, qHidden, seed+1),     // k
		fastMatrix(dt, qKV, qHidden, seed+2),     // v
		fastMatrix(dt, qHidden, qHidden, seed+3), // o
		fastMatrix(dt, qInter, qHidden, seed+4),  // gate
		fastMatrix(dt, qInter, qHidden, seed+5),  // up
		fastMatrix(dt, qHidden, qInter, seed+6),  // down
	}
}

// BenchmarkDecodeEstimate times the weight products of one decode token of the 0.5B shape: 24
// distinct layers (so nothing is cache-resident) plus the 151936×896 LM head, held in huge-page
// memory as the model holds them. tok/s = 1 / that time: an upper bound for the model
// (attention, norms and sampling are not included).
func BenchmarkDecodeEstimate(b *testing.B) {
	for _, dt := range []DType{F32, BF16, Q8} {
		var mem hugemem.Arena
		var mats []*Matrix
		for l := range qLayers {
			for _, m := range layerMats(dt, uint64(10*l)) {
				mats = append(mats, hugeCopy(&mem, m))
			}
		}
		mats = append(mats, hugeCopy(&mem, fastMatrix(dt, qVocab, qHidden, 999)))
		x := fastMatrix(F32, 1, qInter, 5).F32
		dst := make([]float32, qVocab)
		var bytes int64
		for _, m := range mats {
			bytes += weightBytes(m)
		}
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/t%d", dt, th), func(b *testing.B) {
				defer withThreads(th)()
				b.SetBytes(bytes)
				for b.Loop() {
					for _, m := range mats {
						MatVec(dst, m, x)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
		mats = nil
		mem.Free()
	}
}

// BenchmarkPrefillEstimate times the weight products of a 512-token prefill of the 0.5B shape
// and reports tokens/s. One layer's seven products are timed and counted 24 times (the layers
// have the same shapes and prefill is compute-bound, so timing all 24 would only cost time), plus
// the LM head for the last token.
func BenchmarkPrefillEstimate(b *testing.B) {
	const n = 512
	x := fastMatrix(F32, n, qInter, 6).F32
	dst := make([]float32, n*qInter)
	for _, dt := range []DType{F32, BF16, Q8} {
		layer := layerMats(dt, 7)
		head := fastMatrix(dt, qVocab, qHidden, 8)
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/t%d", dt, th), func(b *testing.B) {
				defer withThreads(th)()
				var layerTime, headTime time.Duration
				for b.Loop() {
					t0 := time.Now()
					for _, m := range layer {
						MatMul(dst, m, x, n)
					}
					t1 := time.Now()
					MatVec(dst, head, x)
					layerTime += t1.Sub(t0)
					headTime += time.Since(t1)
				}
				perPrompt := (qLayers*layerTime + headTime).Seconds() / float64(b.N)
				b.ReportMetric(n/perPrompt, "tok/s")
			})
		}
	}
}

// BenchmarkBatchDecode times one decode step of a batch of n sequences through the 24 layers'
// weight products (bf16 and q8; the LM head left out) at 2 threads and reports tokens/s over the
// batch: the weights are streamed once per step however many rows meet them, so throughput
// should grow with n until the products turn compute-bound.
func BenchmarkBatchDecode(b *testing.B) {
	const maxN = 16
	x := fastMatrix(F32, maxN, qInter, 9).F32
	dst := make([]float32, maxN*qInter)
	for _, dt := range []DType{BF16, Q8} {
		var mem hugemem.Arena
		var mats []*Matrix
		for l := range qLayers {
			for _, m := range layerMats(dt, uint64(10*l+3)) {
				mats = append(mats, hugeCopy(&mem, m))
			}
		}
		for _, n := range []int{1, 2, 4, 8, maxN} {
			b.Run(fmt.Sprintf("%v/n%d", dt, n), func(b *testing.B) {
				defer withThreads(2)()
				for b.Loop() {
					for _, m := range mats {
						MatMul(dst, m, x, n)
					}
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
		mem.Free()
	}
}

// BenchmarkQuantize8: int8 quantisation of one MLP matrix (the q8 model quantises 0.36 G weights
// on load).
func BenchmarkQuantize8(b *testing.B) {
	w := fastMatrix(BF16, qInter, qHidden, 11)
	b.SetBytes(int64(w.Rows * w.Cols))
	for b.Loop() {
		Quantize8(w)
	}
}

// BenchmarkGemmAB compares, in one process and interleaved (so machine noise hits both), the
// dot-product matrix-matrix kernels (gemmQ8VNNI, gemmBF16) with the f32-widening path they
// replace (plainOff), on the prefill product of BenchmarkMatMul; each iteration times one of
// each, and the reported figures are the medians.
func BenchmarkGemmAB(b *testing.B) {
	const n = 512
	x := fastMatrix(F32, n, qInter, 3).F32
	dst := make([]float32, n*qInter)
	for _, dt := range []DType{BF16, Q8} {
		for _, sh := range [][2]int{{qInter, qHidden}, {qHidden, qInter}} {
			w := fastMatrix(dt, sh[0], sh[1], 4)
			b.Run(fmt.Sprintf("%v/%dx%dx%d", dt, n, sh[1], sh[0]), func(b *testing.B) {
				defer withThreads(benchprocs.Threads(b))()
				var fast, plain []float64
				flop := 2 * float64(n*sh[0]*sh[1])
				for b.Loop() {
					for _, off := range []bool{false, true} {
						was := plainOff.Swap(off)
						t0 := time.Now()
						MatMul(dst, w, x, n)
						g := flop / time.Since(t0).Seconds() / 1e9
						plainOff.Store(was)
						if off {
							plain = append(plain, g)
						} else {
							fast = append(fast, g)
						}
					}
				}
				b.ReportMetric(median(fast), "GFLOP/s")
				b.ReportMetric(median(plain), "plain-GFLOP/s")
			})
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkStreamRead is the machine's memory read bandwidth as the decode kernels see it: a
// 1 GiB f32 buffer in huge-page memory (as the weights are held, so nothing is cache-resident)
// summed with Dot in chunks over the worker pool (SetThreads); MB/s is bytes read. Decode
// cannot stream weights faster than this.
func BenchmarkStreamRead(b *testing.B) {
	const n = 1 << 28 // 1 GiB of f32
	var mem hugemem.Arena
	defer mem.Free()
	buf := hugemem.Float32s(mem.Alloc(4*n), n)
	for i := range buf {
		buf[i] = 1
	}
	const chunk = 1 << 16
	sums := make([]float32, n/chunk)
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", th), func(b *testing.B) {
			defer withThreads(th)()
			b.SetBytes(4 * n)
			for b.Loop() {
				parallelRows(n/chunk, 1, func(lo, hi int) {
					for c := lo; c < hi; c++ {
						s := buf[c*chunk : (c+1)*chunk]
						sums[c] = Dot(s, s)
					}
				})
			}
		})
	}
}

// hugeLayers returns the matrices of qLayers layers of dtype dt (layerMats) in huge-page memory
// of a.
func hugeLayers(a *hugemem.Arena, dt DType) [][]*Matrix {
	var layers [][]*Matrix
	for l := range qLayers {
		var ms []*Matrix
		for _, m := range layerMats(dt, uint64(10*l+5)) {
			ms = append(ms, hugeCopy(a, m))
		}
		layers = append(layers, ms)
	}
	return layers
}

// BenchmarkDecodeFusedAB times one decode token's layer products (24 layers, no LM head) with
// the projections that share an input fused (MatMuls: q, k, v and gate, up) against one MatMul
// each, alternating per token in one process; tok/s figures are medians.
func BenchmarkDecodeFusedAB(b *testing.B) {
	for _, dt := range []DType{BF16, Q8} {
		var mem hugemem.Arena
		layers := hugeLayers(&mem, dt)
		x := fastMatrix(F32, 1, qInter, 5).F32
		q, k, v := make([]float32, qHidden), make([]float32, qKV), make([]float32, qKV)
		g, u, o := make([]float32, qInter), make([]float32, qInter), make([]float32, qHidden)
		b.Run(dt.String(), func(b *testing.B) {
			defer withThreads(benchprocs.Threads(b))()
			var fused, plain []float64
			for b.Loop() {
				for _, fuse := range []bool{true, false} {
					t0 := time.Now()
					for _, ly := range layers {
						if fuse {
							MatMuls([][]float32{q, k, v}, ly[:3], x[:qHidden], 1)
							MatMul(o, ly[3], x[:qHidden], 1)
							MatMuls([][]float32{g, u}, ly[4:6], x[:qHidden], 1)
						} else {
							for j, d := range [][]float32{q, k, v, o, g, u} {
								MatMul(d, ly[j], x[:qHidden], 1)
							}
						}
						MatMul(o, ly[6], x, 1)
					}
					tps := 1 / time.Since(t0).Seconds()
					if fuse {
						fused = append(fused, tps)
					} else {
						plain = append(plain, tps)
					}
				}
			}
			b.ReportMetric(median(fused), "tok/s")
			b.ReportMetric(median(plain), "unfused-tok/s")
		})
		mem.Free()
	}
}

// BenchmarkPackAB packs the panels of one 4864×896 q8 matrix for gemmQ8VNNI with packRows
// (pack16T's transposes) against pack16's gathers alone, alternating in one process; MB/s
// figures are medians of the weight bytes packed per second.
func BenchmarkPackAB(b *testing.B) {
	if !use512() {
		b.Skip("AVX-512 only")
	}
	w := fastMatrix(Q8, qInter, qHidden, 4)
	c := w.Cols
	buf := make([]byte, 16*c)
	var idx [16]int32
	for j := range idx {
		idx[j] = int32(j * c / 4)
	}
	var tr, ga []float64
	for b.Loop() {
		for _, gather := range []bool{false, true} {
			t0 := time.Now()
			for r := 0; r+16 <= w.Rows; r += 16 {
				if gather {
					pack16(&buf[0], 64, (*byte)(unsafe.Pointer(&w.Q8[r*c])), &idx, c/4, 0x80808080)
				} else {
					packRows(unsafe.Pointer(&buf[0]), 64, unsafe.Pointer(&w.Q8[0]), c, r, w.Rows-1, w.Rows, 0, c, 0x80808080)
				}
			}
			v := float64(len(w.Q8)) / time.Since(t0).Seconds() / 1e6
			if gather {
				ga = append(ga, v)
			} else {
				tr = append(tr, v)
			}
		}
	}
	b.ReportMetric(median(tr), "transpose-MB/s")
	b.ReportMetric(median(ga), "gather-MB/s")
}

// BenchmarkBF16Rows8AB times one bf16 decode token's layer products with eight rows per kernel
// call (dot8BF16P) against four (dot4BF16P), both on adjacent rows (not in quarters); see
// decodeAB.
func BenchmarkBF16Rows8AB(b *testing.B) {
	if !use512() {
		b.Skip("AVX-512 only (both arms are the same kernels elsewhere)")
	}
	was, wasQ := rows8Force.Load(), fpQuartersForce.Load()
	defer func() { rows8Force.Store(was); fpQuartersForce.Store(wasQ) }()
	fpQuartersForce.Store(-1)
	decodeAB(b, BF16, []string{"rows8", "rows4"}, func(i int) { rows8Force.Store([]int32{1, -1}[i]) })
}

// BenchmarkQ8PrefetchAB times one q8 decode token's layer products with dot4Q8VNNI prefetching
// 16 KiB ahead (the zen5 plan's) against 8 KiB (every other plan's); see decodeAB.
func BenchmarkQ8PrefetchAB(b *testing.B) {
	if !useVNNI() {
		b.Skip("AVX512_VNNI only")
	}
	was := q8PfForce.Load()
	defer q8PfForce.Store(was)
	decodeAB(b, Q8, []string{"pf16k", "pf8k"}, func(i int) { q8PfForce.Store([]int32{16384, 8192}[i]) })
}

// decodeAB times one decode token's layer products of dtype dt (24 layers of the 0.5B shape,
// fused as the forward pass fuses them: MatMuls of q, k, v and of gate, up) under each of the
// variants named by names (set(i) switches to variant i), alternating per token in one process,
// on GOMAXPROCS threads (-cpu). It reports the median tok/s of each and, less sensitive to other
// processes on the machine, the tok/s of the sum over layers of each layer's fastest time
// ("best-").
func decodeAB(b *testing.B, dt DType, names []string, set func(i int)) {
	if !use512() && !useAVX2() {
		b.Skip("AVX-512 and AVX2 only")
	}
	defer withThreads(benchprocs.Threads(b))()
	var mem hugemem.Arena
	defer mem.Free()
	layers := hugeLayers(&mem, dt)
	x := fastMatrix(F32, 1, qInter, 5).F32
	q, k, v := make([]float32, qHidden), make([]float32, qKV), make([]float32, qKV)
	g, u, o := make([]float32, qInter), make([]float32, qInter), make([]float32, qHidden)
	tps := make([][]float64, len(names))
	best := make([][]float64, len(names)) // per layer, least seconds
	for i := range best {
		best[i] = make([]float64, qLayers)
	}
	for b.Loop() {
		for i := range names {
			set(i)
			t0 := time.Now()
			for l, ly := range layers {
				t1 := time.Now()
				MatMuls([][]float32{q, k, v}, ly[:3], x[:qHidden], 1)
				MatMul(o, ly[3], x[:qHidden], 1)
				MatMuls([][]float32{g, u}, ly[4:6], x[:qHidden], 1)
				MatMul(o, ly[6], x, 1)
				if d := time.Since(t1).Seconds(); best[i][l] == 0 || d < best[i][l] {
					best[i][l] = d
				}
			}
			tps[i] = append(tps[i], 1/time.Since(t0).Seconds())
		}
	}
	for i, name := range names {
		var s float64
		for _, d := range best[i] {
			s += d
		}
		b.ReportMetric(median(tps[i]), name+"-tok/s")
		b.ReportMetric(1/s, "best-"+name+"-tok/s")
	}
}

// BenchmarkQ8QuartersAB times one q8 decode token's layer products read in quarters
// (matVecQuarters, every SIMD plan's) against four adjacent rows per call (dot4Q8VNNI
// with its prefetch; on the AVX2 tier avx2Dot4Q8IFar against avx2Dot4Q8I); see decodeAB.
func BenchmarkQ8QuartersAB(b *testing.B) {
	if !useVNNI() && !useAVX2() {
		b.Skip("AVX512_VNNI and AVX2 only")
	}
	was := q8QuartersForce.Load()
	defer q8QuartersForce.Store(was)
	decodeAB(b, Q8, []string{"quarters", "adjacent"}, func(i int) { q8QuartersForce.Store([]int32{1, -1}[i]) })
}

// BenchmarkQ8Stream finds where q8 decode loses bandwidth (issue 30): in one process, on
// GOMAXPROCS threads (-cpu), alternating per round, GB/s of ReadProbe ("probe"), of one q8
// matrix-vector product over one matrix as large as the 24 layers' weights ("big": the kernel's
// streaming rate with four hand-offs per thread in all), and of the 24 layers' products as
// decode runs them ("layers", decodeAB's calls), the last two with four adjacent rows per call
// and in quarters ("-quarters"); medians and bests ("best-").
func BenchmarkQ8Stream(b *testing.B) {
	if !useVNNI() {
		b.Skip("AVX512_VNNI only")
	}
	defer withThreads(benchprocs.Threads(b))()
	was := q8QuartersForce.Load()
	defer q8QuartersForce.Store(was)
	var mem hugemem.Arena
	defer mem.Free()
	layers := hugeLayers(&mem, Q8)
	var lbytes int64
	for _, ly := range layers {
		for _, m := range ly {
			lbytes += weightBytes(m)
		}
	}
	rows := int(lbytes/(qHidden+qHidden/Q8Block*4)) &^ 3
	big := &Matrix{DType: Q8, Rows: rows, Cols: qHidden}
	big.Q8 = hugemem.Int8s(mem.Alloc(rows*qHidden), rows*qHidden)
	big.Scales = hugemem.Float32s(mem.Alloc(4*len(big.Q8)/Q8Block), len(big.Q8)/Q8Block)
	for i, s := 0, uint64(7); i < len(big.Q8); i++ {
		s = s*6364136223846793005 + 1442695040888963407
		big.Q8[i] = int8(s >> 56)
	}
	for i := range big.Scales {
		big.Scales[i] = F16ToF32(F32ToF16(1.0 / 127))
	}
	probe := NewReadProbe(512 << 20)
	defer probe.Close()
	x := fastMatrix(F32, 1, qInter, 5).F32
	dst := make([]float32, rows)
	q, k, v := make([]float32, qHidden), make([]float32, qKV), make([]float32, qKV)
	g, u, o := make([]float32, qInter), make([]float32, qInter), make([]float32, qHidden)
	names := []string{"probe", "big", "layers", "big-quarters", "layers-quarters"}
	bytes := []float64{float64(probe.Bytes()), float64(weightBytes(big)), float64(lbytes), float64(weightBytes(big)), float64(lbytes)}
	rates := make([][]float64, len(names))
	for b.Loop() {
		for i := range names {
			q8QuartersForce.Store([]int32{-1, -1, -1, 1, 1}[i])
			t0 := time.Now()
			switch i {
			case 0:
				if _, err := probe.sweep(); err != nil {
					b.Fatal(err)
				}
			case 1, 3:
				MatVec(dst, big, x[:qHidden])
			default:
				for _, ly := range layers {
					MatMuls([][]float32{q, k, v}, ly[:3], x[:qHidden], 1)
					MatMul(o, ly[3], x[:qHidden], 1)
					MatMuls([][]float32{g, u}, ly[4:6], x[:qHidden], 1)
					MatMul(o, ly[6], x, 1)
				}
			}
			rates[i] = append(rates[i], bytes[i]/time.Since(t0).Seconds()/1e9)
		}
	}
	for i, n := range names {
		b.ReportMetric(median(rates[i]), n+"-GB/s")
		b.ReportMetric(slices.Max(rates[i]), "best-"+n+"-GB/s")
	}
}

// BenchmarkBF16QuartersAB times one bf16 decode token's layer products read in quarters
// (matVecQuarters with dot4BF16PFar, the AVX-512 plans'; avx2MvBF16P, the avx2 plan's) against
// adjacent rows (dot8BF16P with its prefetch where the plan takes it, else dot4BF16P;
// avx2MvBF16P); see decodeAB.
func BenchmarkBF16QuartersAB(b *testing.B) {
	if !use512() && !useAVX2() {
		b.Skip("AVX-512 and AVX2 only (both arms are the same kernels without SIMD)")
	}
	was := fpQuartersForce.Load()
	defer fpQuartersForce.Store(was)
	decodeAB(b, BF16, []string{"quarters", "adjacent"}, func(i int) { fpQuartersForce.Store([]int32{1, -1}[i]) })
}

// BenchmarkF32QuartersAB times one f32 decode token's layer products read in quarters
// (matVecQuarters with dot4F32, the AVX-512 plans'; avx2MvF32, the avx2 plan's) against four
// adjacent rows per call; see decodeAB.
func BenchmarkF32QuartersAB(b *testing.B) {
	if !use512() && !useAVX2() {
		b.Skip("AVX-512 and AVX2 only (both arms are the same kernels without SIMD)")
	}
	was := fpQuartersForce.Load()
	defer fpQuartersForce.Store(was)
	decodeAB(b, F32, []string{"quarters", "adjacent"}, func(i int) { fpQuartersForce.Store([]int32{1, -1}[i]) })
}
