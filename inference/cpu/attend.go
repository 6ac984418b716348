package cpu

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// AttendHead is the attention of one query token over the keys and values of one KV head: the
// Group query heads sharing that KV head (grouped-query attention) meet every key and value once.
type AttendHead struct {
	Out []float32 // Group × head dim: the attention output of each query head
	Q   []float32 // Group × head dim: the queries, already scaled by 1/√(head dim)
	K   *Paged    // Tiled, head dim × n: the n keys the token sees, transposed in tiles of KeyTile
	V   *Paged    // ByRows, n × head dim: their values, a position per row (bf16 where K is)
}

// KeyTile is the positions of one tile of a Tiled paged matrix: decode attention's keys lie in
// tiles of head dim × KeyTile, so that one vector of scores (KeyTile lanes) meets each dimension
// with one contiguous load, and its reads run front to back through memory.
const KeyTile = 16

// Attend computes Out = softmax(Q·Kᵀ)·V for every head (each of its Group query rows over all n
// keys): decode steps and prompt tokens alike, a prompt's tokens coming as heads too, one per
// token and KV head (qwen2's attention). Flash-decoding style: each head's positions are cut into
// chunks of at most AttendChunkLen that never cross a KV block, the chunks of all heads (of each
// window of whole heads with at most decodeWindow chunks between them, one hand-off per window)
// are shared out among the threads, and each chunk yields, per query row, its scores' maximum m,
// the sum l of e^(s−m) and the unnormalised output Σ e^(s−m)·v; the chunks of a head are then
// merged in position order (rescaled to the largest maximum), by the thread that finishes the
// head's last part of the window. Within a chunk the scores come
// from the key tiles with the positions along the SIMD lanes (on AVX-512 scoresT7: 32 positions
// against seven query rows a call, each query value broadcast once per dimension; see scoresT),
// then the outputs from the value rows with the dimensions along the lanes (valuesR7: 32
// dimensions against seven rows of weights, each weight broadcast once per position; see
// valuesR): no horizontal sums, and a decode step reads each key and value once per KV head
// instead of once per query head. On AVX2 (avx2Gemv7x16: 16 lanes) a thread reads one chunk's
// values while it reads the next chunk's keys (attendAVX2), with the same results. Chunk
// boundaries depend neither on the thread count nor on the windows, so neither do the results.
// Keys and values in bf16 blocks (Paged.BF16) are widened exactly to f32: on AVX-512 and AVX2 in
// the kernels' registers as they load them (on AVX2 a part tile, and the value rows of a head
// dim that is not a multiple of 16, into scratch first), elsewhere a chunk at a time into
// scratch that stays in cache; so the results equal those over
// f32 blocks holding the same values, bit for bit, while memory is read at half the bytes. On
// AVX-512 and AVX2 each thread prefetches its chunks' keys and values attendPrefetch bytes ahead
// of the kernels' reads (prefetcher), the kernels issuing the prefetches spread over their loops.
// A head's Out is written while other threads still read other heads, so no Out may overlap
// any head's Q, K or V.
func Attend(heads []AttendHead, group int) {
	if len(heads) == 0 {
		return
	}
	if group < 1 {
		panic(fmt.Sprintf("cpu: Attend: group of %d", group))
	}
	if heads[0].K == nil || heads[0].V == nil {
		panic("cpu: Attend: nil keys or values")
	}
	hd := heads[0].K.Rows
	wide := heads[0].K.BF16 != nil
	for h := range heads {
		checkDecodeHead(&heads[h], group, hd, wide)
	}
	ds := decodePool.Get().(*decodeScratch)
	defer decodePool.Put(ds)
	most := int(decodeWindow.Load())
	tier := vec.Load().id // the kernel tier of every window
	for h0 := 0; h0 < len(heads); {
		// A window of whole heads with at most most chunks (one head at least): a prefill's
		// thousands of heads keep partial results of a few MiB, not one per chunk of them all.
		ds.items = ds.items[:0]
		work, h1 := 0, h0
		for ; h1 < len(heads); h1++ {
			k := heads[h1].K
			n0 := len(ds.items)
			for p0 := 0; p0 < k.Cols; {
				p1 := min(k.Cols, p0+AttendChunkLen, (p0/k.Block+1)*k.Block)
				ds.items = append(ds.items, decodeItem{head: h1, p0: p0, p1: p1})
				p0 = p1
			}
			if h1 > h0 && len(ds.items) > most {
				ds.items = ds.items[:n0]
				break
			}
			work += 2 * group * hd * k.Cols
		}
		if tier == tierAVX2 {
			ds.markShared(heads, h0, h1)
		}
		attendWindow(heads, ds, tier, group, hd, wide, work)
		h0 = h1
	}
}

