package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// The kernels against the CPU backend's ops (inference/cpu) on random inputs, with ragged
// sizes that reach every tail of the kernels' loops (K modulo 8 and 256 for the vector loads,
// T around the matrix-vector limit and the 64-row tiles, head dimensions below and above a
// warp's 32 lanes).

func testOps(t *testing.T) *ops {
	t.Helper()
	o, err := newOps(testDevice(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

func randBF16(r *rand.Rand, n int, scale float32) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		v[i] = cpu.F32ToBF16((r.Float32()*2 - 1) * scale)
	}
	return v
}

// closeTo fails when got and want differ by more than tol·(1 + |want|) anywhere.
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.Abs(g-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("%s: [%d] = %v, want %v (tolerance %g)", what, i, g, w, tol)
		}
	}
}

func TestEmbedKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, H := range []int{1, 31, 64, 129, 300} {
		V := 50
		w := &cpu.Matrix{DType: cpu.BF16, Rows: V, Cols: H, U16: randBF16(r, V*H, 1)}
		toks := []int32{0, 49, 7, 7, 23}
		out := upload(t, o.d, make([]float32, len(toks)*H))
		mustOK(t, o.embed(out, upload(t, o.d, w.U16), upload(t, o.d, toks), len(toks), H))
		want := make([]float32, len(toks)*H)
		for i, tok := range toks {
			cpu.RowF32(want[i*H:(i+1)*H], w, int(tok))
		}
		closeTo(t, fmt.Sprintf("H=%d", H), download[float32](t, o.d, out, len(want)), want, 0)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRMSNormKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, H := range []int{1, 2, 31, 32, 33, 64, 127, 128, 129, 896, 1000} {
		T := 5
		x := randF32(r, T*H, 3)
		w := randF32(r, H, 2)
		// rows picks rows out of order, twice one of them (the LM head's row selection).
		rows := []int32{4, 0, 2, 2}
		out := upload(t, o.d, make([]float32, len(rows)*H))
		mustOK(t, o.rmsnorm(out, upload(t, o.d, x), upload(t, o.d, w), upload(t, o.d, rows), len(rows), H, 1e-6))
		want := make([]float32, len(rows)*H)
		for i, row := range rows {
			cpu.RMSNorm(want[i*H:(i+1)*H], x[int(row)*H:(int(row)+1)*H], w, 1e-6)
		}
		closeTo(t, fmt.Sprintf("H=%d", H), download[float32](t, o.d, out, len(want)), want, 2e-6)
		// rows = 0: row r itself.
		out2 := upload(t, o.d, make([]float32, T*H))
		mustOK(t, o.rmsnorm(out2, upload(t, o.d, x), upload(t, o.d, w), 0, T, H, 1e-6))
		want2 := make([]float32, T*H)
		for i := range T {
			cpu.RMSNorm(want2[i*H:(i+1)*H], x[i*H:(i+1)*H], w, 1e-6)
		}
		closeTo(t, fmt.Sprintf("H=%d, all rows", H), download[float32](t, o.d, out2, T*H), want2, 2e-6)
	}
}

// refMatMulBF16 is the exact product of bf16 weights and f32 inputs, summed in float64. It is
// not cpu.MatMul: from 16 input rows that rounds x to bf16 where the CPU has AVX512_BF16, and
// the kernels under test multiply the f32 input.
func refMatMulBF16(w *cpu.Matrix, x []float32, T int) []float32 {
	out := make([]float32, T*w.Rows)
	for tt := range T {
		for n := range w.Rows {
			var s float64
			for k := range w.Cols {
				s += float64(cpu.BF16ToF32(w.U16[n*w.Cols+k])) * float64(x[tt*w.Cols+k])
			}
			out[tt*w.Rows+n] = float32(s)
		}
	}
	return out
}

