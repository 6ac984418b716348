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
	"maps"
	"math"
	"slices"
	"sync"
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
	// TopLogProbs, with LogProbs, also records at each step the TopLogProbs most likely
	// tokens and their log-probabilities (Result.TopLogProbs). Steps of such a request sample
	// on the host (a GreedyModel or SamplingModel computes their logits instead).
	TopLogProbs int
	// LogitBias is added to the logits before every draw (OpenAI's logit_bias): token id's
	// logit plus LogitBias[id]. The draw, greedy or not, and the log-probabilities are of the
	// biased logits. Steps of such a request sample on the host, as with TopLogProbs.
	LogitBias map[int]float32
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
	// token ended the request, of StopID: the log-softmax of the logits (plus the request's
	// LogitBias) divided by the temperature (1 for greedy decoding), over the whole vocabulary,
	// so before top-k and top-p (the distribution a trainer recomputes from logits/T). Each is
	// <= 0.
	LogProbs []float32
	// TopLogProbs (with Request.TopLogProbs) holds, for each entry of LogProbs, the
	// Request.TopLogProbs most likely tokens of that step under the same distribution, most
	// likely first (the lower id first on ties); the sampled token is among them when it ranks
	// there, with the same log-probability.
	TopLogProbs [][]TokenProb
	// PromptTokens is len(Prompt); CachedTokens of them came from a kept cache.
	PromptTokens int
	CachedTokens int
	// TimeToFirstToken is from Start to the first sampled token; Duration to the end.
	TimeToFirstToken time.Duration
	Duration         time.Duration
}

// TokenProb is a token id and its log-probability.
type TokenProb struct {
	ID      int
	LogProb float32
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
	req.LogitBias = maps.Clone(req.LogitBias)
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
	if len(req.LogitBias) > 0 {
		s.sampler.setBias(req.LogitBias)
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
	case req.TopLogProbs < 0 || (req.TopLogProbs > 0 && !req.LogProbs):
		return fmt.Errorf("generate: %w: top log-probabilities %d need log-probabilities on and a count >= 0", ErrInvalidRequest, req.TopLogProbs)
	}
	for id, b := range req.LogitBias {
		if id < 0 || id >= g.vocab {
			return fmt.Errorf("generate: %w: logit bias for token %d, outside the vocabulary [0, %d)", ErrInvalidRequest, id, g.vocab)
		}
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("generate: %w: logit bias %v for token %d is not finite", ErrInvalidRequest, b, id)
		}
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