// attendWindow runs the chunks ds.items (work multiply-adds in all) of consecutive heads on the
// threads and merges each head's partial results into its Out (Attend; on AVX2 after
// decodeScratch.markShared): the thread that finishes a head's last part merges it (finish), so
// the merges of a prompt's many heads are shared out too, where the caller once merged every head
// alone after the threads' parts.
func attendWindow(heads []AttendHead, ds *decodeScratch, tier, group, hd int, wide bool, work int) {
	ni := len(ds.items)
	per := group * (hd + 2) // per item: m, l, then the output rows
	ds.part = grow(ds.part, ni*per)
	fast := tier == tier512 || tier == tierAVX2 // the kernels of seven query rows (qt)
	ds.setRuns()
	parallelWork(work, ni, 1, func(lo, hi int) {
		cb := chunkPool.Get().(*chunkBufs)
		cb.prepare(tier, group, hd, wide)
		defer func() {
			clear(cb.pf.regs) // the pooled walks must not keep the blocks alive
			clear(cb.pfv.regs)
			chunkPool.Put(cb)
		}()
		if tier == tierAVX2 {
			attendAVX2(heads, ds, cb, group, hd, lo, hi, wide)
			ds.finish(heads, lo, hi, group, hd)
			return
		}
		var pf *prefetcher
		// The AVX-512 kernels step the walk.
		if d := int(attendPrefetch.Load()); d > 0 && tier == tier512 {
			pf = &cb.pf
			pf.start(wide)
			for i := lo; i < hi; i++ {
				it := ds.items[i]
				pf.addChunk(&heads[it.head], hd, it.p0, it.p1)
			}
			pf.issue(d)
		}
		for i := lo; i < hi; i++ {
			it := ds.items[i]
			var qt []float32
			if fast {
				// A thread's chunks of one head are consecutive: its queries are transposed once.
				if qt = cb.qt; cb.qtHead != it.head {
					transposeQ(qt, heads[it.head].Q, group, hd)
					cb.qtHead = it.head
				}
			}
			attendChunk(ds.part[i*per:(i+1)*per], cb, &heads[it.head], qt, tier, group, hd, it.p0, it.p1, pf)
		}
		ds.finish(heads, lo, hi, group, hd)
	})
}

// decodeWindow is the most chunks one Attend window holds (one head's at least): 4,096
// chunks keep 7.2 MiB of partial results at group 7 and head dim 64, and a window's work (up
// to about a billion multiply-adds) far outweighs its hand-off to the threads. A variable so that
// tests can force many windows.
var decodeWindow atomic.Int32

func init() { decodeWindow.Store(4096) }

// AttendChunkLen is the most positions of one Attend chunk: its scores (Group × AttendChunkLen)
// stay in L1 between the two products, and a long context gives the threads many chunks. A
// multiple of KeyTile, so that every chunk starts on a key tile.
const AttendChunkLen = 256

var _ [0]struct{} = [AttendChunkLen % KeyTile]struct{}{} // AttendChunkLen is a multiple of KeyTile

// rows7 is the query rows of one scoresT7 or valuesR7 call.
const rows7 = 7

// decodeItem is one chunk of Attend: positions [p0, p1) of heads[head].
type decodeItem struct{ head, p0, p1 int }