func TestMatMulKernels(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(5, 6))
	Ks := []int{1, 7, 8, 9, 16, 17, 63, 64, 255, 256, 257, 264}
	Ns := []int{1, 3, 4, 5, 63, 64, 65, 130}
	Ts := []int{1, 2, 7, 8, 9, 16, 63, 64, 65, 130}
	if testing.Short() {
		Ks, Ns, Ts = []int{7, 8, 257}, []int{5, 65}, []int{1, 8, 9, 65}
	}
	for _, K := range Ks {
		for _, N := range Ns {
			for _, T := range Ts {
				if T*N*K > 3<<20 {
					continue
				}
				w := &cpu.Matrix{DType: cpu.BF16, Rows: N, Cols: K, U16: randBF16(r, N*K, 1)}
				x := randF32(r, T*K, 1)
				base := randF32(r, T*(N+3), 1)
				want := refMatMulBF16(w, x, T)
				wp, xp := upload(t, o.d, w.U16), upload(t, o.d, x)
				for _, acc := range []bool{false, true} {
					// ldo = N+3: rows of out are strided, as the logits of a chunk are not.
					out := upload(t, o.d, base)
					mustOK(t, o.matmul(out, xp, wp, T, N, K, N+3, acc, 0))
					got := download[float32](t, o.d, out, T*(N+3))
					exp := slices.Clone(base)
					for tt := range T {
						for n := range N {
							v := want[tt*N+n]
							if acc {
								v += base[tt*(N+3)+n]
							}
							exp[tt*(N+3)+n] = v
						}
					}
					closeTo(t, fmt.Sprintf("T=%d N=%d K=%d accumulate=%v", T, N, K, acc), got, exp, 1e-5*math.Sqrt(float64(K)))
				}
			}
		}
	}
}

// TestMatMulBLAS: the prefill path with room for bf16 activations (cuBLAS where the device has
// it; the tiled kernel on the emulator) against the CPU product of the bf16-rounded input.
func TestMatMulBLAS(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(25, 26))
	for _, c := range [][3]int{{9, 65, 64}, {64, 130, 264}, {130, 896, 896}, {17, 151, 4864}} {
		T, N, K := c[0], c[1], c[2]
		w := &cpu.Matrix{DType: cpu.BF16, Rows: N, Cols: K, U16: randBF16(r, N*K, 1)}
		x := randF32(r, T*K, 1)
		xr := make([]float32, len(x))
		for i, v := range x {
			xr[i] = cpu.BF16ToF32(cpu.F32ToBF16(v))
		}
		want := refMatMulBF16(w, xr, T)
		base := randF32(r, T*N, 1)
		for i := range want {
			want[i] += base[i]
		}
		out := upload(t, o.d, base)
		xbf := upload(t, o.d, make([]uint16, T*K))
		mustOK(t, o.matmul(out, upload(t, o.d, x), upload(t, o.d, w.U16), T, N, K, N, true, xbf))
		// The tiled kernel multiplies the f32 input: against the rounded input it differs by
		// the rounding, about 2⁻⁹·√K.
		closeTo(t, fmt.Sprintf("T=%d N=%d K=%d", T, N, K), download[float32](t, o.d, out, T*N), want, 4e-3*math.Sqrt(float64(K)))
	}
}

func TestSiLUMulKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range [][2]int{{1, 1}, {3, 17}, {5, 128}, {2, 4864}} {
		T, I := c[0], c[1]
		gu := randF32(r, T*2*I, 6)
		out := upload(t, o.d, make([]float32, T*I))
		mustOK(t, o.siluMul(out, upload(t, o.d, gu), T, I))
		want := make([]float32, T*I)
		for tt := range T {
			cpu.SiLUMul(want[tt*I:(tt+1)*I], gu[tt*2*I:tt*2*I+I], gu[tt*2*I+I:(tt+1)*2*I])
		}
		closeTo(t, fmt.Sprintf("T=%d I=%d", T, I), download[float32](t, o.d, out, T*I), want, 1e-6)
	}
}

// pagedCase is a batch of sequences over a shuffled block pool: per token its sequence and
// position, per sequence its block table.
type pagedCase struct {
	g        kvLayout
	nblocks  int
	lens     []int // tokens already cached per sequence
	newToks  []int // tokens of this pass per sequence
	tables   [][]int32
	pos, seq []int32
}

func newPagedCase(r *rand.Rand, g kvLayout, lens, newToks []int) *pagedCase {
	c := &pagedCase{g: g, lens: lens, newToks: newToks}
	total := 0
	for i := range lens {
		total += (lens[i] + newToks[i] + g.bs - 1) / g.bs
	}
	c.nblocks = total + 3
	perm := r.Perm(c.nblocks)
	next := 0
	for i := range lens {
		n := (lens[i] + newToks[i] + g.bs - 1) / g.bs
		var tab []int32
		for range n {
			tab = append(tab, int32(perm[next]))
			next++
		}
		c.tables = append(c.tables, tab)
		for j := range newToks[i] {
			c.pos = append(c.pos, int32(lens[i]+j))
			c.seq = append(c.seq, int32(i))
		}
	}
	return c
}

