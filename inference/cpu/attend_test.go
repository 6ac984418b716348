package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// attendRef is Attend in float64 on contiguous keys k (n × hd) and values v (n × hd): per
// query row, softmax of the scores, then the weighted sum of the values. It also returns, per
// output element, Σ_j p_j·|v_j| + max_j |s_j|·Σ_j p_j·|v_j|, the scale of the rounding error
// (the values' sum and an error in the scores carried through the exponential).
func attendRef(q, k, v []float32, group, hd, n int) (out, scale []float64) {
	out = make([]float64, group*hd)
	scale = make([]float64, group*hd)
	s := make([]float64, n)
	for r := range group {
		m, amax := math.Inf(-1), 0.0
		for j := range n {
			var d float64
			for c := range hd {
				d += float64(q[r*hd+c]) * float64(k[j*hd+c])
			}
			s[j] = d
			m = max(m, d)
			amax = max(amax, math.Abs(d))
		}
		var l float64
		for j := range n {
			s[j] = math.Exp(s[j] - m)
			l += s[j]
		}
		for j := range n {
			p := s[j] / l
			for c := range hd {
				out[r*hd+c] += p * float64(v[j*hd+c])
				scale[r*hd+c] += p * math.Abs(float64(v[j*hd+c])) * (1 + amax)
			}
		}
	}
	return out, scale
}

// transpose returns the n × hd matrix a as hd × n.
func transpose(a []float32, n, hd int) []float32 {
	t := make([]float32, len(a))
	for j := range n {
		for c := range hd {
			t[c*n+j] = a[j*hd+c]
		}
	}
	return t
}

// TestAttendDecode: Attend against float64 attention on the same keys and values held
// contiguously, in every kernel tier, for caches shorter than a chunk, crossing chunks and KV
// blocks (block sizes that are and are not multiples of the chunk and of 16), groups of 1 to 8
// query rows (gemm4x6F32's six and the rest), head dims with and without a column tail, and
// several heads of different lengths in one call. The bound is 2e-6 relative to Σ p·|v| scaled
// by the largest score's size (an error ε in a score moves its weight by about ε·p); measured errors
// on AVX-512 are below 1.1e-7 of it.
func TestAttendDecode(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(30, 1))
		for _, sh := range []struct{ group, hd, block int }{
			{7, 64, 256}, {7, 64, 16}, {7, 64, 272}, {7, 64, 48}, {6, 64, 16}, {1, 64, 256}, {8, 40, 64}, {2, 24, 32}, {13, 64, 256}, {14, 24, 112},
			{7, 20, 256}, {3, 12, 32}, // head dims with no values kernel on AVX2
		} {
			lens := []int{1, 5, 127, 128, 129, 300, 2048 + 17}
			heads := make([]AttendHead, len(lens))
			type ref struct{ out, scale []float64 }
			refs := make([]ref, len(lens))
			for h, n := range lens {
				q := randVec(rng, sh.group*sh.hd)
				for i := range q {
					q[i] *= 2 // scores of a few units, as scaled queries give
				}
				k, v := randVec(rng, n*sh.hd), randVec(rng, n*sh.hd)
				heads[h] = AttendHead{
					Out: make([]float32, sh.group*sh.hd), Q: q,
					K: toKeyTiles(k, n, sh.hd, sh.block),
					V: toPaged(v, n, sh.hd, sh.block, true),
				}
				refs[h].out, refs[h].scale = attendRef(q, k, v, sh.group, sh.hd, n)
			}
			Attend(heads, sh.group)
			for h, n := range lens {
				for i, g := range heads[h].Out {
					e := refs[h].out[i]
					if d := math.Abs(float64(g) - e); !(d <= 2e-6*refs[h].scale[i]+1e-7) {
						t.Fatalf("group %d, hd %d, block %d, %d keys: out[%d] = %g, want %g (|Δ| %.3g, bound %.3g)",
							sh.group, sh.hd, sh.block, n, i, g, e, d, 2e-6*refs[h].scale[i]+1e-7)
					}
				}
			}
		}
	})
}