// decodeScratch is one Attend call's chunk list and partial results, markShared's marks
// (shared, by head) and scratch (lists), and a window's heads for the merges (runs: attendWindow,
// finish).
type decodeScratch struct {
	items  []decodeItem
	part   []float32
	shared []bool
	lists  []headList
	runs
}

// runs is a window's heads as runs of consecutive items (Attend lists a head's chunks together):
// run r is the items [start[r], start[r+1]), left[r] of them not yet finished; runOf[i] is item
// i's run.
type runs struct {
	start []int
	left  []atomic.Int32
	runOf []int32
}

// setRuns cuts ds.items into runs, one per head, none finished.
func (ds *decodeScratch) setRuns() {
	n := len(ds.items)
	ds.start = ds.start[:0]
	if cap(ds.runOf) < n {
		ds.runOf = make([]int32, n)
	}
	ds.runOf = ds.runOf[:n]
	for i := 0; i < n; {
		h, i0 := ds.items[i].head, i
		for i < n && ds.items[i].head == h {
			ds.runOf[i] = int32(len(ds.start))
			i++
		}
		ds.start = append(ds.start, i0)
	}
	nr := len(ds.start)
	ds.start = append(ds.start, n)
	if cap(ds.left) < nr {
		ds.left = make([]atomic.Int32, nr)
	}
	ds.left = ds.left[:nr]
	for r := range nr {
		ds.left[r].Store(int32(ds.start[r+1] - ds.start[r]))
	}
}

// finish records that the partial results of items [lo, hi) are complete; for a head whose
// last items these were, it merges the head's chunks into its Out (mergeChunks, in position
// order: the same bits whichever thread merges). The atomic count orders every thread's
// partial results of the head before the merge that reads them.
func (ds *decodeScratch) finish(heads []AttendHead, lo, hi, group, hd int) {
	per := group * (hd + 2)
	for i := lo; i < hi; {
		r := ds.runOf[i]
		j := min(hi, ds.start[r+1]) // this call's items of run r
		if ds.left[r].Add(int32(i-j)) == 0 {
			i0, i1 := ds.start[r], ds.start[r+1]
			mergeChunks(heads[ds.items[i0].head].Out, ds.part[i0*per:i1*per], i1-i0, group, hd)
		}
		i = j
	}
}

// headList is a head's key block list (its first element's address) and the head.
type headList struct {
	list uintptr
	head int
}

// markShared sets shared[h], for each head h of heads[h0:h1], to whether another head of that
// window reads the same key block list (the same slice of blocks, or a prefix of it): a prompt's
// tokens, whose views are prefixes of their span's list (qwen2's attention), and whose blocks
// the neighbours have just read, in cache. A decode step's heads each come with their own list,
// even where forked sequences share blocks (those blocks are read once a step, from memory).
func (ds *decodeScratch) markShared(heads []AttendHead, h0, h1 int) {
	ds.shared = grow(ds.shared, len(heads))
	ds.lists = ds.lists[:0]
	for h := h0; h < h1; h++ {
		ds.lists = append(ds.lists, headList{uintptr(heads[h].K.list()), h})
	}
	slices.SortFunc(ds.lists, func(a, b headList) int { return cmp.Compare(a.list, b.list) })
	for i, l := range ds.lists {
		ds.shared[l.head] = i > 0 && ds.lists[i-1].list == l.list || i+1 < len(ds.lists) && ds.lists[i+1].list == l.list
	}
}

// chunkBufs is one thread's scratch for attendChunk and attendAVX2: the scores and, for bf16
// blocks, the chunk's keys and values widened to f32; on AVX-512 and AVX2 the queries of head
// qtHead transposed (transposeQ), and the scores and outputs of a last block of fewer than 7
// query rows; on AVX2 the next chunk's scores (sc2), a part key tile made whole (t16, widened
// from bf16 blocks) and, for bf16 blocks of a head dim that is not a multiple of 16, a step's
// value rows widened (v).
// pf is the thread's prefetch walk (on AVX2 over the keys, pfv over the values).
type chunkBufs struct {
	sc, k, v []float32
	qt, s7   []float32
	o7, t16  []float32
	sc2      []float32
	qtHead   int
	pf, pfv  prefetcher
}

