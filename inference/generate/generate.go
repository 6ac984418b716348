// Package generate turns a Model into a text generator: sampling (greedy, temperature, top-k,
// top-p, seeded per request), stop tokens and length limits, a scheduler that batches the decode
// steps of every active sequence into one Forward (continuous batching: requests join and leave
// between steps, prompts are prefilled in chunks), per-request cancellation, and prefix caching:
// the KV caches of finished requests are kept in a radix tree over their token ids (prefix.go),
// and a new request starts from the longest prefix of its prompt that a kept or running request
// holds, prefilling only the rest. With caches that fork (Forker: a paged cache sharing blocks by
// reference) many requests share one computed prefix, such as a system prompt, and requests that
// arrive together with a common prefix wait for the first of them to compute it; a conversation
// re-sending its history prefills only its new tokens either way.
package generate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Finish reasons of a Result.
const (
	FinishStop   = "stop"   // a stop token was sampled
	FinishLength = "length" // MaxTokens were generated or the sequence filled its context
)

// ErrInvalidRequest is wrapped by every error about a request's own content (an empty or too
// long prompt, an id outside the vocabulary, a bad sampling setting).
var ErrInvalidRequest = errors.New("invalid request")

// ErrClosed is returned for requests to, or still running in, a closed Generator.
var ErrClosed = errors.New("generate: generator closed")

// Config tunes a Generator. Zero fields take the defaults named.
type Config struct {
	// MaxBatch is the most sequences in flight at once (default 16); more requests wait.
	MaxBatch int
	// StepTokens is the most tokens one Forward call carries (default 512): every decoding
	// sequence's token, then prompt chunks while the budget lasts.
	StepTokens int
	// PrefillChunk is the most prompt tokens one sequence feeds per Forward (default 256), so a
	// long prompt does not stall the others' decoding.
	PrefillChunk int
	// CacheTokens bounds the finished requests' KV caches kept for prefix reuse (default 65536):
	// the distinct tokens they hold (a prefix several of them share counts once) and, for a model
	// that reports its KV blocks, the KV memory in use beyond the running requests' own tokens,
	// in tokens (blocks rounded up). The least recently used go first. Negative disables reuse
	// (also between running requests).
	CacheTokens int
	// Headroom is the capacity a new cache gets beyond what its request needs (default 1024),
	// so that the conversation's next turn fits and can reuse it. (A model whose caches grow
	// as tokens are added, as qwen2's do, spends no memory on it.)
	Headroom int
	// StopIDs are the tokens that end every request (e.g. <|im_end|> and <|endoftext|>).
	StopIDs []int
}

func (c Config) withDefaults() Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 16
	}
	if c.StepTokens <= 0 {
		c.StepTokens = 512
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = 256
	}
	if c.CacheTokens == 0 {
		c.CacheTokens = 65536
	}
	if c.Headroom <= 0 {
		c.Headroom = 1024
	}
	return c
}

// Request is one generation.
type Request struct {
	// Prompt is the token ids to continue; at least one, fewer than the context length.
	Prompt []int
	// MaxTokens bounds the generated tokens, the stop token included; 0 means until the
	// context is full.
	MaxTokens int
	// Temperature scales the logits; 0 means greedy decoding.
	Temperature float64
	// TopP keeps the smallest set of most likely tokens holding this much probability (0 or 1:
	// off). Applied after TopK.
	TopP float64
	// TopK keeps the k most likely tokens (0: off).
	TopK int
	// Seed seeds the request's own random source: equal requests give equal outputs whatever
	// else runs in the same batch.
	Seed int64
	// StopIDs end this request, in addition to Config.StopIDs.
	StopIDs []int
	// IgnoreEOS drops Config.StopIDs for this request (for parity checks against a reference).
	IgnoreEOS bool
	// LogProbs records each sampled token's log-probability (Result.LogProbs).
	LogProbs bool
}

