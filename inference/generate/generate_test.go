package generate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// refGreedy is greedy decoding straight from the toy's logits, with no cache and no scheduler.
func refGreedy(toy *gentest.Toy, prompt []int, n int, stops ...int) []int {
	ctx := append([]int(nil), prompt...)
	var out []int
	for range n {
		l := toy.Logits(ctx)
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		if slices.Contains(stops, best) {
			break
		}
		out = append(out, best)
		ctx = append(ctx, best)
	}
	return out
}

func newGen(t *testing.T, m lm.Model, cfg generate.Config) *generate.Generator {
	t.Helper()
	g, err := generate.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (start + i*7) % 50
	}
	return out
}

func TestGreedyMatchesReference(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	g := newGen(t, toy, generate.Config{})
	prompt := seq(3, 20)
	res, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	want := refGreedy(toy, prompt, 30)
	if !slices.Equal(res.Tokens, want) {
		t.Fatalf("greedy tokens\n got %v\nwant %v", res.Tokens, want)
	}
	if res.FinishReason != generate.FinishLength || res.StopID != -1 || res.PromptTokens != 20 {
		t.Fatalf("result %+v", res)
	}
}

func TestStopTokens(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	const eos = 63
	toy.Favor = func(toks []int) (int, bool) { return eos, len(toks) == 25 }
	g := newGen(t, toy, generate.Config{StopIDs: []int{eos, 62}})
	prompt := seq(1, 20)
	res, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Tokens at positions 20..24 are generated, then position 25 favours eos... unless the
	// toy's own argmax hit 62 first.
	want := refGreedy(toy, prompt, 100, eos, 62)
	if !slices.Equal(res.Tokens, want) || res.FinishReason != generate.FinishStop {
		t.Fatalf("got %v (%s), want %v stop", res.Tokens, res.FinishReason, want)
	}
	if len(res.Tokens) > 6 {
		t.Fatalf("generation ran past the favoured stop token: %d tokens", len(res.Tokens))
	}
	// IgnoreEOS runs to MaxTokens; a request stop id still works.
	res, err = g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 12 || res.FinishReason != generate.FinishLength {
		t.Fatalf("IgnoreEOS: %d tokens, %s", len(res.Tokens), res.FinishReason)
	}
	stop := res.Tokens[3]
	res2, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true, StopIDs: []int{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.StopID != stop || !slices.Equal(res2.Tokens, res.Tokens[:slices.Index(res.Tokens, stop)]) {
		t.Fatalf("request stop id %d: got %v stop %d", stop, res2.Tokens, res2.StopID)
	}
}

func TestSamplingSeededAndBatchIndependent(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	toy.Delay = 2 * time.Millisecond
	g := newGen(t, toy, generate.Config{MaxBatch: 8})
	req := func(seed int64) generate.Request {
		return generate.Request{Prompt: seq(int(seed), 10), MaxTokens: 20, Temperature: 0.9, TopP: 0.95, TopK: 20, Seed: seed}
	}
	solo := map[int64][]int{}
	for seed := range int64(6) {
		res, err := g.Generate(context.Background(), req(seed))
		if err != nil {
			t.Fatal(err)
		}
		solo[seed] = res.Tokens
	}
	again, err := g.Generate(context.Background(), req(1))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Tokens, solo[1]) {
		t.Fatalf("same seed, different output: %v vs %v", again.Tokens, solo[1])
	}
	other := req(1)
	other.Seed = 99
	diff, err := g.Generate(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(diff.Tokens, solo[1]) {
		t.Fatalf("seeds 1 and 99 gave the same 20 sampled tokens %v", diff.Tokens)
	}
	toy.ResetCalls()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	got := make([][]int, 6)
	for seed := range int64(6) {
		wg.Go(func() {
			res, err := g.Generate(context.Background(), req(seed))
			errs[seed], got[seed] = err, res.Tokens
		})
	}
	wg.Wait()
	for seed := range 6 {
		if errs[seed] != nil {
			t.Fatal(errs[seed])
		}
		if !slices.Equal(got[seed], solo[int64(seed)]) {
			t.Fatalf("seed %d in a batch: %v, alone: %v", seed, got[seed], solo[int64(seed)])
		}
	}
	if s := g.Stats(); s.MaxBatchSeen < 2 {
		t.Fatalf("concurrent requests never shared a Forward (max batch %d)", s.MaxBatchSeen)
	}
}

func TestContinuousBatchingAndChunkedPrefill(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{MaxBatch: 4, PrefillChunk: 16, StepTokens: 40, CacheTokens: -1})
	long := seq(5, 100)
	// A long decode runs while a long prompt arrives: decoding must go on every step during the
	// chunked prefill, and no Forward may exceed the step budget.
	a, err := g.Start(context.Background(), generate.Request{Prompt: seq(2, 5), MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := g.Start(context.Background(), generate.Request{Prompt: long, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := a.Wait()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ra.Tokens, refGreedy(toy, seq(2, 5), 40)) || !slices.Equal(rb.Tokens, refGreedy(toy, long, 5)) {
		t.Fatal("batched outputs differ from the reference")
	}
	chunks, mixed := 0, 0
	for _, c := range toy.Calls() {
		if c.Tokens() > 40 {
			t.Fatalf("a Forward carried %d tokens, budget 40", c.Tokens())
		}
		for _, s := range c.Steps {
			if len(s) > 16 {
				t.Fatalf("a prefill chunk of %d tokens, limit 16", len(s))
			}
			if len(s) > 1 {
				chunks++
				if len(c.Steps) > 1 {
					mixed++
				}
			}
		}
	}
	if chunks < 100/16 || mixed == 0 {
		t.Fatalf("prefill of 100 tokens: %d chunks, %d alongside a decode step", chunks, mixed)
	}
	if toy.LiveCaches() != 0 {
		t.Fatalf("%d caches live with reuse disabled", toy.LiveCaches())
	}
}

func TestMaxBatchQueues(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{MaxBatch: 3})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			res, err := g.Generate(context.Background(), generate.Request{Prompt: seq(i, 4), MaxTokens: 6, IgnoreEOS: true})
			if err != nil || !slices.Equal(res.Tokens, refGreedy(toy, seq(i, 4), 6)) {
				t.Errorf("request %d: %v %v", i, res.Tokens, err)
			}
		})
	}
	wg.Wait()
	for _, c := range toy.Calls() {
		if len(c.Steps) > 3 {
			t.Fatalf("a Forward of %d sequences, MaxBatch 3", len(c.Steps))
		}
	}
	if s := g.Stats(); s.Requests != 10 || s.MaxBatchSeen != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPrefixReuseAcrossTurns: a conversation re-sending its history prefills only its new tokens,