// sharePrefix makes every sequence's first n blocks (as many as it has) those of sequence 0,
// as caches forked from one prefix share them.
func (c *pagedCase) sharePrefix(n int) {
	for i := 1; i < len(c.tables); i++ {
		k := min(n, len(c.tables[i]), len(c.tables[0]))
		copy(c.tables[i][:k], c.tables[0][:k])
	}
}

// upload returns the pass's metadata on the device.
func (c *pagedCase) upload(t *testing.T, d Device) meta {
	var flat, off []int32
	for _, tab := range c.tables {
		off = append(off, int32(len(flat)))
		flat = append(flat, tab...)
	}
	return meta{pos: upload(t, d, c.pos), seq: upload(t, d, c.seq), tables: upload(t, d, flat), tableOff: upload(t, d, off)}
}

// slot returns the offset (in values) of the K (v=0) or V (v=1) row of kv head kh at position
// p of sequence s.
func (c *pagedCase) slot(s, p, v, kh int) int {
	g := c.g
	blk := int(c.tables[s][p/g.bs])
	return ((blk*2+v)*g.nkv+kh)*g.bs*g.hd + (p%g.bs)*g.hd
}

func (c *pagedCase) poolSize() int { return c.nblocks * 2 * c.g.nkv * c.g.bs * c.g.hd }

func TestRopeKVKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, g := range []kvLayout{{nh: 4, nkv: 2, hd: 16, bs: 16}, {nh: 14, nkv: 2, hd: 64, bs: 16}, {nh: 3, nkv: 3, hd: 80, bs: 5}} {
		c := newPagedCase(r, g, []int{0, 21, 3}, []int{5, 1, 17})
		T, half := len(c.pos), g.hd/2
		width := (g.nh + 2*g.nkv) * g.hd
		qkv := randF32(r, T*width, 2)
		bias := randF32(r, width, 1)
		maxPos := 64
		cosT, sinT := make([]float32, maxPos*half), make([]float32, maxPos*half)
		for p := range maxPos {
			for f := range half {
				a := float64(float32(p) * float32(math.Pow(1e6, -float64(2*f)/float64(g.hd))))
				cosT[p*half+f], sinT[p*half+f] = float32(math.Cos(a)), float32(math.Sin(a))
			}
		}
		pool := make([]uint16, c.poolSize())
		for i := range pool {
			pool[i] = 0x7fc1 // NaN: every slot the kernel should not write stays NaN
		}
		kv := upload(t, o.d, pool)
		q := upload(t, o.d, make([]float32, T*g.nh*g.hd))
		mustOK(t, o.ropeKV(q, upload(t, o.d, qkv), upload(t, o.d, bias), upload(t, o.d, cosT), upload(t, o.d, sinT), c.upload(t, o.d), kv, T, g))
		gotQ := download[float32](t, o.d, q, T*g.nh*g.hd)
		gotKV := download[uint16](t, o.d, kv, len(pool))
		wantQ := make([]float32, 0, T*g.nh*g.hd)
		wantKV := slices.Clone(pool)
		for tt := range T {
			row := slices.Clone(qkv[tt*width : (tt+1)*width])
			cpu.Add(row, bias)
			p := int(c.pos[tt])
			cs, sn := cosT[p*half:(p+1)*half], sinT[p*half:(p+1)*half]
			for h := range g.nh + g.nkv {
				x := row[h*g.hd : (h+1)*g.hd]
				for f := range half {
					a, b := x[f], x[f+half]
					x[f], x[f+half] = a*cs[f]-b*sn[f], b*cs[f]+a*sn[f]
				}
			}
			wantQ = append(wantQ, row[:g.nh*g.hd]...)
			for kh := range g.nkv {
				for d := range g.hd {
					wantKV[c.slot(int(c.seq[tt]), p, 0, kh)+d] = cpu.F32ToBF16(row[(g.nh+kh)*g.hd+d])
					wantKV[c.slot(int(c.seq[tt]), p, 1, kh)+d] = cpu.F32ToBF16(row[(g.nh+g.nkv+kh)*g.hd+d])
				}
			}
		}
		closeTo(t, fmt.Sprintf("%+v q", g), gotQ, wantQ, 1e-6)
		for i := range wantKV {
			if gotKV[i] != wantKV[i] {
				// One bf16 ulp: the rotation's products may round differently (fused multiply-add).
				if d := int(gotKV[i]) - int(wantKV[i]); wantKV[i] == 0x7fc1 || d > 1 || d < -1 {
					t.Fatalf("%+v: cache value %d = %#x, want %#x", g, i, gotKV[i], wantKV[i])
				}
			}
		}
	}
}

