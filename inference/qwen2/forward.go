package qwen2

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
)

var _ lm.Model = (*Model)(nil)

// scratch holds one Forward call's activations, T tokens at a time; kept in a pool so decode
// does not allocate per token.
type scratch struct {
	x, xn, q, k, v, att, tmp, gate, up []float32
	cos, sin                           []float32
	sel, logits                        []float32
	qd                                 []float32 // attention: every head's scaled queries
	heads                              []cpu.AttendHead
	kvs                                []cpu.Paged // attention: each head's keys and values (prefixes of full's)
	full                               []cpu.Paged // attention: per span and kv head, to its last token
	pos, seq                           []int
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

func growInt(b []int, n int) []int {
	if cap(b) < n {
		return make([]int, n)
	}
	return b[:n]
}

func (m *Model) getScratch(T int) *scratch {
	s, _ := m.scratch.Get().(*scratch)
	if s == nil {
		s = &scratch{}
	}
	c := &m.cfg
	H, qd, kvd := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	s.x = grow(s.x, T*H)
	s.xn = grow(s.xn, T*H)
	s.tmp = grow(s.tmp, T*H)
	s.q = grow(s.q, T*qd)
	s.att = grow(s.att, T*qd)
	s.k = grow(s.k, T*kvd)
	s.v = grow(s.v, T*kvd)
	s.gate = grow(s.gate, T*c.IntermediateSize)
	s.up = grow(s.up, T*c.IntermediateSize)
	s.cos = grow(s.cos, T*c.HeadDim/2)
	s.sin = grow(s.sin, T*c.HeadDim/2)
	s.pos = growInt(s.pos, T)
	s.seq = growInt(s.seq, T)
	return s
}

// errReleased is returned by Forward after Close.
var errReleased = errors.New("qwen2: model is closed")

// Forward appends each step's tokens to its cache and writes its logits, all steps as one batch:
// every weight matrix is applied once to the tokens of all steps (cpu.MatMul over their rows), so
// a prefill runs matrix-matrix products and a batch of decode steps shares one pass over the
// weights. Batches of more than maxPass tokens run as several passes, splitting long prompts, so
// activation memory stays bounded. Forward checks every step before changing anything; on an
// error or a done ctx no cache's length changes.
func (m *Model) Forward(ctx context.Context, steps []lm.Step) error {
	if m.released {
		return errReleased
	}
	caches, T, err := m.checkSteps(steps)
	if err != nil || T == 0 {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qwen2: forward: %w", err)
	}
	V := m.cfg.VocabSize
	for i := range steps {
		n := V
		if steps[i].AllLogits {
			n *= len(steps[i].Tokens)
		}
		steps[i].Logits = grow(steps[i].Logits, n)
		caches[i].prepare(caches[i].n + len(steps[i].Tokens))
	}
	s := m.getScratch(min(T, maxPass))
	defer m.scratch.Put(s)
	var spans []span
	count := 0
	for i := range steps {
		for lo, n := 0, len(steps[i].Tokens); lo < n; {
			hi := min(n, lo+maxPass-count)
			spans = append(spans, span{step: i, lo: lo, hi: hi})
			count += hi - lo
			lo = hi
			if count == maxPass || (i == len(steps)-1 && lo == n) {
				if err := m.pass(ctx, s, steps, caches, spans, count); err != nil {
					return err
				}
				spans, count = spans[:0], 0
			}
		}
	}
	for i := range steps {
		caches[i].n += len(steps[i].Tokens)
	}
	return nil
}

// maxPass is the most tokens one pass through the layers carries (a variable for tests).
var maxPass = 512

// span is the tokens [lo, hi) of one step within a pass.
type span struct{ step, lo, hi int }

// pass runs the T tokens of spans through the model: their positions follow the cache's length
// plus the span's offset (caches are only advanced by Forward, once every pass is done).
func (m *Model) pass(ctx context.Context, s *scratch, steps []lm.Step, caches []*Cache, spans []span, T int) error {
	c := &m.cfg
	H, half := c.HiddenSize, c.HeadDim/2
	t := 0
	for k, sp := range spans {
		ca := caches[sp.step]
		for j, tok := range steps[sp.step].Tokens[sp.lo:sp.hi] {
			p := ca.n + sp.lo + j
			s.pos[t], s.seq[t] = p, k
			for f, inv := range m.invFreq {
				a := float64(float32(p) * inv)
				s.cos[t*half+f] = float32(math.Cos(a))
				s.sin[t*half+f] = float32(math.Sin(a))
			}
			cpu.RowF32(s.x[t*H:(t+1)*H], m.embed, tok)
			t++
		}
	}
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("qwen2: forward: layer %d: %w", l, err)
		}
		m.layer(l, s, steps, caches, spans, T)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qwen2: forward: %w", err)
	}
	m.logits(s, steps, spans)
	return nil
}