// with caches that fork and with caches that can only be taken over.
func TestPrefixReuseAcrossTurns(t *testing.T) {
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) { testPrefixReuseAcrossTurns(t, fork) })
	}
}

func testPrefixReuseAcrossTurns(t *testing.T, fork bool) {
	toy := gentest.NewToy(64, 4096)
	toy.NoFork = !fork
	const eos = 63
	g := newGen(t, toy, generate.Config{StopIDs: []int{eos}, PrefillChunk: 1000, StepTokens: 1000})
	history := seq(1, 40)
	wantCached := 0
	for turn := range 4 {
		toy.ResetCalls()
		res, err := g.Generate(context.Background(), generate.Request{Prompt: history, MaxTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		want := refGreedy(toy, history, 8, eos)
		if !slices.Equal(res.Tokens, want) {
			t.Fatalf("turn %d: %v, want %v", turn, res.Tokens, want)
		}
		calls := toy.Calls()
		prefill := len(calls[0].Steps[0])
		if turn == 0 {
			if res.CachedTokens != 0 || prefill != 40 {
				t.Fatalf("turn 0: cached %d, prefill %d", res.CachedTokens, prefill)
			}
		} else {
			if res.CachedTokens != wantCached || prefill != len(history)-wantCached {
				t.Fatalf("turn %d: cached %d (want %d), prefill %d of %d prompt tokens", turn, res.CachedTokens, wantCached, prefill, len(history))
			}
		}
		// The cache kept holds the prompt and the tokens fed: all generated ones after a stop,
		// all but the last (never fed) after a length finish.
		wantCached = len(history) + len(res.Tokens)
		if res.FinishReason == generate.FinishLength {
			wantCached--
		}
		// Next turn: history + reply + an end marker + a new user message of 10 tokens.
		history = append(append(append(history, res.Tokens...), eos), seq(turn+9, 10)...)
	}
	// A prompt that shares only a prefix with the kept cache gets a fork of that prefix; where
	// caches do not fork it computes everything rather than destroy the conversation's cache.
	branch := append(slices.Clone(history[:30]), 7, 7, 7)
	res, err := g.Generate(context.Background(), generate.Request{Prompt: branch, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	wantBranch := 0
	if fork {
		wantBranch = 30
	}
	if res.CachedTokens != wantBranch || !slices.Equal(res.Tokens, refGreedy(toy, branch, 5, eos)) {
		t.Fatalf("branch: cached %d, want %d, tokens %v", res.CachedTokens, wantBranch, res.Tokens)
	}
	if s := g.Stats(); s.CachesKept != 2 {
		t.Fatalf("%d caches kept, want the conversation's and the branch's", s.CachesKept)
	}
	// The same prompt again (a second sample) reuses all but its last token.
	res, err = g.Generate(context.Background(), generate.Request{Prompt: branch, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.CachedTokens != len(branch)-1 || !slices.Equal(res.Tokens, refGreedy(toy, branch, 5, eos)) {
		t.Fatalf("repeat: cached %d, tokens %v", res.CachedTokens, res.Tokens)
	}
}

func TestCachePoolBounded(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	g := newGen(t, toy, generate.Config{CacheTokens: 300, Headroom: 10})
	for i := range 20 {
		if _, err := g.Generate(context.Background(), generate.Request{Prompt: seq(i, 30), MaxTokens: 5, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
		if s := g.Stats(); s.CacheTokensNow > 300 {
			t.Fatalf("pool holds %d tokens, bound 300", s.CacheTokensNow)
		}
	}
	if s := g.Stats(); s.CachesKept < 300/35-1 || s.CachesKept > 300/34 {
		t.Fatalf("caches kept: %d", s.CachesKept)
	}
	if live, kept := toy.LiveCaches(), g.Stats().CachesKept; live != kept {
		t.Fatalf("%d live caches, %d kept: evicted caches were not released", live, kept)
	}
	g.Close()
	if toy.LiveCaches() != 0 {
		t.Fatalf("Close left %d caches", toy.LiveCaches())
	}
}

func TestCancelAndClose(t *testing.T) {
	toy := gentest.NewToy(64, 100000)
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := g.Start(ctx, generate.Request{Prompt: seq(0, 3), IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < 5 {
		toks, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(toks)
	}
	cancel()
	if _, err := s.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	for {
		_, err := s.Next(context.Background())
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Next after cancel: %v", err)
			}
			break
		}
	}
	// A running request ends with ErrClosed on Close; later requests are refused.
	s2, err := g.Start(context.Background(), generate.Request{Prompt: seq(1, 3), IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	s2.Next(context.Background())
	g.Close()
	if _, err := s2.Wait(); !errors.Is(err, generate.ErrClosed) {
		t.Fatalf("request running at Close: %v", err)
	}
	if _, err := g.Generate(context.Background(), generate.Request{Prompt: seq(1, 3)}); !errors.Is(err, generate.ErrClosed) {
		t.Fatalf("request after Close: %v", err)
	}
	if toy.LiveCaches() != 0 {
		t.Fatalf("%d caches live after Close", toy.LiveCaches())
	}
}

func TestNextStreamsAllTokens(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	g := newGen(t, toy, generate.Config{})
	s, err := g.Start(context.Background(), generate.Request{Prompt: seq(4, 6), MaxTokens: 25, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []int
	for {
		toks, err := s.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, toks...)
	}
	res, err := s.Wait()
	if err != nil || !slices.Equal(streamed, res.Tokens) || len(streamed) != 25 {
		t.Fatalf("streamed %v, result %v, %v", streamed, res.Tokens, err)
	}
	if res.TimeToFirstToken <= 0 || res.Duration < res.TimeToFirstToken {
		t.Fatalf("timings %v %v", res.TimeToFirstToken, res.Duration)
	}
}

func TestBadRequests(t *testing.T) {
	toy := gentest.NewToy(64, 100)
	g := newGen(t, toy, generate.Config{})
	cases := []struct {
		req  generate.Request
		want string
	}{
		{generate.Request{}, "empty prompt"},
		{generate.Request{Prompt: make([]int, 100)}, "100 tokens"},
		{generate.Request{Prompt: []int{1, 64}}, "prompt token 1 is id 64"},
		{generate.Request{Prompt: []int{1, -2}}, "id -2"},
		{generate.Request{Prompt: []int{1}, MaxTokens: -1}, "max tokens -1"},
		{generate.Request{Prompt: []int{1}, Temperature: -1}, "temperature"},
		{generate.Request{Prompt: []int{1}, TopP: 1.5}, "top_p 1.5"},
		{generate.Request{Prompt: []int{1}, TopK: -3}, "top_k -3"},
		{generate.Request{Prompt: []int{1}, StopIDs: []int{70}}, "stop id 70"},
	}
	for _, c := range cases {
		_, err := g.Generate(context.Background(), c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want it to mention %q", c.req, err, c.want)
		}
	}
	if _, err := generate.New(toy, generate.Config{StopIDs: []int{64}}); err == nil {
		t.Error("stop id outside the vocabulary accepted")
	}
	// MaxTokens 0 runs until the context is full.
	res, err := g.Generate(context.Background(), generate.Request{Prompt: make([]int, 90), IgnoreEOS: true})
	if err != nil || len(res.Tokens) != 10 || res.FinishReason != generate.FinishLength {
		t.Fatalf("fill the context: %d tokens, %s, %v", len(res.Tokens), res.FinishReason, err)
	}
}

type failing struct{ *gentest.Toy }

func (f failing) Forward(ctx context.Context, steps []lm.Step) error {
	for _, s := range steps {
		if len(s.Tokens) > 1 {
			return fmt.Errorf("boom")
		}
	}
	return f.Toy.Forward(ctx, steps)
}

func TestForwardError(t *testing.T) {
	toy := gentest.NewToy(64, 100)
	g := newGen(t, failing{toy}, generate.Config{})
	_, err := g.Generate(context.Background(), generate.Request{Prompt: []int{1, 2, 3}})
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "forward") {
		t.Fatalf("forward error: %v", err)
	}
	if res, err := g.Generate(context.Background(), generate.Request{Prompt: []int{1}, MaxTokens: 3, IgnoreEOS: true}); err != nil || len(res.Tokens) != 3 {
		t.Fatalf("generator unusable after a forward error: %v", err)
	}
}

// A reply that comes back tokenized differently (or cut by a stop string) still lets the next
// turn reuse the cache up to where the tokens part.
func TestPrefixReuseWithRetokenizedReply(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	g := newGen(t, toy, generate.Config{})
	prompt := seq(2, 30)
	res, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	changed := slices.Clone(res.Tokens)
	changed[2] = (changed[2] + 1) % 64
	next := append(append(slices.Clone(prompt), changed...), seq(9, 5)...)
	res2, err := g.Generate(context.Background(), generate.Request{Prompt: next, MaxTokens: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if res2.CachedTokens != len(prompt)+2 || !slices.Equal(res2.Tokens, refGreedy(toy, next, 3)) {
		t.Fatalf("cached %d (want %d), tokens %v", res2.CachedTokens, len(prompt)+2, res2.Tokens)
	}
}

// TestDecodeStats: the decode steps counted are exactly the Forwards that carried one token
// per sequence and no prompt chunk, with the tokens sampled in them and their time; the first
// token of each request (sampled after its prompt) and the steps a prompt chunk joined are not.
func TestDecodeStats(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{MaxBatch: 4, PrefillChunk: 16, StepTokens: 40, CacheTokens: -1})
	a, err := g.Start(context.Background(), generate.Request{Prompt: seq(2, 5), MaxTokens: 30, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A prompt of 100 = 6 × 16 + 4 tokens: none of its chunks is a single token.
	b, err := g.Start(context.Background(), generate.Request{Prompt: seq(5, 100), MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*generate.Sequence{a, b} {
		if _, err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	steps, tokens, mixed := 0, 0, 0
	for _, c := range toy.Calls() {
		if c.Tokens() == len(c.Steps) {
			steps++
			tokens += len(c.Steps)
		} else if len(c.Steps) > 1 {
			mixed++
		}
	}
	st := g.Stats()
	if mixed == 0 {
		t.Fatal("no decode step shared a Forward with a prompt chunk: the test checks nothing")
	}
	if st.DecodeSteps != steps || st.DecodeTokens != int64(tokens) {
		t.Fatalf("stats count %d decode steps, %d tokens; the Forwards were %d, %d", st.DecodeSteps, st.DecodeTokens, steps, tokens)
	}
	if st.Generated != 35 || st.DecodeTokens >= st.Generated-2 {
		t.Fatalf("%d generated, %d in decode steps: want 35, fewer than 33", st.Generated, st.DecodeTokens)
	}
	if st.DecodeTime < time.Duration(steps)*toy.Delay {
		t.Fatalf("decode time %v for %d steps of at least %v", st.DecodeTime, steps, toy.Delay)
	}
}
