package generate

import "time"

// Stats are a Generator's counters since New.
type Stats struct {
	Requests      int   `json:"requests"`       // requests admitted
	Forwards      int   `json:"forwards"`       // Forward calls
	ForwardTokens int64 `json:"forward_tokens"` // tokens fed through Forward
	MaxBatchSeen  int   `json:"max_batch_seen"` // most sequences in one Forward
	Active        int   `json:"active"`         // sequences in flight now
	Waiting       int   `json:"waiting"`        // requests not yet admitted now
	PromptTokens  int64 `json:"prompt_tokens"`  // prompt tokens of admitted requests
	// CachedTokens of them were not computed for the request: they came from a kept cache or
	// from a running request's (SharedTokens of them from another request than the same
	// conversation's previous turn, i.e. a prefix the request did not extend in full).
	CachedTokens int64 `json:"cached_tokens"`
	SharedTokens int64 `json:"shared_tokens"`
	// PrefixHits requests started from a cached prefix, FromRunning of them from a running
	// request's cache; WaitedForPrefix requests waited for a running request to compute the
	// prefix they share with it.
	PrefixHits      int   `json:"prefix_hits"`
	FromRunning     int   `json:"from_running"`
	WaitedForPrefix int   `json:"waited_for_prefix"`
	Generated       int64 `json:"generated"` // tokens sampled
	CachesKept      int   `json:"caches_kept"`
	// CacheTokensNow is the distinct tokens the kept caches hold (what CacheTokens bounds);
	// Evicted counts kept caches released to stay within it.
	CacheTokensNow int `json:"cache_tokens_now"`
	Evicted        int `json:"evicted"`
	// DecodeSteps are the steps in which every sequence fed one token after its prompt (no
	// prompt chunk rode along); DecodeTokens were sampled in them and DecodeTime is their wall
	// time, from the Forward's start to the last draw's bookkeeping: DecodeTokens over
	// DecodeTime is the decode rate to set against a batched decode benchmark at the same batch.
	DecodeSteps  int           `json:"decode_steps"`
	DecodeTokens int64         `json:"decode_tokens"`
	DecodeTime   time.Duration `json:"decode_ns"`
	// KVBlocks and KVBytes are the model's KV memory in use now (running and kept caches), for
	// models that report it (a paged cache: blocks shared by several caches count once).
	KVBlocks int   `json:"kv_blocks,omitempty"`
	KVBytes  int64 `json:"kv_bytes,omitempty"`
}

// kvReporter is implemented by models that report their KV memory (qwen2.Model, cuda.Model).
type kvReporter interface {
	// KVBlocks returns the KV blocks alive and their bytes.
	KVBlocks() (blocks int, bytes int64)
	// KVBlockTokens returns the tokens per block.
	KVBlockTokens() int
}

// updatePoolStats copies the kept caches' counts and the model's KV memory into the stats.
func (g *Generator) updatePoolStats() {
	g.statsMu.Lock()
	g.stats.CachesKept = len(g.tree.kept)
	g.stats.CacheTokensNow = g.tree.tokens
	if r, ok := g.model.(kvReporter); ok {
		g.stats.KVBlocks, g.stats.KVBytes = r.KVBlocks()
	}
	g.statsMu.Unlock()
}

// updateQueueStats copies the numbers of active and waiting requests into the stats.
func (g *Generator) updateQueueStats() {
	g.statsMu.Lock()
	g.stats.Active, g.stats.Waiting = len(g.active), len(g.waiting)
	g.statsMu.Unlock()
}

// countForward counts b's Forward.
func (g *Generator) countForward(b *batch) {
	g.statsMu.Lock()
	g.stats.Forwards++
	g.stats.ForwardTokens += int64(b.tokens)
	g.stats.MaxBatchSeen = max(g.stats.MaxBatchSeen, len(b.steps))
	g.statsMu.Unlock()
}

// countStep counts the tokens generated in b's step and, when every sequence of b decoded, the
// decode step: its tokens and its time since b.began.
func (g *Generator) countStep(b *batch, generated int) {
	g.statsMu.Lock()
	g.stats.Generated += int64(generated)
	if b.decoding == len(b.steps) {
		g.stats.DecodeSteps++
		g.stats.DecodeTokens += int64(generated)
		g.stats.DecodeTime += time.Since(b.began)
	}
	g.statsMu.Unlock()
}