// Result is what a finished request produced.
type Result struct {
	// Tokens are the generated ids, the stop token excluded.
	Tokens []int
	// FinishReason is FinishStop or FinishLength.
	FinishReason string
	// StopID is the stop token sampled, or -1.
	StopID int
	// LogProbs (with Request.LogProbs) are the log-probabilities of Tokens and then, when a stop
	// token ended the request, of StopID: the log-softmax of the logits divided by the
	// temperature (1 for greedy decoding), over the whole vocabulary, so before top-k and top-p
	// (the distribution a trainer recomputes from logits/T). Each is <= 0.
	LogProbs []float32
	// PromptTokens is len(Prompt); CachedTokens of them came from a kept cache.
	PromptTokens int
	CachedTokens int
	// TimeToFirstToken is from Start to the first sampled token; Duration to the end.
	TimeToFirstToken time.Duration
	Duration         time.Duration
}

// Generator schedules requests over one Model. It is safe for concurrent use.
type Generator struct {
	model  lm.Model
	cfg    Config
	vocab  int
	ctxLen int

	submit chan *Sequence
	ctx    context.Context
	stop   context.CancelFunc
	done   chan struct{}

	statsMu sync.Mutex
	stats   Stats

	// Owned by the scheduler goroutine.
	waiting []*Sequence
	active  []*Sequence
	tree    prefixTree // the kept caches
	clock   uint64
	forking bool        // the model's caches implement Forker
	greedy  GreedyModel // the model, where it picks greedy tokens itself
	picked  []int       // scratch: a step's greedy tokens

	// The model, where it samples tokens itself (forwardSample: its picks go to picked), and
	// scratch for a step's sampling settings and its tokens' log-probabilities.
	sampling SamplingModel
	how      []lm.Sampling
	lps      []float32
}

// GreedyModel is implemented by models that pick the greedy next token themselves (the CUDA
// backend, on the device). The scheduler calls ForwardGreedy instead of Forward for a step
// whose sequences are all greedy (temperature 0 or top-k 1) and want no log-probabilities,
// so that one id per sequence comes back instead of a row of logits.
type GreedyModel interface {
	// ForwardGreedy is Forward writing each step's argmax next token (the lowest index on
	// ties, NaNs ignored, as the host sampler's greedy pick) to out (len(steps) ids) instead
	// of its logits.
	ForwardGreedy(ctx context.Context, steps []lm.Step, out []int) error
}

// SamplingModel is implemented by models that sample the next token themselves (the CUDA
// backend, on the device). The scheduler calls ForwardSample instead of Forward for every step
// that GreedyModel does not take, so that one id (and, for requests that want them, one
// log-probability) per sequence comes back instead of a row of logits; the host sampler runs
// only for models without it. The Generator never asks for logits itself, and no request
// setting (there are no penalties) needs the host, so every step qualifies.
//
// The contract: for each step, out[i] is the token generate's host sampler would pick from the
// step's last logits with how[i]'s settings and uniform draw: the argmax (lowest index on ties,
// NaNs ignored) at temperature 0 or top-k 1; else the first token, in index order without a
// cut (top-k 0 or at least the vocabulary, top-p 1) and in falling-probability order (the
// lower id first on ties) with one, at which the probability mass of softmax(logits/T), cut to
// the top-k tokens and then to the shortest prefix holding top-p of what is left, summed
// so far, exceeds U times the mass kept. Sums in another order or precision may pick a
// neighbour when U lands within rounding of a boundary between two tokens, and nowhere else.
// With logProbs non-nil, logProbs[i] is out[i]'s log-probability as Result.LogProbs defines
// it, within float32 rounding. The uniform of a step whose prompt is not complete is unused
// (its pick is ignored). Steps, caches and errors are as for Forward; Logits are left alone.
type SamplingModel interface {
	// ForwardSample is Forward writing each step's next token, picked as how says, to out
	// (len(steps) ids) and, with logProbs (len(steps) values, else nil), its log-probability,
	// instead of its logits.
	ForwardSample(ctx context.Context, steps []lm.Step, how []lm.Sampling, out []int, logProbs []float32) error
}

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

