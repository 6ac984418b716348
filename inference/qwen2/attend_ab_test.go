package qwen2

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/internal/benchprocs"
)

// The A/B of the paged KV cache against the contiguous one it replaced (main at 82d1e87): that
// cache and its attention are kept here, verbatim but for names and scratch, so one benchmark process can
// alternate the two on the same keys and values, iteration by iteration, and the load of a
// shared machine hits both alike.

// The replaced attention's chunking of a prefill: at most contigChunk query tokens and
// contigScores probabilities per chunk.
const (
	contigChunk  = 128
	contigScores = 4 << 20
)

// contigBufs is the replaced attention's scratch: queries, scores, compact values, outputs
// (kept across calls, as the model's scratch kept them; one caller at a time).
var contigBufs struct{ qg, sc, vt, og []float32 }

// contigCache is the replaced cache: per layer, keys nkv×cap×hd and values transposed nkv×hd×vs
// with vs = cap+16.
type contigCache struct {
	n, cap, vs int
	k, v       [][]float32
}

func (m *Model) attendContig(l int, s *scratch, caches []*contigCache, spans []span) {
	cb := &contigBufs
	c := &m.cfg
	nkv, hd := c.NumKeyValueHeads, c.HeadDim
	group := c.NumAttentionHeads / nkv
	qd := c.NumAttentionHeads * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	t0 := 0
	var pp []float32
	for _, sp := range spans {
		ca := caches[sp.step]
		nt := sp.hi - sp.lo
		p0 := ca.n + sp.lo
		vs := ca.vs
		// Tokens per chunk: at most contigChunk, so that early chunks of a long prefill skip the
		// keys they cannot see, and at most contigScores probabilities (at least one token).
		chunk := max(1, min(nt, contigChunk, contigScores/(group*vs)))
		for kh := range nkv {
			kBase, vBase := kh*ca.cap*hd, kh*hd*vs
			Vt := &cpu.Matrix{DType: cpu.F32, Rows: hd, Cols: vs, F32: ca.v[l][vBase : vBase+hd*vs]}
			for j0 := 0; j0 < nt; j0 += chunk {
				j1 := min(nt, j0+chunk)
				n := p0 + j1 // keys visible to the chunk's last token
				rows := (j1 - j0) * group
				cb.qg = grow(cb.qg, rows*hd)
				for j := j0; j < j1; j++ {
					src := s.q[(t0+j)*qd+kh*group*hd : (t0+j)*qd+(kh+1)*group*hd]
					dst := cb.qg[(j-j0)*group*hd : (j-j0+1)*group*hd]
					for e, x := range src {
						dst[e] = x * scale
					}
				}
				K := &cpu.Matrix{DType: cpu.F32, Rows: n, Cols: hd, F32: ca.k[l][kBase : kBase+n*hd]}
				cb.sc = grow(cb.sc, rows*n)
				cpu.MatMul(cb.sc, K, cb.qg, rows)
				// P·V: against the cache's Vᵀ in place when its row stride vs wastes little
				// (decode, where n is near the capacity), else against a compact copy of the
				// first n values of each Vᵀ row (contiguous copies: early prefill chunks).
				V, P := Vt, pp
				inPlace := vs-n <= n/4
				if inPlace {
					pp = grow(pp, rows*vs)
					P = pp
				} else {
					cb.vt = grow(cb.vt, hd*n)
					for d := range hd {
						copy(cb.vt[d*n:(d+1)*n], Vt.F32[d*vs:d*vs+n])
					}
					V = &cpu.Matrix{DType: cpu.F32, Rows: hd, Cols: n, F32: cb.vt}
					P = cb.sc
				}
				for r := range rows {
					see := p0 + j0 + r/group + 1
					row := cb.sc[r*n : r*n+see]
					cpu.Softmax(row)
					if inPlace {
						copy(P[r*vs:], row)
						clear(P[r*vs+see : (r+1)*vs])
					} else {
						clear(cb.sc[r*n+see : (r+1)*n])
					}
				}
				cb.og = grow(cb.og, rows*hd)
				cpu.MatMul(cb.og, V, P, rows)
				for j := j0; j < j1; j++ {
					dst := s.att[(t0+j)*qd+kh*group*hd : (t0+j)*qd+(kh+1)*group*hd]
					copy(dst, cb.og[(j-j0)*group*hd:])
				}
			}
		}
		t0 += nt
	}
}

