package generate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
)

// sharedPrompts returns n prompts of a common prefix of pre tokens and distinct suffixes of suf
// tokens (their first tokens differ, so the prompts share exactly pre tokens).
func sharedPrompts(n, pre, suf int) [][]int {
	prefix := seq(5, pre)
	out := make([][]int, n)
	for i := range out {
		s := seq(i*3+1, suf)
		s[0] = 50 + i // outside seq's 0..49 and distinct
		out[i] = append(slices.Clone(prefix), s...)
	}
	return out
}

// startAll submits the prompts one after another from one goroutine (so they reach the scheduler
// a step apart while it is busy) and waits for every result.
func startAll(t *testing.T, g *generate.Generator, prompts [][]int, maxTokens int) []generate.Result {
	t.Helper()
	reqs := make([]generate.Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = generate.Request{Prompt: p, MaxTokens: maxTokens, IgnoreEOS: true}
	}
	return startRequests(t, g, reqs)
}

// startRequests is startAll for whole requests.
func startRequests(t *testing.T, g *generate.Generator, reqs []generate.Request) []generate.Result {
	t.Helper()
	seqs := make([]*generate.Sequence, len(reqs))
	for i, r := range reqs {
		s, err := g.Start(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = s
	}
	out := make([]generate.Result, len(seqs))
	for i, s := range seqs {
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = res
	}
	return out
}

// TestSharedPrefixComputedOnce: eight requests with one 200-token system prompt arriving while
// the first is still prefilling it: the prefix is computed once (the others wait for it, then
// fork it), every output is the reference, and with reuse off every request computes it.
func TestSharedPrefixComputedOnce(t *testing.T) {
	const pre, suf, gen = 200, 20, 6
	prompts := sharedPrompts(8, pre, suf)
	for _, reuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			toy := gentest.NewToy(64, 4096)
			toy.Delay = 5 * time.Millisecond
			cfg := generate.Config{PrefillChunk: 16, StepTokens: 64, MaxBatch: 8}
			if !reuse {
				cfg.CacheTokens = -1
			}
			g := newGen(t, toy, cfg)
			res := startAll(t, g, prompts, gen)
			cached := 0
			for i, r := range res {
				if want := refGreedy(toy, prompts[i], gen); !slices.Equal(r.Tokens, want) {
					t.Fatalf("request %d: %v, want %v", i, r.Tokens, want)
				}
				cached += r.CachedTokens
			}
			st := g.Stats()
			wantCached, wantForward := 7*pre, pre+8*suf+8*(gen-1)
			if !reuse {
				wantCached, wantForward = 0, 8*(pre+suf)+8*(gen-1)
			}
			if cached != wantCached || st.CachedTokens != int64(wantCached) || st.ForwardTokens != int64(wantForward) {
				t.Fatalf("cached %d (stats %d), forward tokens %d; want %d cached, %d forward", cached, st.CachedTokens, st.ForwardTokens, wantCached, wantForward)
			}
			if reuse && (st.WaitedForPrefix == 0 || st.FromRunning == 0 || st.PrefixHits != 7 || st.SharedTokens != int64(7*pre)) {
				t.Fatalf("stats %+v: want requests waiting for the running one and forking it", st)
			}
			g.Close()
			if live := toy.LiveCaches(); live != 0 {
				t.Fatalf("%d caches alive after Close", live)
			}
		})
	}
}

// TestSharedPrefixAfterOwnerFinished: a prefix kept by a finished request serves later ones with
// other suffixes (a fork of it), while the kept cache itself stays usable.
func TestSharedPrefixAfterOwnerFinished(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	g := newGen(t, toy, generate.Config{})
	prompts := sharedPrompts(4, 120, 10)
	for i, p := range prompts {
		res, err := g.Generate(context.Background(), generate.Request{Prompt: p, MaxTokens: 5, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, refGreedy(toy, p, 5)) {
			t.Fatalf("request %d: wrong output", i)
		}
		if want := min(i, 1) * 120; res.CachedTokens != want {
			t.Fatalf("request %d: cached %d, want %d", i, res.CachedTokens, want)
		}
	}
	st := g.Stats()
	// One kept cache per request; the prefix is counted once.
	if st.CachesKept != 4 || st.CacheTokensNow != 120+4*(10+4) || st.PrefixHits != 3 {
		t.Fatalf("stats %+v", st)
	}
	if toy.Forks() != 3 {
		t.Fatalf("%d forks, want 3", toy.Forks())
	}
}

// TestSharedPrefixEviction: many requests over three 100-token prefixes in random order with room
// for fewer kept tokens than they need: least recently used caches go, outputs stay the
// reference, the bound holds after every request and no cache leaks.
func TestSharedPrefixEviction(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{CacheTokens: 250, MaxBatch: 4})
	var prompts [][]int
	for p := range 3 {
		prefix := seq(p*11+2, 100)
		prefix[0] = 50 + p
		for i := range 6 {
			s := seq(i, 12)
			s[0] = 55 + i
			prompts = append(prompts, append(slices.Clone(prefix), s...))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(prompts), func(i, j int) { prompts[i], prompts[j] = prompts[j], prompts[i] })
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	for i, p := range prompts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := g.Generate(context.Background(), generate.Request{Prompt: p, MaxTokens: 4, IgnoreEOS: true})
			if err != nil || !slices.Equal(res.Tokens, refGreedy(toy, p, 4)) {
				t.Errorf("request %d: %v %v", i, res.Tokens, err)
			}
			if st := g.Stats(); st.CacheTokensNow > 250 {
				t.Errorf("kept caches hold %d tokens, bound 250", st.CacheTokensNow)
			}
		})
	}
	wg.Wait()
	st := g.Stats()
	if st.Evicted == 0 || st.PrefixHits == 0 || st.CachedTokens == 0 {
		t.Fatalf("stats %+v: want evictions and reuse", st)
	}
	if live := toy.LiveCaches(); live != st.CachesKept {
		t.Fatalf("%d caches alive, %d kept: evicted caches leaked", live, st.CachesKept)
	}
}

