package qwen2

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/generate"
)

var _ generate.Model = (*Model)(nil)

// scratch holds one Forward call's activations, T tokens at a time; kept in a pool so decode
// does not allocate per token.
type scratch struct {
	x, xn, q, k, v, att, tmp, gate, up []float32
	cos, sin                           []float32
	sel, logits                        []float32
	pos, seq                           []int
	scores                             [][]float32 // per attention worker
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
// every weight matrix is applied once to the tokens of all steps (cpu.MatMul over T rows), so a
// prefill runs matrix-matrix products and a batch of decode steps shares one pass over the
// weights. It checks every step before changing anything; on an error or a done ctx no cache's
// length changes.
func (m *Model) Forward(ctx context.Context, steps []generate.Step) error {
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
	s := m.getScratch(T)
	defer m.scratch.Put(s)
	c := &m.cfg
	H, half := c.HiddenSize, c.HeadDim/2
	t := 0
	for i := range steps {
		ca := caches[i]
		ca.reserve(ca.n + len(steps[i].Tokens))
		for j, tok := range steps[i].Tokens {
			p := ca.n + j
			s.pos[t], s.seq[t] = p, i
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
		m.layer(l, s, caches, T)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qwen2: forward: %w", err)
	}
	m.logits(s, steps)
	for i := range steps {
		caches[i].n += len(steps[i].Tokens)
	}
	return nil
}

// checkSteps validates steps and returns their caches and total token count.
func (m *Model) checkSteps(steps []generate.Step) ([]*Cache, int, error) {
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

// layer runs decoder layer l over the T tokens in s.x.
func (m *Model) layer(l int, s *scratch, caches []*Cache, T int) {
	c := &m.cfg
	ly := &m.layers[l]
	H, I := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	eps := float32(c.RMSNormEps)
	for t := range T {
		cpu.RMSNorm(s.xn[t*H:(t+1)*H], s.x[t*H:(t+1)*H], ly.attnNorm, eps)
	}
	cpu.MatMul(s.q, ly.q, s.xn, T)
	cpu.MatMul(s.k, ly.k, s.xn, T)
	cpu.MatMul(s.v, ly.v, s.xn, T)
	for t := range T {
		q, k, v := s.q[t*qd:(t+1)*qd], s.k[t*kvd:(t+1)*kvd], s.v[t*kvd:(t+1)*kvd]
		cpu.Add(q, ly.qb)
		cpu.Add(k, ly.kb)
		cpu.Add(v, ly.vb)
		m.rope(q, s, t)
		m.rope(k, s, t)
		ca, p := caches[s.seq[t]], s.pos[t]
		copy(ca.k[l][p*kvd:(p+1)*kvd], k)
		copy(ca.v[l][p*kvd:(p+1)*kvd], v)
	}
	m.attend(l, s, caches, T)
	cpu.MatMul(s.tmp, ly.o, s.att, T)
	cpu.Add(s.x, s.tmp)
	for t := range T {
		cpu.RMSNorm(s.xn[t*H:(t+1)*H], s.x[t*H:(t+1)*H], ly.mlpNorm, eps)
	}
	cpu.MatMul(s.gate, ly.gate, s.xn, T)
	cpu.MatMul(s.up, ly.up, s.xn, T)
	cpu.SiLUMul(s.gate[:T*I], s.gate, s.up)
	cpu.MatMul(s.tmp, ly.down, s.gate, T)
	cpu.Add(s.x, s.tmp)
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

// attend computes s.att from s.q and the caches' keys and values of layer l (causal: token t sees
// positions 0..pos[t] of its own sequence). Work items are (token, kv head) pairs, so the query
// heads sharing a kv head read its keys and values once; items are handed out dynamically
// because a causal prefill's late tokens cost more than its early ones.
func (m *Model) attend(l int, s *scratch, caches []*Cache, T int) {
	c := &m.cfg
	nkv, hd := c.NumKeyValueHeads, c.HeadDim
	group := c.NumAttentionHeads / nkv
	qd, kvd := c.NumAttentionHeads*hd, nkv*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	maxN := 0
	for t := range T {
		maxN = max(maxN, s.pos[t]+1)
	}
	items := T * nkv
	workers := min(cpu.Threads(), items)
	for len(s.scores) < workers {
		s.scores = append(s.scores, nil)
	}
	for w := range workers {
		s.scores[w] = grow(s.scores[w], group*maxN)
	}
	parallelFor(items, workers, func(w, lo, hi int) {
		sc := s.scores[w]
		for it := lo; it < hi; it++ {
			t, kh := it/nkv, it%nkv
			ca := caches[s.seq[t]]
			n := s.pos[t] + 1
			K, V := ca.k[l], ca.v[l]
			q := s.q[t*qd+kh*group*hd : t*qd+(kh+1)*group*hd]
			for p := range n {
				krow := K[p*kvd+kh*hd : p*kvd+(kh+1)*hd]
				for g := range group {
					sc[g*n+p] = cpu.Dot(q[g*hd:(g+1)*hd], krow) * scale
				}
			}
			for g := range group {
				cpu.Softmax(sc[g*n : (g+1)*n])
			}
			out := s.att[t*qd+kh*group*hd : t*qd+(kh+1)*group*hd]
			clear(out)
			for p := range n {
				vrow := V[p*kvd+kh*hd : p*kvd+(kh+1)*hd]
				for g := range group {
					cpu.Axpy(out[g*hd:(g+1)*hd], sc[g*n+p], vrow)
				}
			}
		}
	})
}

// parallelFor runs f over [0,n) on the given number of goroutines (the caller's included),
// handing out chunks from a shared counter; w is the worker's index. (cpu's row splitter is
// static and unexported; attention needs dynamic chunks, so this small one lives here.)
func parallelFor(n, workers int, f func(w, lo, hi int)) {
	if workers <= 1 || n <= 1 {
		f(0, 0, n)
		return
	}
	grain := max(1, n/(workers*8))
	var next atomic.Int64
	run := func(w int) {
		for {
			lo := int(next.Add(int64(grain))) - grain
			if lo >= n {
				return
			}
			f(w, lo, min(lo+grain, n))
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w)
		}()
	}
	run(0)
	wg.Wait()
}

// logits applies the final norm and the LM head to the rows each step asks for: one MatMul over
// all of them, written straight into the step's Logits when there is one step.
func (m *Model) logits(s *scratch, steps []generate.Step) {
	c := &m.cfg
	H, V := c.HiddenSize, c.VocabSize
	rows := 0
	for i := range steps {
		if steps[i].AllLogits {
			rows += len(steps[i].Tokens)
		} else {
			rows++
		}
	}
	s.sel = grow(s.sel, rows*H)
	r, t := 0, 0
	for i := range steps {
		n := len(steps[i].Tokens)
		first := t + n - 1
		if steps[i].AllLogits {
			first = t
		}
		for u := first; u < t+n; u++ {
			cpu.RMSNorm(s.sel[r*H:(r+1)*H], s.x[u*H:(u+1)*H], m.norm, float32(c.RMSNormEps))
			r++
		}
		t += n
	}
	if len(steps) == 1 {
		steps[0].Logits = grow(steps[0].Logits, rows*V)
		cpu.MatMul(steps[0].Logits, m.lmHead, s.sel, rows)
		return
	}
	s.logits = grow(s.logits, rows*V)
	cpu.MatMul(s.logits, m.lmHead, s.sel, rows)
	r = 0
	for i := range steps {
		n := 1
		if steps[i].AllLogits {
			n = len(steps[i].Tokens)
		}
		steps[i].Logits = grow(steps[i].Logits, n*V)
		copy(steps[i].Logits, s.logits[r*V:(r+n)*V])
		r += n
	}
}
