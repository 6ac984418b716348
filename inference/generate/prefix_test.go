package generate

import (
	"slices"
	"testing"
)

// fakeCache is a Cache that records its release.
type fakeCache struct{ released *int }

func (fakeCache) Len() int                     { return 0 }
func (fakeCache) Truncate(int)                 {}
func (c fakeCache) Release()                   { *c.released++ }
func (fakeCache) Fork(int, int) (Cache, error) { return nil, nil }

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
