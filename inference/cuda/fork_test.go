package cuda

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// poolState is the pool's free blocks and the blocks some cache references.
func poolState(m *Model) (free, held int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.refs {
		if r > 0 {
			held++
		}
	}
	return len(m.freeBlocks), held
}

// TestForkExact: a fork at n (0, inside the first block, at a block boundary, inside a later
// block, the whole source) decoded in the same batch as its source gives exactly the logits of
// the same steps on caches computed from scratch (another model, no sharing), and so does the
// source, which writes into the shared partial block too; with graphs (whose captured block
// tables then point at shared blocks) and with direct launches.
// Releasing everything gives the pool back its blocks.
func TestForkExact(t *testing.T) {
	const P, suf, dec = 40, 7, 3
	for _, noGraphs := range []bool{false, true} {
		a := loadTiny(t, Options{NoGraphs: noGraphs})
		b := loadTiny(t, Options{NoGraphs: noGraphs})
		free0, _ := poolState(a)
		V := a.VocabSize()
		src := prompt(P, 1, V)
		ns := []int{0, 5, 16, 37, P}
		if noGraphs {
			ns = []int{37} // direct launches: one fork inside a block
		}
		for _, n := range ns {
			t.Run(fmt.Sprintf("graphs=%v/n=%d", !noGraphs, n), func(t *testing.T) {
				sa := newCache(t, a, 64)
				run(t, a, lm.Step{Cache: sa, Tokens: src})
				fa, err := sa.(lm.Forker).Fork(n, 64)
				if err != nil {
					t.Fatal(err)
				}
				if fa.Len() != n || sa.Len() != P {
					t.Fatalf("fork holds %d tokens and its source %d; want %d and %d", fa.Len(), sa.Len(), n, P)
				}
				ga, err := sa.(lm.Forker).Fork(n, 64) // a sibling: three caches share the prefix
				if err != nil {
					t.Fatal(err)
				}
				sb, fb, gb := newCache(t, b, 64), newCache(t, b, 64), newCache(t, b, 64)
				run(t, b, lm.Step{Cache: sb, Tokens: src})
				if n > 0 {
					run(t, b, lm.Step{Cache: fb, Tokens: src[:n]})
					run(t, b, lm.Step{Cache: gb, Tokens: src[:n]})
				}
				// Every branch writes next: the source its continuation, the forks their own
				// suffixes; where decode graphs are bucketed, three sequences pad the pass to a
				// bucket of four, so a padding row runs beside the shared blocks.
				stA := []lm.Step{{Cache: sa, Tokens: prompt(3, 2, V)}, {Cache: fa, Tokens: prompt(suf, 3, V)}, {Cache: ga, Tokens: prompt(2, 10, V)}}
				stB := []lm.Step{{Cache: sb, Tokens: prompt(3, 2, V)}, {Cache: fb, Tokens: prompt(suf, 3, V)}, {Cache: gb, Tokens: prompt(2, 10, V)}}
				for k := range dec {
					run(t, a, stA...)
					run(t, b, stB...)
					for i := range stA {
						if !slices.Equal(stA[i].Logits, stB[i].Logits) {
							t.Fatalf("step %d, %s: forked and from-scratch logits differ by %.3g", k, []string{"source", "fork", "sibling"}[i], maxDiff(stA[i].Logits, stB[i].Logits))
						}
						tok := hostArgmax(stA[i].Logits)
						stA[i].Tokens, stB[i].Tokens = []int{tok}, []int{tok}
					}
				}
				// A second fork of the fork, truncated back into the shared prefix and rewritten.
				ff, err := fa.(lm.Forker).Fork(fa.Len(), 64)
				if err != nil {
					t.Fatal(err)
				}
				ff.Truncate(n + 2)
				fb.Truncate(n + 2)
				x := run(t, a, lm.Step{Cache: ff, Tokens: prompt(4, 4, V)})[0]
				y := run(t, b, lm.Step{Cache: fb, Tokens: prompt(4, 4, V)})[0]
				if !slices.Equal(x.Logits, y.Logits) {
					t.Fatalf("truncated fork of a fork: logits differ by %.3g", maxDiff(x.Logits, y.Logits))
				}
				for _, c := range []lm.Cache{sa, fa, ga, ff, sb, fb, gb} {
					c.Release()
				}
				if free, held := poolState(a); free != free0 || held != 0 {
					t.Fatalf("after release: %d blocks free (want %d), %d still referenced", free, free0, held)
				}
			})
		}
	}
}