// prepare sizes cb for chunks of group query rows and head dim hd on the kernel tier (bf16
// blocks where wide) and forgets the queries it holds.
func (cb *chunkBufs) prepare(tier, group, hd int, wide bool) {
	cb.qtHead = -1
	fast := tier == tier512 || tier == tierAVX2 // the kernels of seven query rows (qt)
	if fast {
		// The values kernels read seven rows of weights a call, past group in a last block.
		blocks := (group + rows7 - 1) / rows7
		cb.sc = grow(cb.sc, blocks*rows7*AttendChunkLen)
		cb.qt = grow(cb.qt, blocks*hd*8)
		if group%rows7 != 0 {
			cb.o7 = grow(cb.o7, rows7*hd)
			if tier == tier512 {
				cb.s7 = grow(cb.s7, rows7*AttendChunkLen)
			}
		}
		if tier == tierAVX2 {
			cb.sc2 = grow(cb.sc2, blocks*rows7*AttendChunkLen) // the next chunk's scores
			cb.t16 = grow(cb.t16, hd*KeyTile)
		}
	} else {
		cb.sc = grow(cb.sc, group*AttendChunkLen)
	}
	if wide && tier != tier512 { // AVX-512 widens bf16 in its kernels' registers
		cb.v = grow(cb.v, hd*AttendChunkLen)
		if tier != tierAVX2 { // AVX2 widens only part key tiles, into t16
			cb.k = grow(cb.k, hd*AttendChunkLen)
		}
	}
}

// attendPrefetch is how far ahead of its reads, in bytes, decode attention prefetches the keys
// and values (0: not at all; on AVX2 half of it in each of its two streams: attendAVX2); tests
// and benchmarks change it. On Zen 5 a
// depth-2,048 decode step's attention from memory took 19-34% less time with it over f32 blocks
// (4 KiB; 2 to 16 KiB all gained), 0-26% less over bf16 ones; docs/BENCHMARKS.md ("KV
// cache: huge pages and prefetch"). With the kernels spreading their share of the walk over
// their loops, 8 KiB took 2-8% less time than 4 KiB over f32 blocks, 16 KiB no less
// (docs/BENCHMARKS.md, "Issue 30: attention's prefetch inside the kernels").
var attendPrefetch atomic.Int32

func init() { attendPrefetch.Store(8192) }

// attendPrefetchEmit, when not nil (tests only; set it while no Attend runs), receives
// Attend's prefetches instead of the CPU, from every thread.
var attendPrefetchEmit func(p unsafe.Pointer, n int)

// pfRegion is rows rows of rowBytes bytes each, stride bytes apart, from p.
type pfRegion struct {
	p                      unsafe.Pointer
	rowBytes, stride, rows int
}

// prefetcher walks the keys and values one thread's chunks read, in the order the kernels read
// them, a distance ahead: on AVX-512 one walk, per chunk its keys, then its value rows
// (attendChunk); on AVX2 two, one over the keys and one over the values (attendAVX2). issue(d)
// starts the walk and each kernel call of a product's first pass prefetches as many bytes as it
// reads, spread over its loop (step): a chunk's keys and values are two streams of 64 KiB, which
// the hardware prefetcher alone leaves waiting on memory (docs/DESIGN.md, "Paged KV cache").
// Prefetches change no result.
type prefetcher struct {
	regs        []pfRegion
	r, row, col int                           // the walk's position: region, row, byte in the row
	shift       int                           // step's shift: 1 over bf16 blocks
	emit        func(p unsafe.Pointer, n int) // nil: prefetch the lines of [p, p+n); tests record
}