// TestAttentionKernel: tiled prefill attention against the CPU ops, on both kernels (attn_prefill
// for every geometry, attn_mma where it takes the head size): prompts from one token to
// several tiles, after no context or a deep one (past 2,048), mixed with decoding sequences,
// over block tables sharing a prefix, for head dims below a warp to 256 and block sizes that
// are not a multiple of the mma's key steps. Both kernels are held to the f32 kernel's
// tolerance (see TestAttentionMMA for why the tensor-core one meets it).
func TestAttentionKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(11, 12))
	qwen := kvLayout{nh: 14, nkv: 2, hd: 64, bs: 16}
	cases := []struct {
		g          kvLayout
		lens, news []int
		shared     int // leading blocks of sequence 0's table that the other sequences share
	}{
		{kvLayout{nh: 4, nkv: 2, hd: 16, bs: 16}, []int{0, 5}, []int{8, 1}, 0},       // prefill and decode, hd < 32
		{qwen, []int{40, 0, 17}, []int{1, 33, 1}, 0},                                 // Qwen2.5-0.5B heads
		{qwen, []int{0, 100, 2050}, []int{40, 30, 20}, 0},                            // several tiles, at depth
		{qwen, []int{64, 64, 80}, []int{19, 1, 10}, 4},                               // a shared prefix
		{kvLayout{nh: 6, nkv: 3, hd: 80, bs: 7}, []int{3, 60}, []int{9, 2}, 0},       // hd not a multiple of 32
		{kvLayout{nh: 4, nkv: 1, hd: 128, bs: 16}, []int{130}, []int{3}, 0},          // group 4
		{kvLayout{nh: 2, nkv: 2, hd: 256, bs: 3}, []int{0, 1, 2}, []int{1, 1, 4}, 0}, // the largest head
		{kvLayout{nh: 8, nkv: 8, hd: 32, bs: 16}, []int{0}, []int{1}, 0},             // one key
		{kvLayout{nh: 16, nkv: 1, hd: 64, bs: 16}, []int{5}, []int{11}, 0},           // group 16: tiles of 4 tokens
		{kvLayout{nh: 4, nkv: 2, hd: 96, bs: 5}, []int{31, 2}, []int{40, 3}, 0},      // blocks across the mma's key steps
	}
	for _, tc := range cases {
		c := newAttnCase(r, tc.g, tc.lens, tc.news, tc.shared)
		for _, noMMA := range []bool{true, false} {
			o.noMMA = noMMA
			if !noMMA && !o.useMMA(tc.g) {
				continue
			}
			what := fmt.Sprintf("%+v lens %v new %v", tc.g, tc.lens, tc.news)
			got := c.runPrefill(t, o, what)
			closeTo(t, what, got, c.want, 2e-5)
		}
	}
}

// runPrefill runs the case's attention through o.attnPrefill (the kernel o picks) and returns
// the output, logging the kernel and the tiles in what.
func (c *attnCase) runPrefill(t *testing.T, o *ops, what string) []float32 {
	t.Helper()
	g, n := c.g, len(c.want)
	out := upload(t, o.d, make([]float32, n))
	qt := o.prefillTileTokens(g)
	tiles := prefillTiles(nil, c.seq, c.pos, qt)
	mustOK(t, o.attnPrefill(out, upload(t, o.d, c.q), upload(t, o.d, c.pool), upload(t, o.d, tiles), c.upload(t, o.d), len(tiles)/2, qt, g, c.scale))
	return download[float32](t, o.d, out, n)
}