// abSetup builds the attention of tc on the 0.5B shape (14 query heads, 2 kv heads, head dim 64,
// 24 layers, or the first layers of them when layers > 0), random keys, values and queries in
// [-1, 1), held both in paged caches (blocks of block tokens; 0 means DefaultKVBlock) and in
// contiguous ones, with a scratch for each.
func abSetup(tc abCase, block, layers int) (m *Model, paged []*Cache, contig []*contigCache, spans []span, sa, sb *scratch) {
	sp := spec05B(safetensors.BF16)
	if layers > 0 {
		sp.layers = layers
	}
	m = &Model{cfg: Config{HiddenSize: sp.hidden, IntermediateSize: sp.inter, NumHiddenLayers: sp.layers,
		NumAttentionHeads: sp.heads, NumKeyValueHeads: sp.kv, HeadDim: sp.hidden / sp.heads, VocabSize: sp.vocab, MaxPositionEmbeddings: sp.maxPos}}
	m.kv.block = block
	c := &m.cfg
	nkv, hd, L := c.NumKeyValueHeads, c.HeadDim, c.NumHiddenLayers
	total := tc.past + tc.nt
	r := rng(9)
	for i := range tc.seqs {
		gc, _ := m.NewCache(total)
		pc := gc.(*Cache)
		pc.prepare(total)
		cc := &contigCache{n: tc.past, cap: total, vs: total + 16, k: make([][]float32, L), v: make([][]float32, L)}
		for l := range L {
			cc.k[l] = make([]float32, nkv*total*hd)
			cc.v[l] = make([]float32, nkv*hd*cc.vs)
			for p := range total {
				k, v := make([]float32, nkv*hd), make([]float32, nkv*hd)
				for j := range k {
					k[j], v[j] = r.uniform(1), r.uniform(1)
				}
				pc.store(l, p, k, v)
				for kh := range nkv {
					copy(cc.k[l][(kh*total+p)*hd:], k[kh*hd:(kh+1)*hd])
					for d := range hd {
						cc.v[l][(kh*hd+d)*cc.vs+p] = v[kh*hd+d]
					}
				}
			}
		}
		pc.n = tc.past
		paged, contig = append(paged, pc), append(contig, cc)
		spans = append(spans, span{step: i, lo: 0, hi: tc.nt})
	}
	T := tc.seqs * tc.nt
	sa, sb = m.getScratch(T), m.getScratch(T)
	for i := range sa.q {
		sa.q[i] = r.uniform(1)
	}
	copy(sb.q, sa.q)
	for t := range T {
		sa.pos[t] = tc.past + t%tc.nt
	}
	return m, paged, contig, spans, sa, sb
}

// abCase is one attention workload: seqs sequences, each with cached keys before a span of nt new
// tokens.
type abCase struct {
	name           string
	seqs, past, nt int
}

// BenchmarkAttendAB alternates the paged attention (blocks of DefaultKVBlock) and the contiguous
// one per iteration over the same data, all 24 layers of the 0.5B shape, and reports the median
// time of each and the median of the per-iteration ratios (paged/contiguous: each pair ran back
// to back, so a change of load hits both). It also checks that both give the
// same attention output within rounding.
func BenchmarkAttendAB(b *testing.B) {
	for _, tc := range []abCase{
		{"decode-2048", 1, 2048, 1},
		{"decode-batch8-1024", 8, 1024, 1},
		{"prefill-512", 1, 0, 512},
		{"suffix-64-after-2048", 1, 2048, 64},
	} {
		b.Run(tc.name, func(b *testing.B) { benchAttendAB(b, tc) })
	}
}

