package cuda

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// span is the tokens [lo, hi) of one step within a pass.
type span struct{ step, lo, hi int }

// rowOut is where a logit row of a pass goes: steps[step].Logits[at:at+V].
type rowOut struct{ step, at int }

// graphKey names a captured decode step: T sequences of one token, with logits copied back
// (sample false) or tokens picked on the device (sample true; with draw, sample_rows runs too:
// some row draws or log-probabilities are wanted).
type graphKey struct {
	T            int
	sample, draw bool
}

// Sampling is how ForwardSample picks a step's next token on the device (lm.Sampling).
type Sampling = lm.Sampling

// draws reports whether s draws a token at random (else its token is the argmax).
func draws(s Sampling) bool { return s.Temperature > 0 && s.TopK != 1 }

// seq is one sequence's part of a forward: the tokens appended to its cache, whether every
// token's logits are wanted (else the last one's), and where they go (grown as needed).
type seq struct {
	cache  *Cache
	tokens []int
	all    bool
	logits []float32
}

// forward runs seqs (checked by the caller) as passes of up to Options.MaxPass tokens and
// Options.MaxRows sequences, delivering their logits, or with how their sampled tokens into out
// (and, with lps, their log-probabilities); caches advance only when every pass is done.
func (m *Model) forward(ctx context.Context, steps []seq, how []Sampling, out []int, lps []float32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	caches := make([]*Cache, len(steps))
	for i := range steps {
		caches[i] = steps[i].cache
		if caches[i].released {
			return fmt.Errorf("cuda: step %d: cache was released", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	if how == nil {
		for i := range steps {
			n := m.V
			if steps[i].all {
				n *= len(steps[i].tokens)
			}
			if cap(steps[i].logits) < n {
				steps[i].logits = make([]float32, n)
			}
			steps[i].logits = steps[i].logits[:n]
		}
	}
	undo := func() {
		for _, c := range caches {
			c.trim(c.n)
		}
	}
	for i, c := range caches {
		if err := c.reserve(c.n + len(steps[i].tokens)); err != nil {
			undo()
			return err
		}
	}
	// With graphs, the one-token steps (decoding sequences) run as passes of their own, ahead
	// of the prompt chunks, so that a step mixing both replays the decode graph for the former
	// and launches directly only for the latter.
	order := make([]int, 0, len(steps))
	split := !graphsOff(m.opts)
	for i := range steps {
		if !split || len(steps[i].tokens) == 1 {
			order = append(order, i)
		}
	}
	if split {
		for i := range steps {
			if len(steps[i].tokens) > 1 {
				order = append(order, i)
			}
		}
	}
	var spans []span
	count := 0
	for k, i := range order {
		for lo, n := 0, len(steps[i].tokens); lo < n; {
			hi := min(n, lo+m.opts.MaxPass-count)
			spans = append(spans, span{step: i, lo: lo, hi: hi})
			count += hi - lo
			lo = hi
			last := k == len(order)-1
			kindEnds := split && !last && n == 1 && len(steps[order[k+1]].tokens) > 1
			if count == m.opts.MaxPass || len(spans) == m.opts.MaxRows || (lo == n && (last || kindEnds)) {
				if err := m.pass(ctx, steps, caches, spans, count, how, out, lps); err != nil {
					undo()
					return err
				}
				spans, count = spans[:0], 0
			}
		}
	}
	for i, c := range caches {
		c.n += len(steps[i].tokens)
	}
	return nil
}

// decodeBucket is the batch size whose graph a decode pass of T sequences replays: T up to 2,
// then powers of two up to 8, multiples of 8 up to 64 and of 32 beyond (at most limit), so
// that a batch shrinking as its requests finish reuses at most 17 graphs (up to 256) instead of
// capturing one per size; the padding, at most 7 rows up to 64 and 31 beyond, costs little
// where the products are bound by reading the weights.
func decodeBucket(T, limit int) int {
	var b int
	switch {
	case T <= 2:
		b = T
	case T <= 4:
		b = 4
	case T <= 8:
		b = 8
	case T <= 64:
		b = (T + 7) / 8 * 8
	default:
		b = (T + 31) / 32 * 32
	}
	return max(T, min(b, limit))
}

// pass runs the T tokens of spans through the model and delivers their logits (or, with how,
// their sampled tokens and, with lps, log-probabilities). Positions follow each cache's length
// plus the span's offset (caches are only advanced by forward, once every pass is done).
func (m *Model) pass(ctx context.Context, steps []seq, caches []*Cache, spans []span, T int, how []Sampling, out []int, lps []float32) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cuda: forward: %w", err)
	}
	l, h := m.ml, m.metaHost
	t, off := 0, 0
	var outs []rowOut
	for k, sp := range spans {
		st, ca := &steps[sp.step], caches[sp.step]
		h[l.tableOff+k] = int32(off)
		off += copy(h[l.tables+off:], ca.blocks)
		n := sp.hi - sp.lo
		for j, tok := range st.tokens[sp.lo:sp.hi] {
			h[l.toks+t+j] = int32(tok)
			h[l.pos+t+j] = int32(ca.n + sp.lo + j)
			h[l.seq+t+j] = int32(k)
		}
		switch {
		case st.all:
			for j := range n {
				h[l.rows+len(outs)] = int32(t + j)
				outs = append(outs, rowOut{step: sp.step, at: (sp.lo + j) * m.V})
			}
		case sp.hi == len(st.tokens):
			h[l.rows+len(outs)] = int32(t + n - 1)
			outs = append(outs, rowOut{step: sp.step})
		}
		t += n
	}
	// A pass of one token per sequence runs split-key decode attention; the keys per split
	// follow from its longest context. With graphs it replays the graph of its bucket
	// (decodeBucket), the rows past T padding: token 0 at position 0 of the pad block, outputs
	// unused.
	single := len(spans) == T
	decode := single && len(outs) == T && T <= m.opts.MaxRows && !graphsOff(m.opts)
	B := T
	if decode {
		B = decodeBucket(T, min(m.opts.MaxRows, m.opts.MaxPass))
		for k := T; k < B; k++ {
			h[l.tableOff+k] = int32(off)
			h[l.tables+off] = m.padBlock
			off++
			h[l.toks+k], h[l.pos+k], h[l.seq+k], h[l.rows+k] = 0, 0, int32(k), int32(k)
		}
	}
	if single {
		ctx := 0
		for k := range spans {
			ctx = max(ctx, int(h[l.pos+k])+1)
		}
		h[l.chunk] = int32(splitChunk(ctx, m.splits(T), m.geo.bs))
	} else {
		tiles := prefillTiles(h[l.tiles:l.tiles], h[l.seq:l.seq+T], h[l.pos:l.pos+T], m.qt)
		m.nTiles = len(tiles) / 2
	}
	if err := m.dev.CopyIn(m.meta, unsafe.Pointer(&h[0]), 4*(l.tables+off)); err != nil {
		return err
	}
	sample := how != nil
	draw := sample && lps != nil
	if sample {
		for i := range outs {
			draw = draw || draws(how[outs[i].step])
		}
		if draw {
			if err := m.setSampling(outs, how, B-T); err != nil {
				return err
			}
		}
	}
	R := min(len(outs), m.opts.MaxRows)
	if decode {
		if err := m.replay(graphKey{T: B, sample: sample, draw: draw}); err != nil {
			return err
		}
	} else {
		if err := m.body(T, single); err != nil {
			return err
		}
		if R > 0 {
			if err := m.head(0, R, sample, draw); err != nil {
				return err
			}
		}
	}
	for r0 := 0; r0 < len(outs); r0 += m.opts.MaxRows {
		R := min(len(outs)-r0, m.opts.MaxRows)
		if r0 > 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cuda: forward: %w", err)
			}
			if err := m.head(r0, R, sample, draw); err != nil {
				return err
			}
		}
		rows := R // the rows head ran over: a decode pass's graph runs its whole bucket
		if decode {
			rows = B
		}
		if err := m.deliver(steps, outs[r0:r0+R], rows, how, out, lps); err != nil {
			return err
		}
	}
	return nil
}

