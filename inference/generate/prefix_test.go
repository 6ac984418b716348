package generate

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// fakeCache is a Cache that records its release.
type fakeCache struct{ released *int }

func (fakeCache) Len() int                        { return 0 }
func (fakeCache) Truncate(int)                    {}
func (c fakeCache) Release()                      { *c.released++ }
func (fakeCache) Fork(int, int) (lm.Cache, error) { return nil, nil }

// TestPrefixTree: insertion splits edges, match finds the longest common prefix, token counts
// follow insertions and removals, and pruning merges a branch point left with one child.
func TestPrefixTree(t *testing.T) {
	var tr prefixTree
	released := 0
	add := func(toks ...int) *pnode {
		n := tr.insert(toks)
		tr.hold(n, fakeCache{&released}, 100, len(toks))
		return n
	}
	a := add(1, 2, 3, 4, 5)
	b := add(1, 2, 3, 9)
	c := add(7, 8)
	if tr.tokens != 5+1+2 {
		t.Fatalf("tokens %d, want 8", tr.tokens)
	}
	for _, tc := range []struct {
		toks []int
		n    int
	}{{[]int{1, 2, 3, 4, 5, 6}, 5}, {[]int{1, 2, 3, 9}, 4}, {[]int{1, 2, 8}, 2}, {[]int{7}, 1}, {[]int{6}, 0}, {nil, 0}} {
		if got, _ := tr.match(tc.toks); got != tc.n {
			t.Errorf("match %v: %d, want %d", tc.toks, got, tc.n)
		}
	}
	if _, at := tr.match([]int{1, 2, 8}); !slices.Contains([]*pnode{a, b}, tr.source(at)) {
		t.Error("source of a shared prefix is not one of the caches holding it")
	}
	tr.touch(b, 5)
	if _, at := tr.match([]int{1, 2}); tr.source(at) != b {
		t.Error("source is not the most recently used")
	}
	if tr.lru(nil) == b {
		t.Error("lru returned the most recently used")
	}
	tr.detach(a)
	// The branch point at 1 2 3 merges with b's edge: one edge 1 2 3 9.
	if tr.tokens != 4+2 || len(tr.root.kids) != 2 || len(tr.root.kids[1].edge) != 4 || tr.root.kids[1] != b {
		t.Fatalf("after removing a: tokens %d, root edges %d", tr.tokens, len(tr.root.kids))
	}
	if n, _ := tr.match([]int{1, 2, 3, 9}); n != 4 {
		t.Fatalf("match after merge: %d", n)
	}
	tr.detach(b)
	tr.detach(c)
	if tr.tokens != 0 || len(tr.root.kids) != 0 || len(tr.kept) != 0 {
		t.Fatalf("empty tree: tokens %d, kids %d, kept %d", tr.tokens, len(tr.root.kids), len(tr.kept))
	}
	// A path ending inside an edge splits it without adding tokens.
	d := add(4, 5, 6)
	mid := tr.insert([]int{4, 5})
	if tr.tokens != 3 || mid.depth != 2 || mid.cache != nil || len(mid.kids) != 1 || d.parent != mid {
		t.Fatalf("split: tokens %d, depth %d", tr.tokens, mid.depth)
	}
	tr.prune(mid)
	if len(tr.root.kids[4].edge) != 3 {
		t.Fatal("prune did not merge the split point back")
	}
}

// forkModel is a Model whose caches fork (by copying) and record their tokens, counting the
// caches alive; its Forward only appends.
type forkModel struct{ live int }

func (m *forkModel) VocabSize() int     { return 1000 }
func (m *forkModel) ContextLength() int { return 1 << 20 }
func (m *forkModel) NewCache(int) (lm.Cache, error) {
	m.live++
	return &forkCache{m: m}, nil
}
func (m *forkModel) Forward(_ context.Context, steps []lm.Step) error {
	for _, st := range steps {
		c := st.Cache.(*forkCache)
		c.toks = append(c.toks, st.Tokens...)
	}
	return nil
}

type forkCache struct {
	m        *forkModel
	toks     []int
	released bool
}

func (c *forkCache) Len() int { return len(c.toks) }
func (c *forkCache) Truncate(n int) {
	if n < len(c.toks) {
		c.toks = c.toks[:max(n, 0)]
	}
}
func (c *forkCache) Release() {
	if !c.released {
		c.released = true
		c.m.live--
	}
}
func (c *forkCache) Fork(n, _ int) (lm.Cache, error) {
	c.m.live++
	return &forkCache{m: c.m, toks: slices.Clone(c.toks[:n])}, nil
}