// reset empties the walk.
func (f *prefetcher) reset() { f.regs, f.r, f.row, f.col, f.shift = f.regs[:0], 0, 0, 0, 0 }

// start empties the walk for Attend's kernels: its prefetches go to attendPrefetchEmit where
// set, and over bf16 blocks (wide) the kernels step it by the f32 bytes they read, twice the bf16
// bytes it covers.
func (f *prefetcher) start(wide bool) {
	f.reset()
	f.emit = attendPrefetchEmit
	if wide {
		f.shift = 1
	}
}

// addChunk appends the keys, then the value rows, of positions [p0, p1) of d (the positions in
// one block, starting at a multiple of KeyTile; f32 or bf16 blocks) to the walk, in the order
// attendChunk reads them: addKeys, then addValues.
func (f *prefetcher) addChunk(d *AttendHead, hd, p0, p1 int) {
	f.addKeys(d, hd, p0, p1)
	f.addValues(d, hd, p0, p1)
}

// addKeys appends the keys of positions [p0, p1) of d (as addChunk) to the walk: the whole tiles
// front to back, then the rows of a last tile of fewer than KeyTile positions.
func (f *prefetcher) addKeys(d *AttendHead, hd, p0, p1 int) {
	B := d.K.Block
	b, n := p0/B, p1-p0
	full, tail := n/KeyTile*KeyTile, n%KeyTile
	k, e := blockAt(d.K, b, (p0-b*B)*hd)
	if full > 0 {
		f.regs = append(f.regs, pfRegion{p: k, rowBytes: e * full * hd, rows: 1})
	}
	if tail > 0 {
		f.regs = append(f.regs, pfRegion{p: unsafe.Add(k, e*full*hd), rowBytes: e * tail, stride: e * KeyTile, rows: hd})
	}
}

// addValues appends the value rows of positions [p0, p1) of d (as addChunk) to the walk.
func (f *prefetcher) addValues(d *AttendHead, hd, p0, p1 int) {
	b := p0 / d.V.Block
	v, e := blockAt(d.V, b, (p0-b*d.V.Block)*hd)
	f.regs = append(f.regs, pfRegion{p: v, rowBytes: e * (p1 - p0) * hd, rows: 1})
}

// blockAt returns the address of element i of block b of m (bf16 or f32) and the element's bytes.
func blockAt(m *Paged, b, i int) (unsafe.Pointer, int) {
	f, h := m.block(b, i)
	p, b16 := elemPtr(f, h, 0)
	return p, 4 - 2*b16
}

// step advances the walk as a kernel call reading n bytes of f32 keys or values does: by n, or
// by n/2 over bf16 blocks (shift 1), which the kernels widen in their registers. It returns the
// call's share for the kernel to prefetch itself, spread over its loop (a burst of PREFETCHT0
// waits on the miss buffers, and the kernel's work with it): the lines of the walk's next
// contiguous piece, at most maxLines of them (nil and 0 where none). What the piece leaves of
// the step (past a region's end, or beyond maxLines) it prefetches at once. With emit set, emit
// receives the piece too, and the kernel gets none.
func (f *prefetcher) step(n, maxLines int) (p unsafe.Pointer, lines int) {
	n >>= f.shift
	p, take := f.next(min(n, maxLines*64))
	if take > 0 && f.emit != nil {
		f.emit(p, take)
		p = nil
	}
	f.issue(n - take)
	if p == nil {
		return nil, 0
	}
	return p, (take + 63) >> 6
}

// issue prefetches the next n bytes of the walk (fewer at its end).
func (f *prefetcher) issue(n int) {
	for n > 0 {
		p, take := f.next(n)
		if take == 0 {
			return
		}
		if f.emit != nil {
			f.emit(p, take)
		} else {
			prefetchLines((*byte)(p), (take+63)>>6)
		}
		n -= take
	}
}