// New starts a Generator over m. Close it to stop its scheduler and release its caches.
func New(m lm.Model, cfg Config) (*Generator, error) {
	if m == nil {
		return nil, errors.New("generate: nil model")
	}
	cfg = cfg.withDefaults()
	g := &Generator{model: m, cfg: cfg, vocab: m.VocabSize(), ctxLen: m.ContextLength()}
	if g.vocab <= 0 || g.ctxLen <= 1 {
		return nil, fmt.Errorf("generate: model reports vocab size %d and context length %d", g.vocab, g.ctxLen)
	}
	for _, id := range cfg.StopIDs {
		if id < 0 || id >= g.vocab {
			return nil, fmt.Errorf("generate: stop id %d outside the vocabulary [0, %d)", id, g.vocab)
		}
	}
	g.greedy, _ = m.(GreedyModel)
	g.sampling, _ = m.(SamplingModel)
	if c, err := m.NewCache(1); err == nil {
		_, g.forking = c.(lm.Forker)
		c.Release()
	}
	g.submit = make(chan *Sequence)
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.done = make(chan struct{})
	go g.loop()
	return g, nil
}

// Model returns the model g drives.
func (g *Generator) Model() lm.Model { return g.model }

// Stats returns a snapshot of g's counters.
func (g *Generator) Stats() Stats {
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	return g.stats
}

// Close stops the scheduler: running and waiting requests end with ErrClosed, kept caches are
// released. It waits for the scheduler to exit and is safe to call more than once.
func (g *Generator) Close() error {
	g.stop()
	<-g.done
	return nil
}

// Generate runs req to the end and returns its result.
func (g *Generator) Generate(ctx context.Context, req Request) (Result, error) {
	s, err := g.Start(ctx, req)
	if err != nil {
		return Result{}, err
	}
	return s.Wait()
}

// Start submits req and returns its running Sequence. The request ends early, with ctx's error,
// when ctx is done.
func (g *Generator) Start(ctx context.Context, req Request) (*Sequence, error) {
	if err := g.check(&req); err != nil {
		return nil, err
	}
	req.Prompt = slices.Clone(req.Prompt)
	req.StopIDs = slices.Clone(req.StopIDs)
	sctx, cancel := context.WithCancel(ctx)
	s := &Sequence{
		ctx:     sctx,
		cancel:  cancel,
		req:     req,
		start:   time.Now(),
		notify:  make(chan struct{}, 1),
		doneCh:  make(chan struct{}),
		sampler: newSampler(req.Temperature, req.TopP, req.TopK, req.Seed),
	}
	if !req.IgnoreEOS {
		s.stops = append(s.stops, g.cfg.StopIDs...)
	}
	s.stops = append(s.stops, req.StopIDs...)
	select {
	case g.submit <- s:
		return s, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-g.ctx.Done():
		cancel()
		return nil, ErrClosed
	}
}

// check validates req and resolves MaxTokens 0 to what the context allows.
func (g *Generator) check(req *Request) error {
	n := len(req.Prompt)
	switch {
	case n == 0:
		return fmt.Errorf("generate: %w: empty prompt", ErrInvalidRequest)
	case n >= g.ctxLen:
		return fmt.Errorf("generate: %w: prompt of %d tokens leaves no room in the context of %d tokens", ErrInvalidRequest, n, g.ctxLen)
	case req.MaxTokens < 0:
		return fmt.Errorf("generate: %w: max tokens %d is negative", ErrInvalidRequest, req.MaxTokens)
	case req.Temperature < 0 || req.Temperature != req.Temperature:
		return fmt.Errorf("generate: %w: temperature %v is not >= 0", ErrInvalidRequest, req.Temperature)
	case req.TopP < 0 || req.TopP > 1 || req.TopP != req.TopP:
		return fmt.Errorf("generate: %w: top_p %v is outside [0, 1]", ErrInvalidRequest, req.TopP)
	case req.TopK < 0:
		return fmt.Errorf("generate: %w: top_k %d is negative", ErrInvalidRequest, req.TopK)
	}
	for i, id := range req.Prompt {
		if id < 0 || id >= g.vocab {
			return fmt.Errorf("generate: %w: prompt token %d is id %d, outside the vocabulary [0, %d)", ErrInvalidRequest, i, id, g.vocab)
		}
	}
	for _, id := range req.StopIDs {
		if id < 0 || id >= g.vocab {
			return fmt.Errorf("generate: %w: stop id %d outside the vocabulary [0, %d)", ErrInvalidRequest, id, g.vocab)
		}
	}
	room := g.ctxLen - n
	if req.MaxTokens == 0 || req.MaxTokens > room {
		req.MaxTokens = room
	}
	return nil
}