// TestAttentionMMA: the tensor-core prefill attention (attn_mma64, attn_mma128) against the CPU
// ops for prompts of 1, 17, 64 and 333 tokens, from an empty cache and after a cached prefix
// (ending inside a cache block, so the prompt's keys cross blocks from its first step), for
// Qwen2.5-0.5B's heads (7 query heads per kv head: rows of 9 tokens × 7), group 2 of head 16
// (the tiny checkpoint's) and group 4 of head 128, with a prompt beside a decoding sequence.
//
// Tolerance: the products take keys and values as they are (bf16 in the cache) and queries and
// softmax weights as two bf16 terms each, which hold them to 2^-17 of themselves (split_bf16),
// with f32 accumulation. That moves a score by at most 2^-17·scale·Σ|q·k| (1.8e-4 in the worst
// case here: hd 64, |q| ≤ 1.5, |k| ≤ 2; the terms' errors have random signs, so about 1e-6 in
// practice) and an output by about twice that times max|v|: the f32 kernel's own bound of 2e-5
// holds (1.1e-5 the worst measured), so the two kernels are interchangeable. One bf16 term, the
// rounding cuBLAS's prefill and the CPU backend's AVX512_BF16 products apply to activations
// (2^-9 of each value), measured 2.1e-3 on these cases: a kernel that dropped the second terms
// fails here.
func TestAttentionMMA(t *testing.T) {
	o := testOps(t)
	o.noMMA = false // whatever CHAINEDSQL_CUDA_NOMMA says
	r := rand.New(rand.NewPCG(27, 2))
	for _, g := range []kvLayout{{nh: 14, nkv: 2, hd: 64, bs: 16}, {nh: 4, nkv: 2, hd: 16, bs: 16}, {nh: 8, nkv: 2, hd: 128, bs: 16}} {
		if !o.useMMA(g) {
			t.Fatalf("%+v: attn_mma does not take it", g)
		}
		for _, n := range []int{1, 17, 64, 333} {
			for _, cached := range []int{0, 37} {
				lens, news := []int{cached, 20}, []int{n, 1}
				c := newAttnCase(r, g, lens, news, 0)
				what := fmt.Sprintf("%+v: %d tokens after %d", g, n, cached)
				got := c.runPrefill(t, o, what)
				worst := 0.0
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i])-float64(c.want[i])))
				}
				t.Logf("%s: max abs error %.2g", what, worst)
				closeTo(t, what, got, c.want, 2e-5)
			}
		}
	}
}

// TestPrefillTiles: tiles follow the runs of consecutive positions of one sequence, at most qt
// tokens each; the tile size fits the rows and the shared memory.
func TestPrefillTiles(t *testing.T) {
	seq := []int32{0, 0, 0, 0, 0, 1, 2, 2, 2, 3}
	pos := []int32{5, 6, 7, 8, 9, 40, 0, 1, 2, 7}
	want := []int32{0, 2, 2, 2, 4, 1, 5, 1, 6, 2, 8, 1, 9, 1}
	if got := prefillTiles(nil, seq, pos, 2); !slices.Equal(got, want) {
		t.Errorf("tiles %v, want %v", got, want)
	}
	for _, c := range []struct {
		g    kvLayout
		want int
	}{
		{kvLayout{nh: 14, nkv: 2, hd: 64, bs: 16}, 9}, {kvLayout{nh: 16, nkv: 2, hd: 128, bs: 16}, 4},
		{kvLayout{nh: 2, nkv: 2, hd: 256, bs: 16}, 15}, {kvLayout{nh: 16, nkv: 1, hd: 128, bs: 16}, 2},
	} {
		qt := f32TileTokens(c.g)
		if qt != c.want || attnPrefillShared(c.g, qt) > maxShared {
			t.Errorf("%+v: tiles of %d tokens (%d bytes of shared memory), want %d", c.g, qt, attnPrefillShared(c.g, qt), c.want)
		}
	}
}

// refAttention is causal grouped-query attention of the case's tokens over the pool, from
// the CPU backend's ops: token t's query head h against positions 0..pos[t] of its sequence's
// keys and values of kv head h/(nh/nkv).
func (c *pagedCase) refAttention(pool []uint16, qv []float32, scale float32) []float32 {
	g := c.g
	T, qd, group := len(c.pos), g.nh*g.hd, g.nh/g.nkv
	want := make([]float32, T*qd)
	q, k := make([]float32, g.hd), make([]float32, g.hd)
	for tt := range T {
		s, p := int(c.seq[tt]), int(c.pos[tt])
		for h := range g.nh {
			kh := h / group
			for d := range g.hd {
				q[d] = qv[tt*qd+h*g.hd+d] * scale
			}
			sc := make([]float32, p+1)
			for j := range p + 1 {
				for d := range g.hd {
					k[d] = cpu.BF16ToF32(pool[c.slot(s, j, 0, kh)+d])
				}
				sc[j] = cpu.Dot(q, k)
			}
			cpu.Softmax(sc)
			o := want[tt*qd+h*g.hd : tt*qd+(h+1)*g.hd]
			for j, pj := range sc {
				for d := range g.hd {
					o[d] += pj * cpu.BF16ToF32(pool[c.slot(s, j, 1, kh)+d])
				}
			}
		}
	}
	return want
}

// attnCase is a paged case with a random pool and queries, and the CPU's attention of them.
type attnCase struct {
	*pagedCase
	pool  []uint16
	q     []float32
	scale float32
	want  []float32
}

