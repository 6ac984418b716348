package generate

import (
	"fmt"
	"slices"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// shareMin is the fewest tokens beyond what the kept caches offer that make a request start
// from a running request's prefix, or wait for it to be computed.
const shareMin = 32

// attach gives s a cache holding the longest prefix of its prompt that can be had, else a new
// one. It returns false, with no cache, when s is to wait for a running request to compute a
// longer common prefix first. The sources, in order: the running request s waits for; none
// when reuse is off; for caches that do not fork, a kept cache taken over; a running request
// sharing at least shareMin tokens more than the kept caches; a kept cache.
func (g *Generator) attach(s *Sequence) (bool, error) {
	prompt := s.req.Prompt
	need := len(prompt) + s.req.MaxTokens
	capacity := min(g.ctxLen, need+g.cfg.Headroom)
	limit := len(prompt) - 1 // feed at least one token to get logits
	if a := s.leading(); a != nil {
		return g.follow(s, a, s.waitFor, capacity)
	}
	if g.cfg.CacheTokens < 0 {
		return true, g.fresh(s, capacity)
	}
	c, at := g.tree.match(prompt)
	c = min(c, limit)
	if !g.forking {
		return true, g.takeOver(s, c, at, need, capacity)
	}
	if a, ca := g.running(prompt); a != nil && min(ca, limit) >= c+shareMin {
		return g.follow(s, a, min(ca, limit), capacity)
	}
	if c > 0 {
		return true, g.forkKept(s, at, c, capacity)
	}
	return true, g.fresh(s, capacity)
}

// leading returns the running request s waits for, or nil: s waits for none, or that one has
// ended (s then stops waiting).
func (s *Sequence) leading() *Sequence {
	a := s.leader
	if a != nil && (a.cache == nil || a.isEnded()) {
		s.leader = nil
		return nil
	}
	return a
}

// follow forks s from running request a's cache at n tokens of its prompt when a has fed them,
// else makes s wait for a (false; counted in WaitedForPrefix once per request).
func (g *Generator) follow(s, a *Sequence, n, capacity int) (bool, error) {
	if len(a.fed) >= n {
		s.leader = nil
		return true, g.fork(s, a.cache, n, capacity, true)
	}
	s.leader, s.waitFor = a, n
	if !s.waited {
		s.waited = true
		g.statsMu.Lock()
		g.stats.WaitedForPrefix++
		g.statsMu.Unlock()
	}
	return false, nil
}

// forkKept forks s from the most recently used kept cache at or below node at, which holds the
// first c tokens of its prompt, and marks it used. They count as shared unless the prompt parts
// from that cache's own prompt within reuseSlack tokens of its end.
func (g *Generator) forkKept(s *Sequence, at *pnode, c, capacity int) error {
	src := g.tree.source(at)
	g.clock++
	g.tree.touch(src, g.clock)
	return g.fork(s, src.cache, c, capacity, c < src.prompt-reuseSlack)
}

// fresh gives s a new cache.
func (g *Generator) fresh(s *Sequence, capacity int) error {
	c, err := g.model.NewCache(capacity)
	if err != nil {
		return fmt.Errorf("generate: new KV cache for %d tokens: %w", capacity, err)
	}
	s.cache, s.capacity = c, capacity
	s.todo = s.req.Prompt
	return nil
}

// fork gives s a fork of src holding the first n tokens of its prompt; shared says whether they
// are another request's prefix rather than its own conversation's history.
func (g *Generator) fork(s *Sequence, src lm.Cache, n, capacity int, shared bool) error {
	c, err := src.(lm.Forker).Fork(n, capacity)
	if err != nil {
		return fmt.Errorf("generate: KV cache of %d tokens forked at %d: %w", capacity, n, err)
	}
	s.cache, s.capacity = c, capacity
	s.fed = slices.Clone(s.req.Prompt[:n])
	s.todo = s.req.Prompt[n:]
	s.cached = n
	g.statsMu.Lock()
	g.stats.PrefixHits++
	if shared {
		g.stats.SharedTokens += int64(n)
	}
	if g.isRunning(src) {
		g.stats.FromRunning++
	}
	g.statsMu.Unlock()
	return nil
}

// isRunning reports whether c is an active sequence's cache.
func (g *Generator) isRunning(c lm.Cache) bool {
	for _, a := range g.active {
		if a.cache == c {
			return true
		}
	}
	return false
}

// running returns the active sequence sharing the longest prefix with prompt, and its length.
func (g *Generator) running(prompt []int) (*Sequence, int) {
	var best *Sequence
	bestN := 0
	for _, a := range g.active {
		if a.cache == nil {
			continue
		}
		toks := a.req.Prompt
		if len(a.fed) > len(toks) {
			toks = a.fed
		}
		if n := commonPrefix(toks, prompt); n > bestN {
			best, bestN = a, n
		}
	}
	return best, bestN
}

// takeOver is attach for caches that do not fork: s takes a kept cache over (truncating it to
// the common prefix) when it holds the same conversation's earlier turn, i.e. the prompt parts
// from it no more than reuseSlack tokens before the end of that turn's prompt, or repeats it.
func (g *Generator) takeOver(s *Sequence, c int, at *pnode, need, capacity int) error {
	prompt := s.req.Prompt
	var best *pnode
	consider := func(n *pnode) {
		if n == nil || n.cache == nil || n.capacity < need {
			return
		}
		if min(c, n.depth)+reuseSlack < n.prompt && c < len(prompt)-1 {
			return
		}
		if best == nil || n.depth > best.depth {
			best = n
		}
	}
	consider(g.tree.source(at))
	for n := at; n != nil; n = n.parent {
		consider(n)
	}
	if c == 0 || best == nil {
		return g.fresh(s, capacity)
	}
	common := min(c, best.depth)
	capacity = best.capacity
	cache := g.tree.detach(best)
	cache.Truncate(common)
	s.cache, s.capacity = cache, capacity
	s.fed = slices.Clone(prompt[:common])
	s.todo = prompt[common:]
	s.cached = common
	g.statsMu.Lock()
	g.stats.PrefixHits++
	g.statsMu.Unlock()
	return nil
}

// reuseSlack is how many tokens before the end of a kept cache's prompt a new prompt may part
// from it and still count as the same conversation: BPE can merge the generation prompt's last
// token with the start of the re-sent reply (Qwen's "assistant\n" + "\n\n" becomes "assistant",
// "\n\n\n").
const reuseSlack = 4

// keep puts s's cache into the prefix tree (or releases it), then evicts the least recently
// used kept caches while they hold more than CacheTokens tokens.
func (g *Generator) keep(s *Sequence) {
	c := s.cache
	s.cache = nil
	if c == nil {
		return
	}
	if g.cfg.CacheTokens < 0 || len(s.fed) > g.cfg.CacheTokens || len(s.fed) == 0 {
		c.Release()
		g.updatePoolStats()
		return
	}
	g.clock++
	n := g.tree.insert(s.fed)
	g.tree.touch(n, g.clock)
	switch {
	case n.cache != nil, g.forking && len(n.kids) > 0:
		// The tokens are kept already (a fork of the longer cache gives them).
		c.Release()
		g.tree.prune(n)
	default:
		g.tree.hold(n, c, s.capacity, min(len(s.req.Prompt), len(s.fed)))
		if g.forking {
			// Shorter kept caches on the path are redundant now.
			for a := n.parent; a != nil; a = a.parent {
				if a.cache != nil {
					g.tree.detach(a).Release()
				}
			}
		}
	}
	g.evict(n)
	g.updatePoolStats()
}

// evict releases the least recently used kept caches other than n's while overBudget.
func (g *Generator) evict(n *pnode) {
	for g.overBudget() {
		old := g.tree.lru(n)
		if old == nil {
			return
		}
		g.tree.detach(old).Release()
		g.statsMu.Lock()
		g.stats.Evicted++
		g.statsMu.Unlock()
	}
}

// overBudget reports whether the kept caches hold more than CacheTokens: distinct tokens, or
// KV memory (in tokens) beyond what the running requests hold.
func (g *Generator) overBudget() bool {
	if g.tree.tokens > g.cfg.CacheTokens {
		return true
	}
	r, ok := g.model.(kvReporter)
	if !ok {
		return false
	}
	blocks, _ := r.KVBlocks()
	mem := blocks * r.KVBlockTokens()
	for _, a := range g.active {
		if a.cache != nil { // not one that just ended
			mem -= len(a.fed)
		}
	}
	return mem > g.cfg.CacheTokens
}