// Sequence is a running request.
type Sequence struct {
	ctx     context.Context
	cancel  context.CancelFunc
	req     Request
	stops   []int
	sampler *sampler
	start   time.Time

	// Scheduler state.
	cache    lm.Cache
	capacity int
	fed      []int // tokens in cache
	todo     []int // tokens still to feed
	logits   []float32
	cached   int
	first    time.Time
	leader   *Sequence // a running request computing the prefix this one waits for
	waitFor  int       // the length of that prefix
	waited   bool

	mu       sync.Mutex
	toks     []int
	logprobs []float32 // with req.LogProbs: one per sampled token, the stop token included
	read     int
	ended    bool
	res      Result
	err      error
	notify   chan struct{}
	doneCh   chan struct{}
}

// Cancel ends the request early; Wait then returns context.Canceled.
func (s *Sequence) Cancel() { s.cancel() }

// Next blocks until the sequence has tokens not yet returned and returns them, or returns
// io.EOF once the sequence has ended and all its tokens were returned, or the request's error.
// ctx bounds only the wait.
func (s *Sequence) Next(ctx context.Context) ([]int, error) {
	for {
		s.mu.Lock()
		if s.read < len(s.toks) {
			out := append([]int(nil), s.toks[s.read:]...)
			s.read = len(s.toks)
			s.mu.Unlock()
			return out, nil
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Wait blocks until the sequence ends and returns its result.
func (s *Sequence) Wait() (Result, error) {
	<-s.doneCh
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.err
}

// Done is closed when the sequence has ended.
func (s *Sequence) Done() <-chan struct{} { return s.doneCh }

func (s *Sequence) isEnded() bool {
	select {
	case <-s.doneCh:
		return true
	default:
		return false
	}
}

func (s *Sequence) emit(tok int) {
	s.mu.Lock()
	s.toks = append(s.toks, tok)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Sequence) end(reason string, stopID int, err error) {
	s.mu.Lock()
	s.ended = true
	s.err = err
	s.res = Result{
		Tokens:       append([]int(nil), s.toks...),
		FinishReason: reason,
		StopID:       stopID,
		LogProbs:     s.logprobs,
		PromptTokens: len(s.req.Prompt),
		CachedTokens: s.cached,
		Duration:     time.Since(s.start),
	}
	if !s.first.IsZero() {
		s.res.TimeToFirstToken = s.first.Sub(s.start)
	}
	s.mu.Unlock()
	s.cancel()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	close(s.doneCh)
}

// loop is the scheduler: admit, step, repeat.
func (g *Generator) loop() {
	defer close(g.done)
	defer g.shutdown()
	for {
		if len(g.active) == 0 && len(g.waiting) == 0 {
			select {
			case s := <-g.submit:
				g.waiting = append(g.waiting, s)
			case <-g.ctx.Done():
				return
			}
		}
		for drained := false; !drained; {
			select {
			case s := <-g.submit:
				g.waiting = append(g.waiting, s)
			default:
				drained = true
			}
		}
		if g.ctx.Err() != nil {
			return
		}
		g.admit()
		g.dropCancelled()
		g.updateQueueStats()
		if len(g.active) == 0 {
			continue
		}
		g.step()
	}
}

// shutdown ends every request with ErrClosed and releases all caches.
func (g *Generator) shutdown() {
	for {
		select {
		case s := <-g.submit:
			g.waiting = append(g.waiting, s)
			continue
		default:
		}
		break
	}
	for _, s := range append(g.waiting, g.active...) {
		if s.cache != nil {
			s.cache.Release()
			s.cache = nil
		}
		s.end("", -1, ErrClosed)
	}
	g.waiting, g.active = nil, nil
	g.updateQueueStats()
	for _, n := range g.tree.kept {
		n.cache.Release()
	}
	g.tree = prefixTree{}
	g.updatePoolStats()
}

// admit moves waiting requests into the active set while there is room, in order; a request
// that waits for a running one to compute their common prefix stays behind without holding up
// those after it.
func (g *Generator) admit() {
	keep := g.waiting[:0]
	for _, s := range g.waiting {
		if err := s.ctx.Err(); err != nil {
			s.end("", -1, err)
			continue
		}
		if len(g.active) >= g.cfg.MaxBatch {
			keep = append(keep, s)
			continue
		}
		ready, err := g.attach(s)
		if err != nil {
			s.end("", -1, err)
			continue
		}
		if !ready {
			keep = append(keep, s)
			continue
		}
		g.active = append(g.active, s)
		g.statsMu.Lock()
		g.stats.Requests++
		g.stats.PromptTokens += int64(len(s.req.Prompt))
		g.stats.CachedTokens += int64(s.cached)
		g.statsMu.Unlock()
	}
	clear(g.waiting[len(keep):])
	g.waiting = keep
	g.updatePoolStats()
}

// shareMin is the fewest tokens beyond what the kept caches offer that make a request start
// from a running request's prefix, or wait for it to be computed.
const shareMin = 32

// attach gives s a cache holding the longest prefix of its prompt that can be had (forked from
// a kept or a running request's cache, or a kept cache taken over), else a new one. It returns
// false, with no cache, when s is to wait for a running request to compute a longer common
// prefix first.
func (g *Generator) attach(s *Sequence) (bool, error) {
	prompt := s.req.Prompt
	need := len(prompt) + s.req.MaxTokens
	capacity := min(g.ctxLen, need+g.cfg.Headroom)
	limit := len(prompt) - 1 // feed at least one token to get logits
	if a := s.leader; a != nil {
		s.leader = nil
		if a.cache != nil && !a.isEnded() {
			if len(a.fed) < s.waitFor {
				s.leader = a
				return false, nil
			}
			return true, g.fork(s, a.cache, s.waitFor, capacity, true)
		}
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
		ca = min(ca, limit)
		if len(a.fed) >= ca {
			return true, g.fork(s, a.cache, ca, capacity, true)
		}
		s.leader, s.waitFor = a, ca
		if !s.waited {
			s.waited = true
			g.statsMu.Lock()
			g.stats.WaitedForPrefix++
			g.statsMu.Unlock()
		}
		return false, nil
	}
	if c > 0 {
		src := g.tree.source(at)
		g.clock++
		g.tree.touch(src, g.clock)
		return true, g.fork(s, src.cache, c, capacity, c < src.prompt-reuseSlack)
	}
	return true, g.fresh(s, capacity)
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

// keep puts s's cache into the prefix tree (or releases it), then releases the least recently
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
	for g.overBudget() {
		old := g.tree.lru(n)
		if old == nil {
			break
		}
		g.tree.detach(old).Release()
		g.statsMu.Lock()
		g.stats.Evicted++
		g.statsMu.Unlock()
	}
	g.updatePoolStats()
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

func (g *Generator) updatePoolStats() {
	g.statsMu.Lock()
	g.stats.CachesKept = len(g.tree.kept)
	g.stats.CacheTokensNow = g.tree.tokens
	if r, ok := g.model.(kvReporter); ok {
		g.stats.KVBlocks, g.stats.KVBytes = r.KVBlocks()
	}
	g.statsMu.Unlock()
}

// dropCancelled ends the active requests whose context is done, keeping their caches.
func (g *Generator) dropCancelled() {
	keep := g.active[:0]
	for _, s := range g.active {
		if err := s.ctx.Err(); err != nil {
			g.keep(s)
			s.end("", -1, err)
			continue
		}
		keep = append(keep, s)
	}
	clear(g.active[len(keep):])
	g.active = keep
}

// step runs one Forward over all active sequences and samples where a prompt or a decode step
// completed.
func (g *Generator) step() {
	steps := make([]lm.Step, 0, len(g.active))
	seqs := make([]*Sequence, 0, len(g.active))
	budget := g.cfg.StepTokens
	began := time.Now()
	// Decoding sequences first: one token each, always.
	for _, s := range g.active {
		if len(s.todo) == 1 && len(s.fed) >= len(s.req.Prompt) {
			steps = append(steps, lm.Step{Cache: s.cache, Tokens: s.todo, Logits: s.logits})
			seqs = append(seqs, s)
			budget--
		}
	}
	decoding := len(steps) // a decode step if no prompt chunk joins them
	for _, s := range g.active {
		if len(s.todo) == 1 && len(s.fed) >= len(s.req.Prompt) {
			continue
		}
		n := min(len(s.todo), g.cfg.PrefillChunk, budget)
		if n <= 0 {
			if len(steps) > 0 {
				continue
			}
			n = min(len(s.todo), g.cfg.PrefillChunk)
		}
		steps = append(steps, lm.Step{Cache: s.cache, Tokens: s.todo[:n], Logits: s.logits})
		seqs = append(seqs, s)
		budget -= n
	}
	tokens := 0
	for _, st := range steps {
		tokens += len(st.Tokens)
	}
	// Greedy requests that want no log-probabilities need only the argmax: a model that picks
	// it on the device copies back one id per sequence instead of a row of logits.
	greedy := g.greedy != nil
	for _, s := range seqs {
		greedy = greedy && s.deviceGreedy()
	}
	// Otherwise a model that samples on the device does so (forwardSample).
	sampled := !greedy && g.sampling != nil
	var err error
	switch {
	case greedy:
		g.picked = slices.Grow(g.picked[:0], len(steps))[:len(steps)]
		err = g.greedy.ForwardGreedy(g.ctx, steps, g.picked)
	case sampled:
		err = g.forwardSample(seqs, steps)
	default:
		err = g.model.Forward(g.ctx, steps)
	}
	g.statsMu.Lock()
	g.stats.Forwards++
	g.stats.ForwardTokens += int64(tokens)
	g.stats.MaxBatchSeen = max(g.stats.MaxBatchSeen, len(steps))
	g.statsMu.Unlock()
	if err != nil {
		if g.ctx.Err() != nil {
			return // shutdown ends everything
		}
		err = fmt.Errorf("generate: forward of %d sequences, %d tokens: %w", len(steps), tokens, err)
		for _, s := range seqs {
			g.fail(s, err)
		}
		g.removeEnded()
		return
	}
	var drawn []draw
	if !greedy && !sampled {
		drawn = g.sampleAll(seqs, steps)
	}
	// The sequences this step finishes end after the step's stats are in, so a caller that saw
	// its sequence end reads Stats with this step counted.
	type ending struct {
		s      *Sequence
		reason string
		stopID int
	}
	var ends []ending
	generated := 0
	for i, s := range seqs {
		st := steps[i]
		s.logits = st.Logits
		s.fed = append(s.fed, st.Tokens...)
		s.todo = s.todo[len(st.Tokens):]
		if len(s.todo) > 0 {
			continue // prompt not yet complete
		}
		var tok int
		if greedy || sampled {
			tok = g.picked[i]
			if tok < 0 || tok >= g.vocab {
				g.fail(s, fmt.Errorf("generate: model picked token %d outside the vocabulary of %d", tok, g.vocab))
				continue
			}
			if sampled && s.req.LogProbs {
				s.mu.Lock()
				s.logprobs = append(s.logprobs, g.lps[i])
				s.mu.Unlock()
			}
		} else {
			if len(st.Logits) < g.vocab {
				g.fail(s, fmt.Errorf("generate: model returned %d logits, want %d", len(st.Logits), g.vocab))
				continue
			}
			tok = drawn[i].tok
			if s.req.LogProbs {
				s.mu.Lock()
				s.logprobs = append(s.logprobs, drawn[i].logProb)
				s.mu.Unlock()
			}
		}
		generated++
		if s.first.IsZero() {
			s.first = time.Now()
		}
		if isStop(s.stops, tok) {
			g.keep(s)
			ends = append(ends, ending{s, FinishStop, tok})
			continue
		}
		s.emit(tok)
		s.mu.Lock()
		n := len(s.toks)
		s.mu.Unlock()
		if n >= s.req.MaxTokens || len(s.fed)+1 > s.capacity {
			g.keep(s)
			ends = append(ends, ending{s, FinishLength, -1})
			continue
		}
		s.todo = []int{tok}
	}
	g.statsMu.Lock()
	g.stats.Generated += int64(generated)
	if decoding == len(steps) {
		g.stats.DecodeSteps++
		g.stats.DecodeTokens += int64(generated)
		g.stats.DecodeTime += time.Since(began)
	}
	g.statsMu.Unlock()
	for _, e := range ends {
		e.s.end(e.reason, e.stopID, nil)
	}
	g.removeEnded()
}

// draw is one sequence's sampled token and its log-probability (when asked for).
type draw struct {
	tok     int
	logProb float32
}

// sampleAll draws the next token of each sequence of the forward that completed its prompt
// (steps[i] is seqs[i]'s), on up to GOMAXPROCS goroutines: each sequence has its own sampler
// and logits, so the draws are those of one at a time, and a top-p draw over a vocabulary of
// 151,936 costs milliseconds that would otherwise add up, one sequence after another, while
// the cores the forward used sit idle.
func (g *Generator) sampleAll(seqs []*Sequence, steps []lm.Step) []draw {
	drawn := make([]draw, len(seqs))
	var todo []int
	for i, s := range seqs {
		if len(s.todo) == len(steps[i].Tokens) && len(steps[i].Logits) >= g.vocab {
			todo = append(todo, i)
		}
	}
	one := func(i int) {
		s, logits := seqs[i], steps[i].Logits[len(steps[i].Logits)-g.vocab:]
		drawn[i].tok = s.sampler.sample(logits)
		if s.req.LogProbs {
			drawn[i].logProb = s.sampler.logProb(logits, drawn[i].tok)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	if workers <= 1 {
		for _, i := range todo {
			one(i)
		}
		return drawn
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for n := int(next.Add(1)) - 1; n < len(todo); n = int(next.Add(1)) - 1 {
				one(todo[n])
			}
		})
	}
	wg.Wait()
	return drawn
}

// forwardSample runs a step through the SamplingModel: a sequence whose prompt the step
// completes samples with its request's settings, taking the uniform of this token from its
// seeded source exactly when the host sampler would take one (deviceSampling), so that a seed
// gives the same tokens on both paths; the others' picks are not used.
func (g *Generator) forwardSample(seqs []*Sequence, steps []lm.Step) error {
	n := len(steps)
	g.picked = slices.Grow(g.picked[:0], n)[:n]
	g.how = slices.Grow(g.how[:0], n)[:n]
	var lps []float32
	for i, s := range seqs {
		g.how[i] = lm.Sampling{}
		if len(s.todo) == len(steps[i].Tokens) {
			g.how[i] = s.sampler.deviceSampling()
		}
		if s.req.LogProbs && lps == nil {
			g.lps = slices.Grow(g.lps[:0], n)[:n]
			lps = g.lps
		}
	}
	return g.sampling.ForwardSample(g.ctx, steps, g.how, g.picked, lps)
}

// deviceSampling returns s's settings for a model that samples on the device, with the next
// uniform of s's source when sample would draw one (temperature > 0, top-k not 1).
func (s *sampler) deviceSampling() lm.Sampling {
	d := lm.Sampling{Temperature: s.temperature, TopP: s.topP, TopK: s.topK}
	if s.temperature > 0 && s.topK != 1 {
		d.U = s.rng.Float64()
	}
	return d
}

// deviceGreedy reports whether s's next token is the argmax of its logits (as sampler.sample
// picks at temperature 0 or top-k 1) and s wants no log-probabilities.
func (s *Sequence) deviceGreedy() bool {
	return (s.req.Temperature <= 0 || s.req.TopK == 1) && !s.req.LogProbs
}

// fail ends the active request s with err, releasing its cache.
func (g *Generator) fail(s *Sequence, err error) {
	s.cache.Release()
	s.cache = nil
	g.updatePoolStats()
	s.end("", -1, err)
}

func isStop(stops []int, tok int) bool {
	for _, id := range stops {
		if id == tok {
			return true
		}
	}
	return false
}

func (g *Generator) updateQueueStats() {
	g.statsMu.Lock()
	g.stats.Active, g.stats.Waiting = len(g.active), len(g.waiting)
	g.statsMu.Unlock()
}

// removeEnded drops ended sequences from the active set.
func (g *Generator) removeEnded() {
	keep := g.active[:0]
	for _, s := range g.active {
		select {
		case <-s.doneCh:
			continue
		default:
		}
		keep = append(keep, s)
	}
	clear(g.active[len(keep):])
	g.active = keep
	g.updateQueueStats()
}