// checkSteps validates steps and returns their caches and total token count.
func (m *Model) checkSteps(steps []lm.Step) ([]*Cache, int, error) {
	caches := make([]*Cache, len(steps))
	T := 0
	for i := range steps {
		st := &steps[i]
		ca, ok := st.Cache.(*Cache)
		if !ok || ca == nil || ca.m != m {
			return nil, 0, fmt.Errorf("qwen2: step %d: cache %T is not one of this model's", i, st.Cache)
		}
		if ca.released {
			return nil, 0, fmt.Errorf("qwen2: step %d: cache was released", i)
		}
		if len(st.Tokens) == 0 {
			return nil, 0, fmt.Errorf("qwen2: step %d: no tokens", i)
		}
		if ca.n+len(st.Tokens) > ca.max {
			return nil, 0, fmt.Errorf("qwen2: step %d: %d tokens after %d exceed the cache's capacity of %d", i, len(st.Tokens), ca.n, ca.max)
		}
		for j, tok := range st.Tokens {
			if tok < 0 || tok >= m.cfg.VocabSize {
				return nil, 0, fmt.Errorf("qwen2: step %d: token %d at index %d is outside the vocabulary of %d", i, tok, j, m.cfg.VocabSize)
			}
		}
		for j := range i {
			if caches[j] == ca {
				return nil, 0, fmt.Errorf("qwen2: steps %d and %d share one cache", j, i)
			}
		}
		caches[i] = ca
		T += len(st.Tokens)
	}
	return caches, T, nil
}

// layer runs decoder layer l over the T tokens of spans in s.x.
func (m *Model) layer(l int, s *scratch, steps []lm.Step, caches []*Cache, spans []span, T int) {
	c := &m.cfg
	ly := &m.layers[l]
	H, I := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	eps := float32(c.RMSNormEps)
	for t := range T {
		cpu.RMSNorm(s.xn[t*H:(t+1)*H], s.x[t*H:(t+1)*H], ly.attnNorm, eps)
	}
	cpu.MatMuls([][]float32{s.q, s.k, s.v}, []*cpu.Matrix{ly.q, ly.k, ly.v}, s.xn, T)
	for t := range T {
		q, k, v := s.q[t*qd:(t+1)*qd], s.k[t*kvd:(t+1)*kvd], s.v[t*kvd:(t+1)*kvd]
		cpu.Add(q, ly.qb)
		cpu.Add(k, ly.kb)
		cpu.Add(v, ly.vb)
		m.rope(q, s, t)
		m.rope(k, s, t)
		ca, p := caches[spans[s.seq[t]].step], s.pos[t]
		ca.store(l, p, k, v)
	}
	m.attend(l, s, caches, spans)
	cpu.MatMul(s.tmp, ly.o, s.att, T)
	cpu.Add(s.x[:T*H], s.tmp)
	for t := range T {
		cpu.RMSNorm(s.xn[t*H:(t+1)*H], s.x[t*H:(t+1)*H], ly.mlpNorm, eps)
	}
	cpu.MatMuls([][]float32{s.gate, s.up}, []*cpu.Matrix{ly.gate, ly.up}, s.xn, T)
	cpu.SiLUMul(s.gate[:T*I], s.gate, s.up)
	cpu.MatMul(s.tmp, ly.down, s.gate, T)
	cpu.Add(s.x[:T*H], s.tmp)
}

// rope rotates every head of row (heads × head_dim) by token t's position, in Hugging Face's
// rotate_half layout: the pair is (x[i], x[i+d/2]), not adjacent elements.
func (m *Model) rope(row []float32, s *scratch, t int) {
	hd := m.cfg.HeadDim
	half := hd / 2
	cs, sn := s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half]
	for b := 0; b < len(row); b += hd {
		x1, x2 := row[b:b+half], row[b+half:b+hd]
		for i := range half {
			a, c := x1[i], x2[i]
			x1[i] = a*cs[i] - c*sn[i]
			x2[i] = c*cs[i] + a*sn[i]
		}
	}
}