// body launches the embedding and every decoder layer for the pass's T tokens, leaving the
// residual stream in m.x. With single (one token per sequence) attention splits each token's
// keys (attn_split); otherwise it runs over the pass's query tiles (attn_prefill, m.nTiles).
func (m *Model) body(T int, single bool) error {
	o, g := m.op, m.geo
	mt := meta{pos: m.metaAt(m.ml.pos), seq: m.metaAt(m.ml.seq), tables: m.metaAt(m.ml.tables), tableOff: m.metaAt(m.ml.tableOff)}
	if err := o.embed(m.x, m.embed, m.metaAt(m.ml.toks), T, m.H); err != nil {
		return err
	}
	for l := range m.layers {
		ly := &m.layers[l]
		steps := []func() error{
			func() error { return o.rmsnorm(m.xn, m.x, ly.attnNorm, 0, T, m.H, m.eps) },
			func() error { return o.matmul(m.qkv, m.xn, ly.qkv, T, m.qkvW, m.H, m.qkvW, false, m.bf16Scratch()) },
			func() error {
				return o.ropeKV(m.q, m.qkv, ly.qkvBias, m.cosT, m.sinT, mt, m.layerKV(l), T, g)
			},
			func() error {
				if single {
					return o.attnSplit(m.att, m.part, m.partML, m.q, m.layerKV(l), mt, m.metaAt(m.ml.chunk), T, m.splits(T), g, m.scale)
				}
				return o.attnPrefill(m.att, m.q, m.layerKV(l), m.metaAt(m.ml.tiles), mt, m.nTiles, m.qt, g, m.scale)
			},
			func() error { return o.matmul(m.x, m.att, ly.o, T, m.H, m.qd, m.H, true, m.bf16Scratch()) },
			func() error { return o.rmsnorm(m.xn, m.x, ly.mlpNorm, 0, T, m.H, m.eps) },
			func() error { return o.matmul(m.gu, m.xn, ly.gateUp, T, 2*m.I, m.H, 2*m.I, false, m.bf16Scratch()) },
			func() error { return o.siluMul(m.act, m.gu, T, m.I) },
			func() error { return o.matmul(m.x, m.act, ly.down, T, m.H, m.I, m.H, true, m.bf16Scratch()) },
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
		}
	}
	return nil
}