// next moves the walk over its next contiguous piece of at most n bytes and returns it (take 0
// at the walk's end).
func (f *prefetcher) next(n int) (p unsafe.Pointer, take int) {
	if n <= 0 || f.r == len(f.regs) {
		return nil, 0
	}
	g := &f.regs[f.r]
	take = min(n, g.rowBytes-f.col)
	p = unsafe.Add(g.p, f.row*g.stride+f.col)
	if f.col += take; f.col == g.rowBytes {
		f.col = 0
		if f.row++; f.row == g.rows {
			f.row = 0
			f.r++
		}
	}
	return p, take
}

var (
	decodePool = sync.Pool{New: func() any { return new(decodeScratch) }}
	chunkPool  = sync.Pool{New: func() any { return new(chunkBufs) }}
)

func checkDecodeHead(d *AttendHead, group, hd int, wide bool) {
	switch {
	case d.K == nil || d.V == nil:
		panic("cpu: Attend: nil keys or values")
	case !d.K.Tiled || !d.V.ByRows:
		panic("cpu: Attend: keys must be tiled, values by rows")
	case d.K.Rows != hd || d.V.Cols != hd || d.K.Cols != d.V.Rows:
		panic(fmt.Sprintf("cpu: Attend: head dim %d, keys %d×%d, values %d×%d", hd, d.K.Rows, d.K.Cols, d.V.Rows, d.V.Cols))
	case d.K.Cols < 1:
		panic(fmt.Sprintf("cpu: Attend: %d keys, want ≥ 1", d.K.Cols))
	case d.K.Block != d.V.Block:
		panic(fmt.Sprintf("cpu: Attend: key blocks of %d, value blocks of %d", d.K.Block, d.V.Block))
	case (d.K.BF16 != nil) != (d.V.BF16 != nil) || (d.K.BF16 != nil) != wide:
		panic("cpu: Attend: keys and values of every head must be all f32 or all bf16")
	case len(d.Q) < group*hd || len(d.Out) < group*hd:
		panic(fmt.Sprintf("cpu: Attend: %d queries and %d outputs, want %d×%d", len(d.Q), len(d.Out), group, hd))
	}
	checkPagedBlocks(d.K)
	checkPagedBlocks(d.V)
}

// attendChunk computes part = [m (group), l (group), o (group × hd)] for positions [p0, p1) of d,
// which lie in one KV block and start at a multiple of KeyTile: scores sc = Q·Kᵀ (group × n), per
// row m = max, sc = e^(sc−m) and l = Σ sc, then o = sc·V. bf16 keys and values are first widened
// into cb.k and cb.v (laid out as stored), except on AVX-512. qt is the head's queries transposed
// (transposeQ) for the AVX-512 seven-row kernels, else nil. pf (or nil) is the thread's prefetch
// walk, which the products advance. (AVX2 runs attendAVX2 instead.)
func attendChunk(part []float32, cb *chunkBufs, d *AttendHead, qt []float32, tier, group, hd, p0, p1 int, pf *prefetcher) {
	n := p1 - p0
	B := d.K.Block
	b := p0 / B
	kb, kb16 := d.K.block(b, (p0-b*B)*hd)
	vb, vb16 := d.V.block(b, (p0-b*B)*hd)
	if kb16 != nil && tier != tier512 { // the AVX-512 kernels widen bf16 in registers, as they load it
		k16, v16 := kb16, vb16
		kb, vb, kb16, vb16 = cb.k[:hd*((n+KeyTile-1)/KeyTile*KeyTile)], cb.v[:n*hd], nil, nil
		full, tail := n/KeyTile*KeyTile, n%KeyTile
		WidenBF16(kb[:full*hd], k16[:full*hd])
		if tail > 0 { // the rows of a part tile, so that nothing past the sequence is read
			for c := range hd {
				o := full*hd + c*KeyTile
				WidenBF16(kb[o:o+tail], k16[o:o+tail])
			}
		}
		WidenBF16(vb, v16[:n*hd])
	}
	sc := cb.sc
	m, l, o := part[:group], part[group:2*group], part[2*group:]
	scoresT(sc, cb, d.Q, qt, kb, kb16, group, hd, n, pf)
	for r := range group {
		m[r], l[r] = expRow(sc[r*n : (r+1)*n])
	}
	valuesR(o, cb.o7, sc, vb, vb16, qt != nil, group, hd, n, pf)
}