// TestAttendDecodeThreads: the results are the same to the bit whatever the thread count,
// whether the heads come in one call or one at a time, and however a call's heads fall into
// windows (decodeWindow: each head alone, a long head alone and two short ones together, or
// windows cut between heads of 12, 3 and 1 chunks: {12, 3} and {1}).
func TestAttendDecodeThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	const group, hd, block = 7, 64, 256
	lens := []int{3000, 700, 40}
	heads := make([]AttendHead, len(lens))
	for h, n := range lens {
		heads[h] = AttendHead{
			Q: randVec(rng, group*hd),
			K: toKeyTiles(randVec(rng, n*hd), n, hd, block),
			V: toPaged(randVec(rng, n*hd), n, hd, block, true),
		}
	}
	run := func(th int, oneCall bool, window int32) [][]float32 {
		old := Threads()
		SetThreads(th)
		defer SetThreads(old)
		was := decodeWindow.Swap(window)
		defer decodeWindow.Store(was)
		out := make([][]float32, len(heads))
		hs := make([]AttendHead, len(heads))
		for h := range heads {
			hs[h] = heads[h]
			out[h] = make([]float32, group*hd)
			hs[h].Out = out[h]
			if !oneCall {
				Attend(hs[h:h+1], group)
			}
		}
		if oneCall {
			Attend(hs, group)
		}
		return out
	}
	want := run(1, true, decodeWindow.Load())
	for _, c := range []struct {
		th     int
		one    bool
		window int32
	}{{2, true, 4096}, {3, true, 4096}, {2, false, 4096}, {1, false, 4096}, {2, true, 1}, {2, true, 5}, {1, true, 15}} {
		got := run(c.th, c.one, c.window)
		for h := range want {
			for i := range want[h] {
				if got[h][i] != want[h][i] {
					t.Fatalf("threads %d, one call %v, windows of %d chunks: head %d element %d is %g, want %g", c.th, c.one, c.window, h, i, got[h][i], want[h][i])
				}
			}
		}
	}
}