// checkTree verifies the prefix tree's invariants with forking caches: tokens is the sum of the
// edges, only leaves keep caches and every leaf keeps one, each kept cache holds exactly its
// path's tokens, no node but the root is a cacheless node with one child (so there are fewer
// than two nodes per kept cache), and the kept list is the nodes holding caches.
func checkTree(t *testing.T, tr *prefixTree) {
	t.Helper()
	nodes, tokens, holding := 0, 0, 0
	var walk func(n *pnode, path []int)
	walk = func(n *pnode, path []int) {
		nodes++
		tokens += len(n.edge)
		path = append(path, n.edge...)
		if n.depth != len(path) {
			t.Fatalf("node at depth %d holds a path of %d tokens", n.depth, len(path))
		}
		if n != &tr.root {
			if n.cache == nil && len(n.kids) < 2 {
				t.Fatalf("cacheless node with %d children at depth %d", len(n.kids), n.depth)
			}
			if n.cache != nil && len(n.kids) > 0 {
				t.Fatalf("a kept cache at depth %d has %d longer caches below it", n.depth, len(n.kids))
			}
		}
		if n.cache != nil {
			holding++
			if c := n.cache.(*forkCache); c.released || !slices.Equal(c.toks, path) {
				t.Fatalf("kept cache (released %v) holds %d tokens, its path %d", c.released, len(c.toks), len(path))
			}
		}
		for first, k := range n.kids {
			if k.parent != n || k.edge[0] != first {
				t.Fatal("child linked under the wrong parent or key")
			}
			walk(k, path)
		}
	}
	walk(&tr.root, nil)
	if tokens != tr.tokens || holding != len(tr.kept) || nodes > 2*len(tr.kept)+1 {
		t.Fatalf("tree: %d nodes, %d tokens on edges (counted %d), %d caches held, %d kept", nodes, tokens, tr.tokens, holding, len(tr.kept))
	}
}

// TestPrefixTreeBounded drives attach and keep with thousands of distinct prompts, as a long eval
// or a long-running server sees them: twenty system prompts, questions, follow-up turns of
// earlier conversations and prompts sharing nothing. The tree's tokens stay within CacheTokens,
// it never has more than two nodes per kept cache, no cache leaks, and every request starts from
// the longest prefix the tree held (all but its last token at most).
func TestPrefixTreeBounded(t *testing.T) {
	const bound = 3000
	m := &forkModel{}
	g := &Generator{model: m, cfg: Config{CacheTokens: bound}.withDefaults(), vocab: m.VocabSize(), ctxLen: m.ContextLength(), forking: true}
	rng := rand.New(rand.NewPCG(7, 7))
	toks := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = rng.IntN(m.VocabSize())
		}
		return out
	}
	systems := make([][]int, 20)
	for i := range systems {
		systems[i] = toks(50 + rng.IntN(350))
	}
	var history [][]int
	for i := range 4000 {
		var p []int
		switch r := rng.IntN(10); {
		case r < 6:
			p = append(slices.Clone(systems[rng.IntN(len(systems))]), toks(1+rng.IntN(40))...)
		case r < 9 && len(history) > 0:
			p = append(slices.Clone(history[rng.IntN(len(history))]), toks(1+rng.IntN(20))...)
		default:
			p = toks(1 + rng.IntN(300))
		}
		want, _ := g.tree.match(p)
		want = min(want, len(p)-1)
		s := &Sequence{ctx: context.Background(), req: Request{Prompt: p, MaxTokens: 10}}
		if ready, err := g.attach(s); !ready || err != nil {
			t.Fatalf("request %d: attach %v, %v", i, ready, err)
		}
		if s.cached != want || s.cache.Len() != want || !slices.Equal(s.fed, p[:want]) {
			t.Fatalf("request %d: started from %d cached tokens (cache %d), the tree held %d", i, s.cached, s.cache.Len(), want)
		}
		// The prompt's rest and a reply of up to 10 tokens.
		fed := append(slices.Clone(p[want:]), toks(1+rng.IntN(10))...)
		if err := m.Forward(context.Background(), []lm.Step{{Cache: s.cache, Tokens: fed}}); err != nil {
			t.Fatal(err)
		}
		s.fed = append(s.fed, fed...)
		if len(history) < 50 {
			history = append(history, s.fed)
		} else {
			history[rng.IntN(len(history))] = s.fed
		}
		g.keep(s)
		if g.tree.tokens > bound {
			t.Fatalf("request %d: the tree holds %d tokens, bound %d", i, g.tree.tokens, bound)
		}
		if m.live != len(g.tree.kept) {
			t.Fatalf("request %d: %d caches alive, %d kept", i, m.live, len(g.tree.kept))
		}
		if i%50 == 0 {
			checkTree(t, &g.tree)
		}
	}
	checkTree(t, &g.tree)
	if st := g.Stats(); st.Evicted == 0 || st.PrefixHits < 1000 {
		t.Fatalf("stats %+v: want evictions and reuse", st)
	}
}