// scoresT sets sc (group × n, row-major) to Q·K for the queries q (group × hd) and the n keys kt
// in tiles (hd × KeyTile each, back to back; the last may be partly used): sc[r, j] =
// Σ_d q[r, d]·kt[j/KeyTile][d][j%KeyTile], summed over d in order. With qt (the queries
// transposed, transposeQ; AVX-512) it takes 7 query rows at a time, a last block of fewer than 7
// through cb.s7 (7 × n), with scoresT7 on two tiles a call; in the first block, each call
// advances pf's walk by the bytes of keys it reads and prefetches that share (step). Without qt,
// one Axpy per query row, tile and dimension. (AVX2 scores a tile at a time: pipeKeyTile.)
func scoresT(sc []float32, cb *chunkBufs, q, qt, kt []float32, kt16 []uint16, group, hd, n int, pf *prefetcher) {
	if qt == nil {
		for r := range group {
			row := sc[r*n : (r+1)*n]
			clear(row)
			for j := 0; j < n; j += KeyTile {
				w := min(KeyTile, n-j)
				for c := range hd {
					Axpy(row[j:j+w], q[r*hd+c], kt[j*hd+c*KeyTile:j*hd+c*KeyTile+w])
				}
			}
		}
		return
	}
	for b := 0; b*rows7 < group; b++ {
		rows := min(rows7, group-b*rows7)
		dst := sc[b*rows7*n:]
		if rows < rows7 {
			dst = cb.s7
		}
		qb := &qt[b*hd*8]
		for j := 0; j < n; j += 2 * KeyTile {
			w := min(2*KeyTile, n-j)
			var pp unsafe.Pointer
			var pl int
			if pf != nil && b == 0 {
				pp, pl = pf.step(4*hd*w, 2*hd) // scoresT7 prefetches two lines per dimension
			}
			kp, b16 := elemPtr(kt, kt16, j*hd)
			scoresT7(qb, kp, hd, &dst[j], n, w, b16, pp, pl)
		}
		if rows < rows7 {
			copy(sc[b*rows7*n:(b*rows7+rows)*n], cb.s7[:rows*n])
		}
	}
}

// transposeQ writes the group × hd queries q as scoresT7 reads them: per block of 7 query rows
// (the last zero-padded), hd rows of 8 values, qt[(b·hd+d)·8+r] = q[(7b+r)·hd+d], the 8th zero.
func transposeQ(qt, q []float32, group, hd int) {
	clear(qt)
	for r := range group {
		b, i := r/rows7, r%rows7
		for c, x := range q[r*hd : (r+1)*hd] {
			qt[(b*hd+c)*8+i] = x
		}
	}
}

// valuesStep is the most positions of one valuesR7 call: each step's call on the first 32
// dimensions advances the prefetch walk by the value rows the step reads (8 KiB at head dim 64,
// as a scoresT7 call does); at depth 576 on Zen 5, 64 positions a call took 10% longer from
// memory, 16 no less than 32 (and so again with the steps outermost, at depths 2,048 and 8,192).
const valuesStep = 32