// newAttnCase makes the sequences of lens cached and news new tokens, the first shared blocks
// of sequence 0's table shared by the others.
func newAttnCase(r *rand.Rand, g kvLayout, lens, news []int, shared int) *attnCase {
	c := newPagedCase(r, g, lens, news)
	c.sharePrefix(shared)
	a := &attnCase{pagedCase: c, pool: c.randPool(r), scale: float32(1 / math.Sqrt(float64(g.hd)))}
	a.q = randF32(r, len(c.pos)*g.nh*g.hd, 1.5)
	a.want = c.refAttention(a.pool, a.q, a.scale)
	return a
}

// randPool is a KV block pool of random bf16 values in [-2, 2).
func (c *pagedCase) randPool(r *rand.Rand) []uint16 {
	pool := make([]uint16, c.poolSize())
	for i := range pool {
		pool[i] = cpu.F32ToBF16((r.Float32()*2 - 1) * 2)
	}
	return pool
}

// TestAttnSplitKernel: split-key decode attention (attn_split, attn_merge) against the CPU
// ops at depths from one key to past 2,048, across cache block boundaries, with prefixes of
// block tables shared between sequences (as forked caches share them), for split counts from
// one (no merge) to more than the keys need (empty splits), and chunks that do and do not
// cover the context (the last split takes the rest).
func TestAttnSplitKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(41, 42))
	qwen := kvLayout{nh: 14, nkv: 2, hd: 64, bs: 16}
	cases := []struct {
		name       string
		g          kvLayout
		lens, news []int
		shared     int // leading blocks of sequence 0's table that the other sequences share
		splits     []int
		chunk      int // 0: splitChunk's
	}{
		{"depth 1", qwen, []int{0}, []int{1}, 0, []int{1, 4}, 0},
		{"block boundaries", qwen, []int{15, 16, 17, 31, 32}, []int{1, 1, 1, 1, 1}, 0, []int{1, 2, 3}, 0},
		{"depth 2100", qwen, []int{2100, 3}, []int{1, 1}, 0, []int{1, 5, 66}, 0},
		{"shared prefix", qwen, []int{100, 70, 300}, []int{1, 1, 1}, 4, []int{1, 3, 8}, 0},
		{"small chunk", qwen, []int{200}, []int{1}, 0, []int{3}, 16},
		{"several tokens", kvLayout{nh: 4, nkv: 2, hd: 16, bs: 16}, []int{0, 5}, []int{8, 1}, 0, []int{1, 2}, 0},
		{"hd 80, bs 7", kvLayout{nh: 6, nkv: 3, hd: 80, bs: 7}, []int{3, 60}, []int{1, 1}, 0, []int{1, 4}, 0},
		{"group 4, hd 128", kvLayout{nh: 4, nkv: 1, hd: 128, bs: 16}, []int{130}, []int{1}, 0, []int{2}, 0},
		{"hd 256, bs 3", kvLayout{nh: 2, nkv: 2, hd: 256, bs: 3}, []int{0, 1, 40}, []int{1, 1, 1}, 0, []int{1, 3}, 0},
		{"group 16", kvLayout{nh: 16, nkv: 1, hd: 64, bs: 16}, []int{90}, []int{1}, 0, []int{2}, 0},
	}
	for _, tc := range cases {
		g := tc.g
		c := newAttnCase(r, g, tc.lens, tc.news, tc.shared)
		T, qd := len(c.pos), g.nh*g.hd
		maxCtx := 0
		for _, p := range c.pos {
			maxCtx = max(maxCtx, int(p)+1)
		}
		mt := c.upload(t, o.d)
		qp, kv := upload(t, o.d, c.q), upload(t, o.d, c.pool)
		for _, S := range tc.splits {
			chunk := tc.chunk
			if chunk == 0 {
				chunk = splitChunk(maxCtx, S, g.bs)
			}
			out := upload(t, o.d, make([]float32, T*qd))
			part := upload(t, o.d, make([]float32, T*g.nh*S*g.hd))
			ml := upload(t, o.d, make([]float32, T*g.nh*S*2))
			mustOK(t, o.attnSplit(out, part, ml, qp, kv, mt, upload(t, o.d, []int32{int32(chunk)}), T, S, g, c.scale))
			closeTo(t, fmt.Sprintf("%s: %+v lens %v, %d splits of %d keys", tc.name, g, tc.lens, S, chunk), download[float32](t, o.d, out, T*qd), c.want, 2e-5)
		}
	}
}