// TestForkPool: a fork takes no block until it writes; full blocks stay shared (counted once)
// and a shared partial block is copied by the first writer only; releasing in any order frees
// each block once, with the last holder.
func TestForkPool(t *testing.T) {
	m := loadTiny(t, Options{CacheTokens: 16 * blockTokens})
	free0, _ := poolState(m)
	V := m.VocabSize()
	s := newCache(t, m, 128)
	run(t, m, lm.Step{Cache: s, Tokens: prompt(40, 5, V)}) // blocks 0, 1 full, 2 partial
	if free, _ := poolState(m); free != free0-3 {
		t.Fatalf("%d blocks free after 40 tokens, want %d", free, free0-3)
	}
	f1, _ := s.(lm.Forker).Fork(40, 128)
	f2, _ := s.(lm.Forker).Fork(32, 128)
	if free, held := poolState(m); free != free0-3 || held != 3 {
		t.Fatalf("forks took blocks: %d free, %d held; want %d and 3", free, held, free0-3)
	}
	run(t, m, lm.Step{Cache: f1, Tokens: prompt(1, 6, V)}) // copies block 2
	run(t, m, lm.Step{Cache: f2, Tokens: prompt(1, 7, V)}) // a new block 2 of its own
	run(t, m, lm.Step{Cache: s, Tokens: prompt(1, 8, V)})  // block 2 now its own: no copy
	if free, _ := poolState(m); free != free0-5 {
		t.Fatalf("%d blocks free after the writes, want %d", free, free0-5)
	}
	if n, bytes := m.KVBlocks(); n != 5 || bytes != int64(5*m.L*m.blockBytes()) {
		t.Fatalf("KVBlocks reports %d blocks, %d bytes; want 5 blocks", n, bytes)
	}
	if _, err := s.(lm.Forker).Fork(42, 128); err == nil {
		t.Fatal("fork of more tokens than held: no error")
	}
	if _, err := s.(lm.Forker).Fork(10, 8); err == nil {
		t.Fatal("fork into a cache smaller than its tokens: no error")
	}
	s.Release()
	if _, err := s.(lm.Forker).Fork(0, 8); err == nil {
		t.Fatal("fork of a released cache: no error")
	}
	if free, _ := poolState(m); free != free0-4 {
		t.Fatalf("%d blocks free after releasing the source, want %d (its own block 2 only)", free, free0-4)
	}
	f1.Release()
	f2.Release()
	if free, held := poolState(m); free != free0 || held != 0 {
		t.Fatalf("after release: %d free (want %d), %d held", free, free0, held)
	}
	// A full pool fails the copy-on-write with an error and changes nothing.
	small := loadTiny(t, Options{CacheTokens: 2 * blockTokens})
	c := newCache(t, small, 32)
	run(t, small, lm.Step{Cache: c, Tokens: prompt(20, 9, V)})
	f, _ := c.(lm.Forker).Fork(20, 32)
	if err := small.Forward(context.Background(), []lm.Step{{Cache: f, Tokens: []int{1}}}); err == nil {
		t.Fatal("copy-on-write with no free block: no error")
	}
	if f.Len() != 20 {
		t.Fatalf("failed step changed the fork: %d tokens", f.Len())
	}
	c.Release()
	run(t, small, lm.Step{Cache: f, Tokens: []int{1}}) // now its partial block is its own
	f.Release()
	if free, held := poolState(small); free != 2 || held != 0 {
		t.Fatalf("small pool after release: %d free, %d held", free, held)
	}
}

// TestForkGenerator: generate's prefix cache forks the device caches: requests sharing a
// 40-token prefix compute it once, and their tokens are the CPU backend's.
func TestForkGenerator(t *testing.T) {
	m := loadTiny(t, Options{})
	cm := loadCPU(t)
	const pre, n = 40, 4
	V := m.VocabSize()
	prompts := make([][]int, n)
	for i := range prompts {
		prompts[i] = append(prompt(pre, 300, V), prompt(3+i, 400+i, V)...)
	}
	gd, err := generate.New(m, generate.Config{MaxBatch: 4, PrefillChunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer gd.Close()
	gc, err := generate.New(cm, generate.Config{MaxBatch: 4, PrefillChunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	// The first request alone (its prefix kept), then the others together.
	gen := func(i int) error {
		req := generate.Request{Prompt: prompts[i], MaxTokens: 4, IgnoreEOS: true}
		a, err := gd.Generate(context.Background(), req)
		if err != nil {
			return err
		}
		b, err := gc.Generate(context.Background(), req)
		if err != nil {
			return err
		}
		if !slices.Equal(a.Tokens, b.Tokens) {
			return fmt.Errorf("request %d: device %v, CPU %v", i, a.Tokens, b.Tokens)
		}
		return nil
	}
	if err := gen(0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = gen(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := gd.Stats()
	if st.CachedTokens != int64((n-1)*pre) || st.PrefixHits != n-1 {
		t.Fatalf("stats %+v: want %d requests forked from the %d-token prefix", st, n-1, pre)
	}
	t.Logf("prefill tokens saved by forking: %d of %d prompt tokens (%d forward tokens)", st.CachedTokens, st.PromptTokens, st.ForwardTokens)
}

// TestDeviceCopy: Device.Copy copies device memory on the stream, directly and replayed from a
// captured graph (the values at launch time, not at capture).
func TestDeviceCopy(t *testing.T) {
	d := testDevice(t)
	src := upload(t, d, []int32{1, 2, 3, 4, 5, 6})
	dst := upload(t, d, make([]int32, 6))
	if err := d.Copy(dst+4, src, 12); err != nil {
		t.Fatal(err)
	}
	if got := download[int32](t, d, dst, 6); !slices.Equal(got, []int32{0, 1, 2, 3, 0, 0}) {
		t.Fatalf("after the copy: %v, want [0 1 2 3 0 0]", got)
	}
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	cerr := d.Copy(dst, src+12, 12)
	g, err := d.EndCapture()
	if cerr != nil || err != nil {
		t.Fatalf("copy in a capture: %v, %v", cerr, err)
	}
	defer g.Destroy()
	if got := download[int32](t, d, dst, 6); got[0] != 0 {
		t.Fatalf("the captured copy ran at capture: %v", got)
	}
	if err := d.Copy(src+12, src, 12); err != nil { // changes what the graph will copy
		t.Fatal(err)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if got := download[int32](t, d, dst, 6); !slices.Equal(got, []int32{1, 2, 3, 3, 0, 0}) {
		t.Fatalf("after the graph: %v, want [1 2 3 3 0 0]", got)
	}
}
