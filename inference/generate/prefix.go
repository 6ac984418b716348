package generate

import "github.com/chainedsql/chainedsql/inference/lm"

// prefixTree is a radix tree over the token ids of the kept KV caches (finished requests' caches
// held for reuse): every path from the root spells a token sequence some kept cache holds, edges
// carry runs of tokens, and a node where a kept cache's tokens end holds that cache. A new
// prompt's longest cached prefix is one walk down (match); any cache below the node where the
// walk stops holds that prefix. With caches that fork (Forker), only leaves keep caches: one that
// a longer kept sequence extends is redundant, since a fork of the longer one shares the same
// memory. tokens counts the tokens on all edges, i.e. the distinct prefix tokens held, which is
// what the kept caches' memory is when they share their common prefixes (each cache's last
// partly filled block aside). Owned by the scheduler goroutine.
type prefixTree struct {
	root   pnode
	tokens int
	kept   []*pnode // the nodes holding a cache
}

// pnode is a node of the prefix tree.
type pnode struct {
	parent *pnode
	edge   []int // tokens from the parent to this node (empty for the root only)
	depth  int   // tokens from the root to this node's end
	kids   map[int]*pnode
	// cache holds exactly the depth tokens of the path (nil on branch points); capacity is its
	// capacity and prompt how many of its tokens were its request's prompt.
	cache    lm.Cache
	capacity int
	prompt   int
	used     uint64 // clock of the last use of this node's subtree (for LRU and for choosing a source)
}

// match returns the length of the longest common prefix of toks with the tree and the node at
// or below which that prefix ends (the node whose edge holds its last token; the root for none).
func (t *prefixTree) match(toks []int) (int, *pnode) {
	n, c := &t.root, 0
	for c < len(toks) {
		k := n.kids[toks[c]]
		if k == nil {
			return c, n
		}
		m := commonPrefix(k.edge, toks[c:])
		c += m
		if m < len(k.edge) {
			return c, k
		}
		n = k
	}
	return c, n
}

// source returns the most recently used node holding a cache in n's subtree, or nil.
func (t *prefixTree) source(n *pnode) *pnode {
	for n != nil && n.cache == nil {
		var best *pnode
		for _, k := range n.kids {
			if best == nil || k.used > best.used {
				best = k
			}
		}
		n = best
	}
	return n
}

// insert adds the path of toks (splitting an edge where toks ends or parts inside it) and returns
// the node at its end. The tree keeps toks' backing array.
func (t *prefixTree) insert(toks []int) *pnode {
	n, c := &t.root, 0
	for c < len(toks) {
		k := n.kids[toks[c]]
		if k == nil {
			leaf := &pnode{parent: n, edge: toks[c:len(toks):len(toks)], depth: len(toks)}
			n.addKid(leaf)
			t.tokens += len(leaf.edge)
			return leaf
		}
		m := commonPrefix(k.edge, toks[c:])
		if m < len(k.edge) {
			mid := &pnode{parent: n, edge: k.edge[:m:m], depth: n.depth + m, used: k.used}
			k.edge = k.edge[m:]
			k.parent = mid
			mid.addKid(k)
			n.kids[mid.edge[0]] = mid
			k = mid
		}
		n, c = k, c+m
	}
	return n
}

func (n *pnode) addKid(k *pnode) {
	if n.kids == nil {
		n.kids = map[int]*pnode{}
	}
	n.kids[k.edge[0]] = k
}

// touch marks n and its ancestors used at clock.
func (t *prefixTree) touch(n *pnode, clock uint64) {
	for ; n != nil; n = n.parent {
		n.used = clock
	}
}

// hold makes n keep cache c.
func (t *prefixTree) hold(n *pnode, c lm.Cache, capacity, prompt int) {
	n.cache, n.capacity, n.prompt = c, capacity, prompt
	t.kept = append(t.kept, n)
}

// detach takes n's cache out of the tree (the caller releases or reuses it) and removes the
// tokens no other kept cache holds.
func (t *prefixTree) detach(n *pnode) lm.Cache {
	c := n.cache
	n.cache = nil
	for i, k := range t.kept {
		if k == n {
			t.kept = append(t.kept[:i], t.kept[i+1:]...)
			break
		}
	}
	t.prune(n)
	return c
}

// prune removes n and its ancestors while they hold no cache and have no children, then merges
// a cacheless node left with one child into that child.
func (t *prefixTree) prune(n *pnode) {
	for n != &t.root && n.cache == nil && len(n.kids) == 0 {
		p := n.parent
		delete(p.kids, n.edge[0])
		t.tokens -= len(n.edge)
		n = p
	}
	if n == &t.root || n.cache != nil || len(n.kids) != 1 {
		return
	}
	for _, k := range n.kids {
		k.edge = append(n.edge[:len(n.edge):len(n.edge)], k.edge...)
		k.parent = n.parent
		n.parent.kids[k.edge[0]] = k
	}
}

// lru returns the least recently used node holding a cache other than keep, or nil.
func (t *prefixTree) lru(keep *pnode) *pnode {
	var best *pnode
	for _, n := range t.kept {
		if n != keep && (best == nil || n.used < best.used) {
			best = n
		}
	}
	return best
}

func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