// attend computes s.att from s.q and the caches' keys and values of layer l, all tokens of all
// spans (decode steps and prompt chunks alike) in one cpu.Attend call: one AttendHead per
// token and kv head, its group of query rows scaled into s.qd, its keys and values the first
// pos+1 of its cache (causal: token t sees positions 0..pos[t] of its own sequence; a span's
// keys and values are stored before it attends) read through the block table in place. The
// threads share the positions of every head (flash decoding), so one sequence at depth uses
// them all, and a prompt token's attention is computed as a decode step's would be: the same
// kernels, chunks and sums. (Prefill once copied each chunk's keys and values out of the blocks
// for the matrix-matrix kernels; through the flash kernels q8 prefill of 2,048 tokens runs
// 15-29% faster, of 4,096 36-41%, and 512 tokens after 2,048 27-57% on Zen 5: docs/BENCHMARKS.md,
// "Prefill attention through the decode kernels".)
func (m *Model) attend(l int, s *scratch, caches []*Cache, spans []span) {
	nkv, hd, group, qd, scale := m.attnShape()
	T := 0
	for _, sp := range spans {
		T += sp.hi - sp.lo
	}
	nh := T * nkv
	s.qd = grow(s.qd, nh*group*hd)
	if cap(s.heads) < nh {
		s.heads = make([]cpu.AttendHead, nh)
		s.kvs = make([]cpu.Paged, 2*nh)
	}
	s.heads = s.heads[:nh]
	if cap(s.full) < 2*len(spans)*nkv {
		s.full = make([]cpu.Paged, 2*len(spans)*nkv)
	}
	h, t := 0, 0
	for i, sp := range spans {
		ca := caches[sp.step]
		// The span's views up to its last token, once per kv head: its tokens' views are
		// prefixes of them sharing their block lists (not a list per token: a long prompt's
		// lists would grow with the square of its length).
		last := s.pos[t+sp.hi-sp.lo-1] + 1
		full := s.full[2*i*nkv : 2*(i+1)*nkv]
		for kh := range nkv {
			ca.keys(&full[2*kh], l, kh, last)
			ca.values(&full[2*kh+1], l, kh, last)
		}
		for range sp.hi - sp.lo {
			n := s.pos[t] + 1
			for kh := range nkv {
				q := s.qd[h*group*hd : (h+1)*group*hd]
				for e, x := range s.q[t*qd+kh*group*hd : t*qd+(kh+1)*group*hd] {
					q[e] = x * scale
				}
				pk, pv := &s.kvs[2*h], &s.kvs[2*h+1]
				ca.prefix(pk, &full[2*kh], n)
				ca.prefix(pv, &full[2*kh+1], n)
				s.heads[h] = cpu.AttendHead{Out: s.att[t*qd+kh*group*hd : t*qd+(kh+1)*group*hd], Q: q, K: pk, V: pv}
				h++
			}
			t++
		}
	}
	cpu.Attend(s.heads, group)
	// The pooled scratch must not keep the blocks alive past the caches that hold them (a
	// released cache's blocks would stay reachable): the views and their block lists let go.
	for i := range s.full[:2*len(spans)*nkv] {
		w := &s.full[i]
		clear(w.Blocks[:cap(w.Blocks)])
		clear(w.BF16[:cap(w.BF16)])
	}
	clear(s.kvs[:2*nh])
	clear(s.heads)
}

// attnShape returns the attention's kv heads, head dim, query heads per kv head, query width
// (heads × head dim) and score scale 1/√(head dim).
func (m *Model) attnShape() (nkv, hd, group, qd int, scale float32) {
	c := &m.cfg
	nkv, hd = c.NumKeyValueHeads, c.HeadDim
	return nkv, hd, c.NumAttentionHeads / nkv, c.NumAttentionHeads * hd, float32(1 / math.Sqrt(float64(hd)))
}

// logits applies the final norm and the LM head to the rows the steps ask for. The last rows of
// steps that want only those go through one MatMul together (a decode batch streams the LM head
// once); spans that want all their rows are written straight into their step's Logits.
func (m *Model) logits(s *scratch, steps []lm.Step, spans []span) {
	c := &m.cfg
	H, V := c.HiddenSize, c.VocabSize
	eps := float32(c.RMSNormEps)
	last := 0
	for _, sp := range spans {
		if !steps[sp.step].AllLogits && sp.hi == len(steps[sp.step].Tokens) {
			last++
		}
	}
	s.sel = grow(s.sel, max(last, 1)*H)
	r, t := 0, 0
	var one *lm.Step
	for _, sp := range spans {
		st := &steps[sp.step]
		n := sp.hi - sp.lo
		switch {
		case st.AllLogits:
			// Reuses s.xn (free after the last layer) for the normed rows.
			for j := range n {
				cpu.RMSNorm(s.xn[j*H:(j+1)*H], s.x[(t+j)*H:(t+j+1)*H], m.norm, eps)
			}
			cpu.MatMul(st.Logits[sp.lo*V:sp.hi*V], m.lmHead, s.xn, n)
		case sp.hi == len(st.Tokens):
			u := t + n - 1
			cpu.RMSNorm(s.sel[r*H:(r+1)*H], s.x[u*H:(u+1)*H], m.norm, eps)
			r++
			one = st
		}
		t += n
	}
	switch {
	case last == 0:
	case last == 1:
		cpu.MatMul(one.Logits, m.lmHead, s.sel, 1)
	default:
		s.logits = grow(s.logits, last*V)
		cpu.MatMul(s.logits, m.lmHead, s.sel, last)
		r = 0
		for _, sp := range spans {
			st := &steps[sp.step]
			if !st.AllLogits && sp.hi == len(st.Tokens) {
				copy(st.Logits[:V], s.logits[r*V:(r+1)*V])
				r++
			}
		}
	}
}