func TestAttendDecodeBadInput(t *testing.T) {
	k := &Paged{Rows: 16, Cols: 4, Block: 16, Tiled: true, Blocks: [][]float32{make([]float32, 256)}}
	v := &Paged{Rows: 4, Cols: 16, Block: 16, ByRows: true, Blocks: [][]float32{make([]float32, 256)}}
	ok := func() AttendHead { return AttendHead{Out: make([]float32, 32), Q: make([]float32, 32), K: k, V: v} }
	for name, f := range map[string]func(d *AttendHead){
		"values tiled":     func(d *AttendHead) { d.V = k },
		"values by column": func(d *AttendHead) { d.V = &Paged{Rows: 16, Cols: 4, Block: 16, Blocks: v.Blocks} },
		"keys by rows":     func(d *AttendHead) { d.K = v },
		"keys untiled":     func(d *AttendHead) { d.K = &Paged{Rows: 16, Cols: 4, Block: 16, Blocks: k.Blocks} },
		"short queries":    func(d *AttendHead) { d.Q = d.Q[:31] },
		"short output":     func(d *AttendHead) { d.Out = d.Out[:16] },
		"fewer values":     func(d *AttendHead) { d.V = &Paged{Rows: 3, Cols: 16, Block: 16, ByRows: true, Blocks: v.Blocks} },
		"other head dim":   func(d *AttendHead) { d.K = &Paged{Rows: 8, Cols: 4, Block: 16, Tiled: true, Blocks: k.Blocks} },
		"short key block": func(d *AttendHead) {
			d.K = &Paged{Rows: 16, Cols: 4, Block: 16, Tiled: true, Blocks: [][]float32{make([]float32, 255)}}
		},
		"tiles of a part block": func(d *AttendHead) {
			d.K = &Paged{Rows: 16, Cols: 4, Block: 8, Tiled: true, Blocks: [][]float32{make([]float32, 128)}}
			d.V = &Paged{Rows: 4, Cols: 16, Block: 8, ByRows: true, Blocks: [][]float32{make([]float32, 128)}}
		},
		"no keys": func(d *AttendHead) {
			d.K = &Paged{Rows: 16, Block: 16, Tiled: true}
			d.V = &Paged{Cols: 16, Block: 16, ByRows: true}
		},
		"other block size": func(d *AttendHead) {
			d.V = &Paged{Rows: 4, Cols: 16, Block: 32, ByRows: true, Blocks: [][]float32{make([]float32, 512)}}
		},
		"bf16 keys, f32 values": func(d *AttendHead) {
			d.K = &Paged{Rows: 16, Cols: 4, Block: 16, Tiled: true, BF16: [][]uint16{make([]uint16, 256)}}
		},
		"short bf16 block": func(d *AttendHead) {
			d.K = &Paged{Rows: 16, Cols: 4, Block: 16, Tiled: true, BF16: [][]uint16{make([]uint16, 255)}}
			d.V = &Paged{Rows: 4, Cols: 16, Block: 16, ByRows: true, BF16: [][]uint16{make([]uint16, 256)}}
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			d := ok()
			f(&d)
			Attend([]AttendHead{d}, 2)
		}()
	}
	d := ok()
	Attend([]AttendHead{d}, 2) // the unchanged head is accepted

	// A bad head after good ones, in windows of one chunk: the panic comes before any window has
	// written an output.
	was := decodeWindow.Swap(1)
	defer decodeWindow.Store(was)
	good, bad := ok(), ok()
	for i := range good.Q {
		good.Q[i] = 1
	}
	for i := range good.Out {
		good.Out[i] = -7
	}
	bad.Q = bad.Q[:31]
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a bad last head: no panic")
			}
		}()
		Attend([]AttendHead{good, ok(), bad}, 2)
	}()
	for i, x := range good.Out {
		if x != -7 {
			t.Fatalf("a bad last head: the first head's output[%d] was written (%g) before the panic", i, x)
		}
	}
}

// toBF16Paged returns p with its values rounded to bf16 (F32ToBF16) in bf16 blocks, and p's f32
// blocks holding the rounded values (widened back) in place; the slots past Rows or Cols (NaN)
// stay NaN in both, so a read past them shows.
func toBF16Paged(p *Paged) *Paged {
	q := &Paged{Rows: p.Rows, Cols: p.Cols, Block: p.Block, ByRows: p.ByRows, Tiled: p.Tiled}
	for _, blk := range p.Blocks {
		b16 := make([]uint16, len(blk))
		for i, x := range blk {
			b16[i] = F32ToBF16(x)
			blk[i] = BF16ToF32(b16[i])
		}
		q.BF16 = append(q.BF16, b16)
	}
	return q
}