// TestDecodeSplits: the split count fills the device at small batches, is one at large ones,
// and never makes splits shorter than minSplitKeys of the context length; splitChunk covers the
// context in whole cache blocks.
func TestDecodeSplits(t *testing.T) {
	for _, c := range []struct{ T, nkv, sms, ctx, want int }{
		{1, 2, 132, 32768, 264}, {8, 2, 132, 32768, 33}, {64, 2, 132, 32768, 5}, {256, 2, 132, 32768, 2},
		{264, 2, 132, 32768, 1}, {1, 2, 132, 100, 4}, {1, 1, 4096, 1 << 20, maxSplits}, {3, 8, 1, 32768, 1},
	} {
		if got := decodeSplits(c.T, c.nkv, c.sms, c.ctx); got != c.want {
			t.Errorf("decodeSplits(T %d, nkv %d, %d SMs, context %d) = %d, want %d", c.T, c.nkv, c.sms, c.ctx, got, c.want)
		}
	}
	for _, c := range []struct{ maxCtx, S, bs, want int }{
		{1, 1, 16, 32}, {2048, 132, 16, 32}, {2048, 17, 16, 128}, {4097, 3, 16, 1376}, {100, 3, 7, 35},
	} {
		got := splitChunk(c.maxCtx, c.S, c.bs)
		if got != c.want || got%c.bs != 0 || got*c.S < c.maxCtx {
			t.Errorf("splitChunk(%d, %d, %d) = %d, want %d", c.maxCtx, c.S, c.bs, got, c.want)
		}
	}
}

// hostArgmax is generate's greedy rule: the lowest index of the largest value, NaNs ignored.
func hostArgmax(x []float32) int {
	best, found := 0, false
	for i, v := range x {
		if v != v {
			continue
		}
		if !found || v > x[best] {
			best, found = i, true
		}
	}
	return best
}

func TestArgmaxKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(13, 14))
	nan := float32(math.NaN())
	for _, V := range []int{1, 2, 31, 128, 129, 1000, 151936} {
		rows := [][]float32{randF32(r, V, 5), randF32(r, V, 5), make([]float32, V), randF32(r, V, 5)}
		for i := range rows[2] {
			rows[2][i] = nan // all NaN: index 0
		}
		// ties: the largest value at several places, NaNs among them
		m := float32(9)
		for _, i := range []int{V - 1, V / 2, V / 3} {
			rows[3][i] = m
		}
		rows[3][0] = nan
		var flat []float32
		for _, row := range rows {
			flat = append(flat, row...)
		}
		out := upload(t, o.d, make([]int32, len(rows)))
		mustOK(t, o.argmax(out, upload(t, o.d, flat), len(rows), V))
		got := download[int32](t, o.d, out, len(rows))
		for i, row := range rows {
			if want := hostArgmax(row); int(got[i]) != want {
				t.Fatalf("V=%d row %d: argmax %d, want %d", V, i, got[i], want)
			}
		}
	}
}

// TestSampleKernel: sample_rows picks generate's token (gentest.Sample), except within 1e-9
// of the kept mass of a boundary, over temperatures, top-p and top-k settings, rows of tied
// logits (ties taken in id order, and a run of equal values as long as the row), a NaN and
// greedy rows, and reports its log-probability within 1e-6.
func TestSampleKernel(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(15, 16))
	for _, V := range []int{1, 5, 300, 1000, 4097} {
		cases := []lm.Sampling{
			{Temperature: 1, U: 0.5}, {Temperature: 0.7, TopP: 0.9, U: 0.3}, {Temperature: 1, TopP: 0.5, U: 0.99},
			{Temperature: 0.5, TopP: 0.05, U: 0.1}, {Temperature: 1.3, TopP: 0.95}, {Temperature: 1, U: 0.999},
			{Temperature: 1, TopK: 3, U: 0.4}, {Temperature: 0.8, TopP: 0.9, TopK: 50, U: 0.7},
			{Temperature: 1, TopP: 0.3, TopK: 2, U: 0.2}, {Temperature: 1.5, TopK: V, U: 0.6},
			{}, {Temperature: 0.5, TopK: 1}, {Temperature: 1, TopP: 0.7, U: 0.95}, {Temperature: 1, TopK: 7, U: 0.5},
		}
		R := len(cases)
		logits := randF32(r, R*V, 4)
		// Row 12: few distinct values (ties everywhere); row 13: all equal (one run of V ties).
		for i := range V {
			logits[12*V+i] = float32(i % 3)
			logits[13*V+i] = 0.25
		}
		if V > 1 {
			logits[5*V+V/2] = float32(math.NaN())
		}
		checkSampleRows(t, o, V, logits, cases)
	}
}