// head launches the final norm and the LM head for the R logit rows from row r0 of the pass's
// row list, into m.logits; with sample, the greedy tokens (m.toks[0:R]) and, with draw, the
// sampled ones (m.toks[R:2R]) and their log-probabilities (f32 bits, m.toks[2R:3R]) too.
func (m *Model) head(r0, R int, sample, draw bool) error {
	o := m.op
	if err := o.rmsnorm(m.xn, m.x, m.norm, m.metaAt(m.ml.rows+r0), R, m.H, m.eps); err != nil {
		return err
	}
	if err := o.matmul(m.logits, m.xn, m.lmHead, R, m.V, m.H, m.V, false, m.bf16Scratch()); err != nil {
		return err
	}
	if !sample {
		return nil
	}
	if err := o.argmax(m.toks, m.logits, R, m.V); err != nil {
		return err
	}
	if !draw {
		return nil
	}
	return o.sample(m.toks+Ptr(4*R), m.toks+Ptr(8*R), m.toks, m.logits, m.params, R, m.V)
}

func (m *Model) metaAt(i int) Ptr { return m.meta + Ptr(4*i) }

// setSampling uploads each logit row's (1/temperature, top_p, u, top_k) as sample_rows reads
// them (top_k 1 for a greedy row, whose 1/temperature only scales its log-probability: 1 at
// temperature 0, as the host sampler reports it), then pad rows of greedy settings (the
// padding rows of a bucketed decode pass).
func (m *Model) setSampling(outs []rowOut, how []Sampling, pad int) error {
	p := make([]float64, 4*(len(outs)+pad))
	for i := len(outs); i < len(outs)+pad; i++ {
		p[4*i], p[4*i+1], p[4*i+3] = 1, 1, 1
	}
	for i, r := range outs {
		q := samplingParams(how[r.step])
		copy(p[4*i:], q[:])
	}
	if len(p) == 0 {
		return nil
	}
	return m.dev.CopyIn(m.params, unsafe.Pointer(&p[0]), 8*len(p))
}

// samplingParams is s as sample_rows reads it: (1/temperature, top_p, u, top_k).
func samplingParams(s Sampling) [4]float64 {
	inv, top, k := 1.0, s.TopP, float64(s.TopK)
	if s.Temperature > 0 {
		inv = 1 / s.Temperature
	}
	if top <= 0 {
		top = 1
	}
	if !draws(s) {
		k = 1
	}
	return [4]float64{inv, top, s.U, k}
}

// deliver copies the logits (or sampled tokens, and with lps their log-probabilities) of
// outs, the rows now in m.logits, to their steps. head ran over rows rows (at least len(outs)):
// m.toks holds rows greedy ids, then rows sampled ids, then rows log-probabilities, and one
// copy brings back the part that holds what is wanted.
func (m *Model) deliver(steps []seq, outs []rowOut, rows int, how []Sampling, out []int, lps []float32) error {
	R := len(outs)
	if how != nil {
		n := R // greedy ids
		for _, r := range outs {
			if draws(how[r.step]) {
				n = rows + R // sampled ids too
			}
		}
		if lps != nil {
			n = 2*rows + R
		}
		toks := make([]int32, n)
		if err := m.dev.CopyOut(unsafe.Pointer(&toks[0]), m.toks, 4*n); err != nil {
			return err
		}
		for i, r := range outs {
			if draws(how[r.step]) {
				out[r.step] = int(toks[rows+i])
			} else {
				out[r.step] = int(toks[i])
			}
			if lps != nil {
				lps[r.step] = math.Float32frombits(uint32(toks[2*rows+i]))
			}
		}
		return nil
	}
	for i, r := range outs {
		dst := steps[r.step].logits[r.at : r.at+m.V]
		if err := m.dev.CopyOut(unsafe.Pointer(&dst[0]), m.logits+Ptr(4*i*m.V), 4*m.V); err != nil {
			return err
		}
	}
	return nil
}

// replay launches the graph of a decode pass of key.T sequences, capturing it first: the
// body and the head read everything that changes between steps (tokens, positions, block
// tables, sampling settings) from device buffers at fixed addresses, so one capture serves
// every later step of that batch size (and, padded, of the smaller sizes of its bucket).
func (m *Model) replay(key graphKey) error {
	g := m.graphs[key]
	if g == nil {
		if err := m.dev.BeginCapture(); err != nil {
			return err
		}
		err := m.body(key.T, true)
		if err == nil {
			err = m.head(0, key.T, key.sample, key.draw)
		}
		graph, cerr := m.dev.EndCapture()
		if err != nil {
			if graph != nil {
				graph.Destroy()
			}
			return err
		}
		if cerr != nil {
			return cerr
		}
		g = graph
		m.graphs[key] = g
	}
	return g.Launch()
}
