// Package gentest provides Toy, a deterministic stand-in for a language model, for tests of the
// generator and of what is built on it (the student policy, the HTTP server), and Sample, the
// sampling rule written out plainly for tests of the host and device samplers.
package gentest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Toy is a deterministic toy language model. The logits at a position are a hash of every token
// up to and including it, so a KV cache that holds the wrong tokens (a bad truncation, a mixed-up
// batch) changes the output. It records every Forward call and counts live caches. Safe for
// concurrent use.
type Toy struct {
	// Vocab and Context are the vocabulary size and context length.
	Vocab, Context int
	// Favor, when set, is asked for each position with the tokens so far; a token it returns
	// with ok gets a logit far above all others (to script stop tokens or text).
	Favor func(toks []int) (id int, ok bool)
	// Delay is slept in every Forward call, to give concurrent requests time to join a batch.
	Delay time.Duration
	// NoFork makes NewCache return caches without Fork (lm.Forker), as a model whose
	// caches cannot share memory.
	NoFork bool

	mu    sync.Mutex
	calls []Call
	live  int
	forks int
}

// Call records one Forward: the tokens of each step.
type Call struct {
	Steps [][]int
}

// Tokens is the total number of tokens in the call.
func (c Call) Tokens() int {
	n := 0
	for _, s := range c.Steps {
		n += len(s)
	}
	return n
}

// NewToy returns a Toy with the given vocabulary size and context length.
func NewToy(vocab, context int) *Toy { return &Toy{Vocab: vocab, Context: context} }

// VocabSize implements lm.Model.
func (t *Toy) VocabSize() int { return t.Vocab }

// ContextLength implements lm.Model.
func (t *Toy) ContextLength() int { return t.Context }

// Calls returns the Forward calls so far.
func (t *Toy) Calls() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Call(nil), t.calls...)
}

// ResetCalls forgets the recorded calls.
func (t *Toy) ResetCalls() {
	t.mu.Lock()
	t.calls = nil
	t.mu.Unlock()
}

// Forks is the number of caches made by Fork.
func (t *Toy) Forks() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forks
}

// LiveCaches is the number of caches made and not yet released.
func (t *Toy) LiveCaches() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

type toyCache struct {
	t        *Toy
	toks     []int
	hashes   []uint64 // hashes[i]: hash of toks[:i+1]
	capacity int
	released bool
}

func (c *toyCache) Len() int { return len(c.toks) }

func (c *toyCache) Truncate(n int) {
	if n < 0 || n > len(c.toks) {
		panic(fmt.Sprintf("gentest: Truncate(%d) of a cache holding %d tokens", n, len(c.toks)))
	}
	c.toks, c.hashes = c.toks[:n], c.hashes[:n]
}

// Fork implements lm.Forker: the new cache holds a copy of the first n tokens.
func (c *toyCache) Fork(n, maxTokens int) (lm.Cache, error) {
	if c.released {
		return nil, errors.New("gentest: Fork of a released cache")
	}
	if n < 0 || n > len(c.toks) || maxTokens < max(n, 1) || maxTokens > c.t.Context {
		return nil, fmt.Errorf("gentest: Fork(%d, %d) of a cache holding %d tokens", n, maxTokens, len(c.toks))
	}
	c.t.mu.Lock()
	c.t.live++
	c.t.forks++
	c.t.mu.Unlock()
	return &toyCache{t: c.t, toks: slices.Clone(c.toks[:n]), hashes: slices.Clone(c.hashes[:n]), capacity: maxTokens}, nil
}

// plainCache is a toyCache without Fork.
type plainCache struct{ c *toyCache }

func (p plainCache) Len() int       { return p.c.Len() }
func (p plainCache) Truncate(n int) { p.c.Truncate(n) }
func (p plainCache) Release()       { p.c.Release() }