// TestSampleKernelBoundaries: sample_rows at the edges of its settings and rows, against
// gentest.Sample as TestSampleKernel: top-p 1 (no cut) and just under 1, top-k 1 (greedy),
// V-1 and more than the tokens of nonzero probability, u 0 and just under 1, cuts that split a
// run of ties (the lower ids kept), rows with -inf logits (probability 0, never drawn), a
// temperature so low that most probabilities underflow or are subnormal, and vocabularies of
// no multiple of the block, Qwen2's among them. A second launch returns the same tokens and
// log-probabilities bit for bit.
func TestSampleKernelBoundaries(t *testing.T) {
	o := testOps(t)
	r := rand.New(rand.NewPCG(17, 18))
	inf := float32(math.Inf(-1))
	for _, V := range []int{2, 255, 257, 513, 151936} {
		cases := []lm.Sampling{
			{Temperature: 1, TopP: 1, U: 0.3}, {Temperature: 1, TopP: 0.999999, U: 0.999999},
			{Temperature: 0.9, TopK: 1, U: 0.5}, {Temperature: 1, TopK: V - 1, U: 0.8},
			{Temperature: 1, TopP: 0.9, U: 0}, {Temperature: 1, TopK: 4, U: 0.99}, // ties cut
			{Temperature: 1, TopP: 0.4, U: 0.6}, {Temperature: 1, TopK: 9, TopP: 0.6, U: 0.75}, // ties cut
			{Temperature: 0.8, TopP: 0.95, U: 0.4}, {Temperature: 1, U: 0.7}, // -inf logits
			{Temperature: 1, TopK: V/2 + 1, U: 0.5},                                       // -inf logits: fewer nonzero than top-k
			{Temperature: 0.01, TopP: 0.9, U: 0.5}, {Temperature: 0.001, TopK: 3, U: 0.9}, // underflow
		}
		R := len(cases)
		logits := randF32(r, R*V, 8)
		for i := range V {
			logits[5*V+i] = float32(i % 4) // ties: a cut at 4 keeps the lowest ids of value 3
			logits[6*V+i] = float32(i%2) * 0.5
			logits[7*V+i] = float32(i % 5)
			if i%4 != 1 {
				for _, row := range []int{8, 9, 10} {
					logits[row*V+i] = inf
				}
			}
		}
		checkSampleRows(t, o, V, logits, cases)
	}
}

// checkSampleRows runs sample_rows over the rows of logits (V each), one case a row, twice, and
// checks its tokens and log-probabilities against gentest.Sample and the second run against
// the first.
func checkSampleRows(t *testing.T, o *ops, V int, logits []float32, cases []lm.Sampling) {
	t.Helper()
	R := len(cases)
	var params []float64
	greedy := make([]int32, R)
	for i, c := range cases {
		q := samplingParams(c)
		params = append(params, q[:]...)
		greedy[i] = int32(hostArgmax(logits[i*V : (i+1)*V]))
	}
	dl, dp, dg := upload(t, o.d, logits), upload(t, o.d, params), upload(t, o.d, greedy)
	var first []int32
	var firstLP []float32
	for run := range 2 {
		out := upload(t, o.d, make([]int32, R))
		lp := upload(t, o.d, make([]float32, R))
		mustOK(t, o.sample(out, lp, dg, dl, dp, R, V))
		got := download[int32](t, o.d, out, R)
		gotLP := download[float32](t, o.d, lp, R)
		if run == 1 {
			if !slices.Equal(got, first) || !slices.Equal(gotLP, firstLP) {
				t.Fatalf("V=%d: a second launch picked %v (log-probabilities %v), the first %v (%v)", V, got, gotLP, first, firstLP)
			}
			return
		}
		first, firstLP = got, gotLP
		for i, c := range cases {
			want, margin, wantLP := gentest.Sample(logits[i*V:(i+1)*V], c)
			if int(got[i]) != want && margin > 1e-9 {
				t.Fatalf("V=%d row %d (%+v): token %d, want %d (margin %.3g)", V, i, c, got[i], want, margin)
			}
			if int(got[i]) == want && math.Abs(float64(gotLP[i])-wantLP) > 1e-6 {
				t.Fatalf("V=%d row %d (%+v): log-probability %v, want %v", V, i, c, gotLP[i], wantLP)
			}
		}
	}
}