// TestAttendDecodeBF16: with keys and values in bf16 blocks Attend gives, to the bit, what it
// gives over f32 blocks holding the same (rounded) values, in every kernel tier, at 1 and 2 threads,
// for chunks inside and across blocks of several sizes.
func TestAttendDecodeBF16(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(33, 1))
		for _, sh := range []struct{ group, hd, block int }{{7, 64, 256}, {7, 64, 48}, {6, 64, 16}, {2, 24, 32}, {1, 40, 64}, {7, 64, 272}} {
			lens := []int{1, 17, 256, 300, 2048 + 5}
			f32, b16 := make([]AttendHead, len(lens)), make([]AttendHead, len(lens))
			for h, n := range lens {
				q := randVec(rng, sh.group*sh.hd)
				k := toKeyTiles(randVec(rng, n*sh.hd), n, sh.hd, sh.block)
				v := toPaged(randVec(rng, n*sh.hd), n, sh.hd, sh.block, true)
				kb, vb := toBF16Paged(k), toBF16Paged(v)
				f32[h] = AttendHead{Out: make([]float32, sh.group*sh.hd), Q: q, K: k, V: v}
				b16[h] = AttendHead{Out: make([]float32, sh.group*sh.hd), Q: q, K: kb, V: vb}
			}
			for _, th := range []int{1, 2} {
				old := Threads()
				SetThreads(th)
				Attend(f32, sh.group)
				Attend(b16, sh.group)
				SetThreads(old)
				for h, n := range lens {
					for i, want := range f32[h].Out {
						if got := b16[h].Out[i]; got != want || math.IsNaN(float64(got)) {
							t.Fatalf("group %d, hd %d, block %d, %d keys, %d threads: out[%d] = %g over bf16 blocks, %g over f32",
								sh.group, sh.hd, sh.block, n, th, i, got, want)
						}
					}
				}
			}
		}
	})
}