// valuesR sets o (group × hd) to P·V for the weights p (group × n, row-major) and the n value
// rows v (n × hd): o[r, c] = Σ_j p[r, j]·v[j, c], summed over j in order. With fast (AVX-512) it
// takes 7 rows of weights at a time (p holds 7 rows per block of 7, those past group unused), a
// last block of fewer than 7 through o7 (7 × hd), with valuesR7 on 32 dimensions and up to
// valuesStep positions a call: per step of positions, a call per 32 dimensions in turn, so a
// step's value rows are read whole (once per block of 7 rows) before the next step's, a row's
// later lines from cache. A pass over the whole chunk per 32 dimensions read each row once per
// 32 dimensions from afar: against it, 6-15% less attention time at depths 2,048 and 8,192 over
// f32 blocks on Zen 5 (docs/BENCHMARKS.md, "Issue 30: value rows read whole"). Each step's call
// on the first block's first 32 dimensions advances pf's walk by the value rows it reads (step)
// and prefetches its share. Else one Axpy per row and position. (AVX2 takes a chunk's rows a step
// at a time: pipeValueRows.)
func valuesR(o, o7, p, v []float32, v16 []uint16, fast bool, group, hd, n int, pf *prefetcher) {
	if !fast {
		for r := range group {
			row := o[r*hd : (r+1)*hd]
			clear(row)
			for j := range n {
				Axpy(row, p[r*n+j], v[j*hd:(j+1)*hd])
			}
		}
		return
	}
	for b := 0; b*rows7 < group; b++ {
		rows := min(rows7, group-b*rows7)
		dst := o[b*rows7*hd:]
		if rows < rows7 {
			dst = o7
		}
		for j := 0; j < n; j += valuesStep {
			k := min(valuesStep, n-j)
			acc := 0
			if j > 0 {
				acc = 1
			}
			for c := 0; c < hd; c += 32 {
				var pp unsafe.Pointer
				var pl int
				if pf != nil && b == 0 && c == 0 {
					pp, pl = pf.step(4*hd*k, 4*k) // valuesR7 prefetches four lines per position
				}
				vp, b16 := elemPtr(v, v16, j*hd+c)
				valuesR7(&p[b*rows7*n+j], n, vp, hd, k, &dst[c], hd, min(32, hd-c), acc, b16, pp, pl)
			}
		}
		if rows < rows7 {
			copy(o[b*rows7*hd:(b*rows7+rows)*hd], o7[:rows*hd])
		}
	}
}

// elemPtr returns the address of element i of the f32 values f, or of the bf16 values h where h is
// not nil, and 1 for bf16 (the kernels' b16 argument), else 0.
func elemPtr(f []float32, h []uint16, i int) (unsafe.Pointer, int) {
	if h != nil {
		return unsafe.Pointer(&h[i]), 1
	}
	return unsafe.Pointer(&f[i]), 0
}

// expRow sets x[i] = e^(x[i]−m) for m = max x and returns m and Σ x[i] (len(x) > 0).
func expRow(x []float32) (m, sum float32) {
	t := vec.Load()
	n := len(x)
	k := n & t.mask
	m = float32(math.Inf(-1))
	if k > 0 {
		m = t.max(&x[0], k)
	}
	for _, v := range x[k:] {
		m = max(m, v)
	}
	if k > 0 {
		sum = t.expSum(&x[0], k, m)
	}
	for i := k; i < n; i++ {
		x[i] = float32(math.Exp(float64(x[i] - m)))
		sum += x[i]
	}
	return m, sum
}

// mergeChunks writes out (group × hd) from the nc partial results in part, in position order:
// per query row, M = max m_c, L = Σ l_c·e^(m_c−M), out = Σ o_c·e^(m_c−M) / L.
func mergeChunks(out, part []float32, nc, group, hd int) {
	per := group * (hd + 2)
	t := vec.Load()
	k := hd & t.mask
	for r := range group {
		M := float32(math.Inf(-1))
		for c := range nc {
			M = max(M, part[c*per+r])
		}
		dst := out[r*hd : (r+1)*hd]
		clear(dst)
		var L float32
		for c := range nc {
			p := part[c*per:]
			f := float32(math.Exp(float64(p[r] - M)))
			L += p[group+r] * f
			src := p[2*group+r*hd : 2*group+(r+1)*hd]
			if k > 0 {
				t.axpy(&dst[0], f, &src[0], k)
			}
			for j := k; j < hd; j++ {
				dst[j] += f * src[j]
			}
		}
		inv := 1 / L
		for j := range dst {
			dst[j] *= inv
		}
	}
}