// TestLeaderCancelled: a request waiting for another to compute their common prefix goes on by
// itself when that one is cancelled first.
func TestLeaderCancelled(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.Delay = 5 * time.Millisecond
	g := newGen(t, toy, generate.Config{PrefillChunk: 8, StepTokens: 16})
	prompts := sharedPrompts(2, 300, 5)
	ctx, cancel := context.WithCancel(context.Background())
	lead, err := g.Start(ctx, generate.Request{Prompt: prompts[0], MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := g.Start(context.Background(), generate.Request{Prompt: prompts[1], MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for g.Stats().WaitedForPrefix == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if _, err := lead.Wait(); err == nil {
		t.Fatal("cancelled leader finished without error")
	}
	res, err := w.Wait()
	if err != nil || !slices.Equal(res.Tokens, refGreedy(toy, prompts[1], 5)) {
		t.Fatalf("waiting request: %v %v", res.Tokens, err)
	}
	if res.CachedTokens == 0 || res.CachedTokens >= 300 {
		t.Fatalf("waiting request reused %d tokens: want what the cancelled leader had computed", res.CachedTokens)
	}
}

// TestNoForkSharesNothing: caches that cannot fork are never shared between requests: each
// request computes its prompt (a conversation's next turn still takes its own cache over).
func TestNoForkSharesNothing(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.NoFork = true
	toy.Delay = time.Millisecond
	g := newGen(t, toy, generate.Config{PrefillChunk: 16})
	prompts := sharedPrompts(4, 100, 10)
	res := startAll(t, g, prompts, 4)
	for i, r := range res {
		if r.CachedTokens != 0 || !slices.Equal(r.Tokens, refGreedy(toy, prompts[i], 4)) {
			t.Fatalf("request %d: cached %d, tokens %v", i, r.CachedTokens, r.Tokens)
		}
	}
	if toy.Forks() != 0 {
		t.Fatal("forked a cache that cannot fork")
	}
}

// TestSharingStress: two hundred requests from forty goroutines over five system prompts (long
// enough that requests arriving together wait for one another's prefix), some cancelled at a
// random moment (leaders among them, mid-prefill), under a CacheTokens bound that evicts: every
// request not cancelled gets the reference output, none hangs, and no cache leaks (run with
// -race).
func TestSharingStress(t *testing.T) {
	toy := gentest.NewToy(64, 4096)
	toy.Delay = 200 * time.Microsecond
	g := newGen(t, toy, generate.Config{MaxBatch: 6, PrefillChunk: 16, StepTokens: 48, CacheTokens: 600})
	var prefixes [][]int
	for p := range 5 {
		prefix := seq(p*7+1, 120+40*p)
		prefix[0] = 50 + p
		prefixes = append(prefixes, prefix)
	}
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for i := range 5 {
				p := append(slices.Clone(prefixes[rng.IntN(len(prefixes))]), seq(rng.IntN(50), 1+rng.IntN(20))...)
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(5) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
				}
				res, err := g.Generate(ctx, generate.Request{Prompt: p, MaxTokens: 1 + rng.IntN(6), IgnoreEOS: true})
				cancelled := ctx.Err() != nil
				cancel()
				switch {
				case err != nil && !(cancelled && errors.Is(err, context.Canceled)):
					t.Errorf("worker %d request %d: %v", w, i, err)
				case err == nil && !slices.Equal(res.Tokens, refGreedy(toy, p, len(res.Tokens))):
					t.Errorf("worker %d request %d: %v is not the reference", w, i, res.Tokens)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("requests still running after 2 minutes: %+v", g.Stats())
	}
	st := g.Stats()
	if st.WaitedForPrefix == 0 || st.FromRunning == 0 || st.Evicted == 0 || st.CacheTokensNow > 600 {
		t.Fatalf("stats %+v: want waits for running prefixes, forks of them and evictions within the bound", st)
	}
	if live := toy.LiveCaches(); live != st.CachesKept {
		t.Fatalf("%d caches alive, %d kept", live, st.CachesKept)
	}
	g.Close()
	if live := toy.LiveCaches(); live != 0 {
		t.Fatalf("%d caches alive after Close", live)
	}
}