// TestGemv7x16: avx2Gemv7x16 gives the bits of two avx2Gemv7 calls on lanes 0..8 and 8..16,
// from zero and accumulating, with scores' strides (one step a dimension of a key tile) and
// values' (one step a value row), one step and many, and its prefetch argument changes nothing.
func TestGemv7x16(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU without AVX2")
	}
	rng := rand.New(rand.NewPCG(36, 1))
	for _, sh := range []struct{ xstep, srow, sstep, steps, ldd int }{
		{KeyTile, 1, 8, 64, 300}, {KeyTile, 1, 8, 1, 16}, {64, 256, 1, 256, 64}, {40, 7, 1, 33, 24},
	} {
		x := randVec(rng, sh.steps*sh.xstep+16)
		s := randVec(rng, 7*sh.srow+sh.steps*sh.sstep+8)
		init := randVec(rng, 7*sh.ldd)
		for acc := range 2 {
			want := append([]float32(nil), init...)
			avx2Gemv7(&x[0], sh.xstep, &s[0], sh.srow, sh.sstep, sh.steps, &want[0], sh.ldd, acc, nil, 0)
			avx2Gemv7(&x[8], sh.xstep, &s[0], sh.srow, sh.sstep, sh.steps, &want[8], sh.ldd, acc, nil, 0)
			for _, pfn := range []int{0, 4 * sh.steps} {
				got := append([]float32(nil), init...)
				avx2Gemv7x16(unsafe.Pointer(&x[0]), sh.xstep, &s[0], sh.srow, sh.sstep, sh.steps, &got[0], sh.ldd, acc, unsafe.Pointer(&x[0]), pfn, 0)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%+v, acc %d, prefetch %d lines: dst[%d] = %g, want %g", sh, acc, pfn, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestAttendAVX2Pipeline: attendAVX2 over a thread's chunks in one call, each chunk's values read
// with the next chunk's keys (in steps of 16 rows, or a chunk's rows where heads are shared),
// gives every chunk's partial result to the bit as one call per chunk (no next chunk) does, over
// f32 and bf16 blocks, with and without the prefetch walks: groups of
// one block of 7 query rows, a padded one (6), two (8, 14) and one row; head dims of 64, 128, 40
// (a last 8 dimensions) and 20 (no kernel for the values); heads that end inside a key tile.
func TestAttendAVX2Pipeline(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU without AVX2")
	}
	was := attendPrefetch.Load()
	defer attendPrefetch.Store(was)
	rng := rand.New(rand.NewPCG(36, 1))
	for _, kv16 := range []bool{false, true} {
		for _, hd := range []int{64, 128, 40, 20} {
			for _, group := range []int{7, 6, 8, 14, 1} {
				lens := []int{16, 200, 513, 1100}
				heads := make([]AttendHead, len(lens))
				var items []decodeItem
				for h, n := range lens {
					heads[h] = AttendHead{
						Q: randVec(rng, group*hd),
						K: toKeyTiles(randVec(rng, n*hd), n, hd, 256),
						V: toPaged(randVec(rng, n*hd), n, hd, 256, true),
					}
					if kv16 {
						heads[h].K, heads[h].V = toBF16Paged(heads[h].K), toBF16Paged(heads[h].V)
					}
					for p0 := 0; p0 < n; p0 += AttendChunkLen {
						items = append(items, decodeItem{head: h, p0: p0, p1: min(n, p0+AttendChunkLen)})
					}
				}
				per := group * (hd + 2)
				run := func(oneCall, shared bool) []float32 {
					ds := &decodeScratch{items: items, part: make([]float32, len(items)*per), shared: make([]bool, len(heads))}
					if oneCall {
						for h := range ds.shared {
							ds.shared[h] = shared
						}
					}
					cb := new(chunkBufs)
					cb.prepare(tierAVX2, group, hd, kv16)
					if oneCall {
						attendAVX2(heads, ds, cb, group, hd, 0, len(items), kv16)
					} else {
						for i := range items {
							attendAVX2(heads, ds, cb, group, hd, i, i+1, kv16)
						}
					}
					return ds.part
				}
				for _, pf := range []int32{0, 4096} {
					attendPrefetch.Store(pf)
					want := run(false, false)
					for _, shared := range []bool{false, true} {
						got := run(true, shared)
						for i := range want {
							if got[i] != want[i] {
								t.Fatalf("bf16 %v, hd %d, group %d, prefetch %d, shared %v: part[%d] (chunk %d) is %g in one call, %g chunk by chunk",
									kv16, hd, group, pf, shared, i, i/per, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestGemv7x16N: avx2Gemv7x16N over 16, 64 and 128 lanes gives to the bit what one avx2Gemv7x16
// call per 16 lanes does, accumulating or not, with or without its prefetch share, and writes
// nothing past its lanes.
func TestGemv7x16N(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU without AVX2")
	}
	rng := rand.New(rand.NewPCG(37, 1))
	for _, sh := range []struct{ cols, xstep, srow, steps, ldd int }{
		{64, 64, 256, 16, 64}, {16, 64, 256, 1, 64}, {128, 128, 40, 33, 136}, {64, 72, 16, 5, 72},
	} {
		x := randVec(rng, sh.steps*sh.xstep+16)
		s := randVec(rng, 7*sh.srow+sh.steps)
		init := randVec(rng, 7*sh.ldd)
		for acc := range 2 {
			want := append([]float32(nil), init...)
			for c := 0; c < sh.cols; c += 16 {
				avx2Gemv7x16(unsafe.Pointer(&x[c]), sh.xstep, &s[0], sh.srow, 1, sh.steps, &want[c], sh.ldd, acc, nil, 0, 0)
			}
			for _, pfn := range []int{0, 3, 4 * sh.steps * sh.cols / 16} {
				got := append([]float32(nil), init...)
				avx2Gemv7x16N(unsafe.Pointer(&x[0]), sh.xstep, &s[0], sh.srow, 1, sh.steps, &got[0], sh.ldd, acc, unsafe.Pointer(&x[0]), pfn, sh.cols, 0)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%+v, acc %d, prefetch %d lines: dst[%d] = %g, want %g", sh, acc, pfn, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemv7x16BF16: avx2Gemv7x16 and avx2Gemv7x16N over bf16 x (b16 = 1) give to the bit what
// they give over x widened to f32, with the shapes of TestGemv7x16 and TestGemv7x16N,
// accumulating or not, with or without their prefetch share, and write nothing past their
// lanes.
func TestGemv7x16BF16(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU without AVX2")
	}
	rng := rand.New(rand.NewPCG(38, 1))
	round := func(n int) ([]float32, []uint16) {
		x := randVec(rng, n)
		x16 := make([]uint16, n)
		for i, v := range x {
			x16[i] = F32ToBF16(v)
			x[i] = BF16ToF32(x16[i])
		}
		return x, x16
	}
	check := func(what string, got, want []float32) {
		t.Helper()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: dst[%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	for _, sh := range []struct{ xstep, srow, sstep, steps, ldd int }{
		{KeyTile, 1, 8, 64, 300}, {KeyTile, 1, 8, 1, 16}, {64, 256, 1, 256, 64}, {40, 7, 1, 33, 24},
	} {
		x, x16 := round(sh.steps*sh.xstep + 16)
		s := randVec(rng, 7*sh.srow+sh.steps*sh.sstep+8)
		init := randVec(rng, 7*sh.ldd)
		for acc := range 2 {
			want := append([]float32(nil), init...)
			avx2Gemv7x16(unsafe.Pointer(&x[0]), sh.xstep, &s[0], sh.srow, sh.sstep, sh.steps, &want[0], sh.ldd, acc, nil, 0, 0)
			for _, pfn := range []int{0, 4 * sh.steps} {
				got := append([]float32(nil), init...)
				avx2Gemv7x16(unsafe.Pointer(&x16[0]), sh.xstep, &s[0], sh.srow, sh.sstep, sh.steps, &got[0], sh.ldd, acc, unsafe.Pointer(&x16[0]), pfn, 1)
				check(fmt.Sprintf("avx2Gemv7x16 bf16 %+v, acc %d, prefetch %d lines", sh, acc, pfn), got, want)
			}
		}
	}
	for _, sh := range []struct{ cols, xstep, srow, steps, ldd int }{
		{64, 64, 256, 16, 64}, {16, 64, 256, 1, 64}, {128, 128, 40, 33, 136}, {64, 72, 16, 5, 72},
	} {
		x, x16 := round(sh.steps*sh.xstep + 16)
		s := randVec(rng, 7*sh.srow+sh.steps)
		init := randVec(rng, 7*sh.ldd)
		for acc := range 2 {
			want := append([]float32(nil), init...)
			avx2Gemv7x16N(unsafe.Pointer(&x[0]), sh.xstep, &s[0], sh.srow, 1, sh.steps, &want[0], sh.ldd, acc, nil, 0, sh.cols, 0)
			for _, pfn := range []int{0, 3, 4 * sh.steps * sh.cols / 16} {
				got := append([]float32(nil), init...)
				avx2Gemv7x16N(unsafe.Pointer(&x16[0]), sh.xstep, &s[0], sh.srow, 1, sh.steps, &got[0], sh.ldd, acc, unsafe.Pointer(&x16[0]), pfn, sh.cols, 1)
				check(fmt.Sprintf("avx2Gemv7x16N bf16 %+v, acc %d, prefetch %d lines", sh, acc, pfn), got, want)
			}
		}
	}
}

// TestAttendFinish: decodeScratch.finish merges a head into its Out exactly when the last of
// its items is finished, whatever the parts and their order (a part over several heads, a head
// over several parts, parts finished out of order), and the merge is mergeChunks over all of the
// head's items in position order; setRuns resets the counts for the next window.
func TestAttendFinish(t *testing.T) {
	const group, hd = 3, 8
	per := group * (hd + 2)
	rng := rand.New(rand.NewPCG(39, 1))
	// Heads 0-3 with 3, 1, 4 and 2 items.
	var items []decodeItem
	for h, n := range []int{3, 1, 4, 2} {
		for c := range n {
			items = append(items, decodeItem{head: h, p0: c * AttendChunkLen, p1: (c + 1) * AttendChunkLen})
		}
	}
	ds := &decodeScratch{items: items, part: randVec(rng, len(items)*per)}
	for i := range len(items) {
		for r := range group {
			ds.part[i*per+group+r] = 1 + float32(i+r) // l > 0
		}
	}
	want := make([][]float32, 4)
	first := 0
	for h := range 4 {
		last := first
		for last < len(items) && items[last].head == h {
			last++
		}
		want[h] = make([]float32, group*hd)
		mergeChunks(want[h], ds.part[first*per:last*per], last-first, group, hd)
		first = last
	}
	nan := float32(math.NaN())
	for _, parts := range [][][2]int{
		{{0, 10}},                         // one part
		{{8, 10}, {0, 2}, {4, 8}, {2, 4}}, // out of order; heads 0 and 2 split, a part over heads 0-1
		{{9, 10}, {3, 4}, {5, 6}, {0, 1}, {7, 8}, {1, 2}, {4, 5}, {6, 7}, {2, 3}, {8, 9}}, // item by item
	} {
		heads := make([]AttendHead, 4)
		for h := range heads {
			heads[h].Out = make([]float32, group*hd)
			for i := range heads[h].Out {
				heads[h].Out[i] = nan
			}
		}
		ds.setRuns()
		done := make([]bool, len(items))
		for _, p := range parts {
			ds.finish(heads, p[0], p[1], group, hd)
			for i := p[0]; i < p[1]; i++ {
				done[i] = true
			}
			for h := range heads {
				all := true
				for i, it := range items {
					all = all && (it.head != h || done[i])
				}
				got := heads[h].Out
				if !all {
					if !math.IsNaN(float64(got[0])) {
						t.Fatalf("parts %v: head %d merged after part %v, before its last item", parts, h, p)
					}
					continue
				}
				if !slices.Equal(got, want[h]) {
					t.Fatalf("parts %v: head %d after part %v: %v, want %v", parts, h, p, got, want[h])
				}
			}
		}
	}
}

// TestAttendShared: decodeScratch.markShared marks the heads of a window whose key block lists
// another head of it reads too (a prompt's tokens: prefixes of one list), and not heads with lists
// of their own, even over the same blocks (forked sequences), nor heads outside the window; in f32
// and bf16.
func TestAttendShared(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 1))
	const hd, n = 16, 40
	for _, kv16 := range []bool{false, true} {
		own := func() AttendHead {
			d := AttendHead{K: toKeyTiles(randVec(rng, n*hd), n, hd, 16), V: toPaged(randVec(rng, n*hd), n, hd, 16, true)}
			if kv16 {
				d.K, d.V = toBF16Paged(d.K), toBF16Paged(d.V)
			}
			return d
		}
		a, b := own(), own()
		prefix := a
		k := *a.K
		k.Cols = n - 16
		if kv16 {
			k.BF16 = k.BF16[:2]
		} else {
			k.Blocks = k.Blocks[:2]
		}
		prefix.K = &k // an earlier token of a's prompt: a prefix of its list
		fork := a
		kf := *a.K
		kf.Blocks = slices.Clone(kf.Blocks) // the same blocks in a list of its own
		kf.BF16 = slices.Clone(kf.BF16)
		fork.K = &kf
		var ds decodeScratch
		for _, c := range []struct {
			heads  []AttendHead
			h0, h1 int
			want   []bool
		}{
			{[]AttendHead{a}, 0, 1, []bool{false}},
			{[]AttendHead{a, b, fork}, 0, 3, []bool{false, false, false}},
			{[]AttendHead{a, b, prefix}, 0, 3, []bool{true, false, true}},
			{[]AttendHead{prefix, b, a, fork}, 0, 4, []bool{true, false, true, false}},
			{[]AttendHead{a, prefix, b}, 1, 3, []bool{false, false}}, // a is in another window
		} {
			ds.markShared(c.heads, c.h0, c.h1)
			if got := ds.shared[c.h0:c.h1]; !slices.Equal(got, c.want) {
				t.Errorf("bf16 %v, heads %d..%d of %d: shared %v, want %v", kv16, c.h0, c.h1, len(c.heads), got, c.want)
			}
		}
	}
}