func benchAttendAB(b *testing.B, tc abCase) {
	cpu.SetThreads(benchprocs.Threads(b))
	m, paged, contig, spans, sa, sb := abSetup(tc, 0, 0)
	c := &m.cfg
	hd, L := c.HeadDim, c.NumHiddenLayers
	T := tc.seqs * tc.nt
	// Both compute the same attention output.
	m.attend(0, sa, paged, spans)
	m.attendContig(0, sb, contig, spans)
	for i := range sa.att[:T*c.NumAttentionHeads*hd] {
		if d := math.Abs(float64(sa.att[i] - sb.att[i])); d > 1e-4 {
			b.Fatalf("paged and contiguous attention differ by %g at %d", d, i)
		}
	}
	var tp, tcg, cp, ccg []time.Duration
	runPaged := func() {
		t, u := time.Now(), processCPU()
		for l := range L {
			m.attend(l, sa, paged, spans)
		}
		tp, cp = append(tp, time.Since(t)), append(cp, processCPU()-u)
	}
	runContig := func() {
		t, u := time.Now(), processCPU()
		for l := range L {
			m.attendContig(l, sb, contig, spans)
		}
		tcg, ccg = append(tcg, time.Since(t)), append(ccg, processCPU()-u)
	}
	i := 0
	for b.Loop() {
		// Which goes first alternates, so neither always finds the other's data in cache.
		if i%2 == 0 {
			runPaged()
			runContig()
		} else {
			runContig()
			runPaged()
		}
		i++
	}
	ratios := make([]float64, len(tp))
	for i := range tp {
		ratios[i] = float64(tp[i]) / float64(tcg[i])
	}
	b.ReportMetric(float64(median(tp).Microseconds())/1000, "ms-paged")
	b.ReportMetric(float64(median(tcg).Microseconds())/1000, "ms-contig")
	b.ReportMetric(median(ratios), "paged/contig")
	// The process's CPU time (every thread, so also the workers' spinning between tasks; with
	// -cpu 1 the caller's alone), which a shared machine's load changes far less than wall time;
	// summed over the run (meanCPU).
	b.ReportMetric(float64(meanCPU(cp).Microseconds())/1000, "ms-cpu-paged")
	b.ReportMetric(float64(meanCPU(ccg).Microseconds())/1000, "ms-cpu-contig")
}

// median returns the median of v (which it sorts).
func median[T int64 | float64 | time.Duration](v []T) T {
	slices.Sort(v)
	return v[len(v)/2]
}

// meanCPU is the mean of per-iteration processCPU differences: their sum (which the scheduler's
// late accounting of other threads does not bias, unlike a median) over their count.
func meanCPU(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(len(d), 1))
}

// TestAttendDecodeMatchesContig: the model's attention (attend: all query heads of a kv head per
// pass over the paged keys and values, positions split into chunks and merged) gives the
// contiguous cache's attention (attendContig, matrix products and a softmax per query row) on
// two layers of the 0.5B shape (7 query heads per kv head), at depths short of, at and past block and
// chunk boundaries, for blocks of 256 and 48 tokens, one sequence or a batch, one token, two or
// a prompt chunk of 33 to 300 per sequence (they attend causally within the step), with 1 and
// 2 threads. Keys, values and
// queries in [-1, 1): the outputs are below 1 in size and agree within 5e-7 (measured at most
// 4.5e-8 on AVX-512).
func TestAttendDecodeMatchesContig(t *testing.T) {
	defer cpu.SetThreads(cpu.Threads())
	for _, tc := range []abCase{
		{"d0", 1, 0, 1}, {"d127", 1, 127, 1}, {"d255", 1, 255, 1}, {"d256", 1, 256, 1}, {"d600", 1, 600, 1},
		{"d2100", 1, 2100, 1}, {"batch3-d300", 3, 300, 1}, {"two-d257", 1, 257, 2}, {"batch2-two-d500", 2, 500, 2},
		{"prompt40-d0", 1, 0, 40}, {"prompt300-d250", 1, 250, 300}, {"batch2-prompt33-d500", 2, 500, 33},
	} {
		for _, block := range []int{0, 48} {
			for _, th := range []int{1, 2} {
				cpu.SetThreads(th)
				m, paged, contig, spans, sa, sb := abSetup(tc, block, 2)
				c := &m.cfg
				T := tc.seqs * tc.nt
				for _, l := range []int{0, c.NumHiddenLayers - 1} {
					m.attend(l, sa, paged, spans)
					m.attendContig(l, sb, contig, spans)
					var worst float64
					for i := range sa.att[:T*c.NumAttentionHeads*c.HeadDim] {
						worst = max(worst, math.Abs(float64(sa.att[i]-sb.att[i])))
					}
					if !(worst <= 5e-7) {
						t.Errorf("%s, blocks of %d, %d threads, layer %d: paged decode attention differs from the contiguous one by %.3g", tc.name, block, th, l, worst)
					}
				}
			}
		}
	}
}