// unwrap returns the toyCache behind c, or nil.
func unwrap(c lm.Cache) *toyCache {
	switch c := c.(type) {
	case *toyCache:
		return c
	case plainCache:
		return c.c
	}
	return nil
}

func (c *toyCache) Release() {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.released {
		panic("gentest: cache released twice")
	}
	c.released = true
	c.t.live--
}

// NewCache implements lm.Model.
func (t *Toy) NewCache(maxTokens int) (lm.Cache, error) {
	if maxTokens <= 0 || maxTokens > t.Context {
		return nil, fmt.Errorf("gentest: cache of %d tokens outside (0, %d]", maxTokens, t.Context)
	}
	t.mu.Lock()
	t.live++
	t.mu.Unlock()
	c := &toyCache{t: t, capacity: maxTokens}
	if t.NoFork {
		return plainCache{c}, nil
	}
	return c, nil
}

func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Logits returns the toy's logits after the tokens toks (what Forward computes for the last of
// them), for checks that do not go through a cache.
func (t *Toy) Logits(toks []int) []float32 {
	var h uint64 = 0x243f6a8885a308d3
	for _, tok := range toks {
		h = mix(h ^ uint64(tok+1))
	}
	out := make([]float32, t.Vocab)
	t.fill(out, h, toks)
	return out
}

func (t *Toy) fill(dst []float32, h uint64, toks []int) {
	for v := range dst {
		dst[v] = float32(mix(h+uint64(v))>>40) / float32(1<<24) * 8
	}
	if t.Favor != nil {
		if id, ok := t.Favor(toks); ok && id >= 0 && id < len(dst) {
			dst[id] = 100
		}
	}
}

// Forward implements lm.Model.
func (t *Toy) Forward(ctx context.Context, steps []lm.Step) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rec := Call{Steps: make([][]int, len(steps))}
	for i, st := range steps {
		c := unwrap(st.Cache)
		if c == nil || c.t != t {
			return fmt.Errorf("gentest: step %d: cache not made by this model", i)
		}
		if c.released {
			return fmt.Errorf("gentest: step %d: cache used after Release", i)
		}
		if len(st.Tokens) == 0 {
			return fmt.Errorf("gentest: step %d: no tokens", i)
		}
		if len(c.toks)+len(st.Tokens) > c.capacity {
			return fmt.Errorf("gentest: step %d: %d+%d tokens exceed the cache capacity %d", i, len(c.toks), len(st.Tokens), c.capacity)
		}
		for _, tok := range st.Tokens {
			if tok < 0 || tok >= t.Vocab {
				return fmt.Errorf("gentest: step %d: token %d outside the vocabulary", i, tok)
			}
		}
		for j := range i {
			if steps[j].Cache == st.Cache {
				return errors.New("gentest: one cache twice in a batch")
			}
		}
		rec.Steps[i] = append([]int(nil), st.Tokens...)
	}
	if t.Delay > 0 {
		select {
		case <-time.After(t.Delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range steps {
		st := &steps[i]
		c := unwrap(st.Cache)
		rows := 1
		if st.AllLogits {
			rows = len(st.Tokens)
		}
		if cap(st.Logits) >= rows*t.Vocab {
			st.Logits = st.Logits[:rows*t.Vocab]
		} else {
			st.Logits = make([]float32, rows*t.Vocab)
		}
		for j, tok := range st.Tokens {
			var h uint64 = 0x243f6a8885a308d3
			if n := len(c.hashes); n > 0 {
				h = c.hashes[n-1]
			}
			h = mix(h ^ uint64(tok+1))
			c.toks = append(c.toks, tok)
			c.hashes = append(c.hashes, h)
			row := j - (len(st.Tokens) - rows)
			if row >= 0 {
				t.fill(st.Logits[row*t.Vocab:(row+1)*t.Vocab], h, c.toks)
			}
		}
	}
	t.mu.Lock()
	t.calls = append(t.calls, rec)
	t.mu.Unlock()
	return nil
}
