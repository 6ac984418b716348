package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DecodeHead is the attention of one query token over the keys and values of one KV head: the
// Group query heads sharing that KV head (grouped-query attention) meet every key and value once.
type DecodeHead struct {
	Out []float32 // Group × head dim: the attention output of each query head
	Q   []float32 // Group × head dim: the queries, already scaled by 1/√(head dim)
	K   *Paged    // Tiled, head dim × n: the n keys the token sees, transposed in tiles of KeyTile
	V   *Paged    // column-blocked, head dim × n: their values, transposed (bf16 where K is)
}

// KeyTile is the positions of one tile of a Tiled paged matrix: decode attention's keys lie in
// tiles of head dim × KeyTile, so that one vector of scores (KeyTile lanes) meets each dimension
// with one contiguous load, and its reads run front to back through memory.
const KeyTile = 16

// AttendDecode computes Out = softmax(Q·Kᵀ)·V for every head (each of its Group query rows over
// all n keys), flash-decoding style: each head's positions are cut into chunks of at most
// DecodeChunk that never cross a KV block, the chunks of all heads are shared out among the
// threads, and each chunk yields, per query row, its scores' maximum m, the sum l of e^(s−m) and
// the unnormalised output Σ e^(s−m)·v; the chunks of a head are then merged in position order
// (rescaled to the largest maximum). Within a chunk the scores come from the keys tiles with the
// positions along the SIMD lanes (on AVX-512 scoresT7F32: 32 positions against seven query rows
// a call, each query value broadcast once per dimension, no horizontal sums; see scoresT), then
// the Group query rows meet the transposed values together (gemm2x7F32, each pair of value rows
// loaded once for seven query rows, and gemm4x6F32, four for six; see groupRows), so a decode
// step reads each key and value once per KV head instead of once per query head. Chunk
// boundaries do not depend on the thread count, so neither do the results.
// Keys and values in bf16 blocks (Paged.BF16) are widened to f32 a chunk at a time into scratch
// that stays in L2 (exact), so the results equal those over f32 blocks holding the same values,
// bit for bit, while memory is read at half the bytes. On AVX-512 each thread prefetches its
// chunks' keys and values attendPrefetch bytes ahead of the kernels' reads (prefetcher; over bf16
// blocks a chunk ahead, since a chunk is widened as a whole before its products).
func AttendDecode(heads []DecodeHead, group int) {
	if len(heads) == 0 {
		return
	}
	if group < 1 {
		panic(fmt.Sprintf("cpu: AttendDecode: group of %d", group))
	}
	hd := heads[0].V.Rows
	ds := decodePool.Get().(*decodeScratch)
	defer decodePool.Put(ds)
	ds.items = ds.items[:0]
	work := 0
	wide := heads[0].K.BF16 != nil
	for h := range heads {
		checkDecodeHead(&heads[h], group, hd, wide)
		v := heads[h].V
		for p0 := 0; p0 < v.Cols; {
			p1 := min(v.Cols, p0+DecodeChunk, (p0/v.Block+1)*v.Block)
			ds.items = append(ds.items, decodeItem{head: h, p0: p0, p1: p1})
			p0 = p1
		}
		work += 2 * group * hd * v.Cols
	}
	ni := len(ds.items)
	per := group * (hd + 2) // per item: m, l, then the output rows
	ds.part = grow(ds.part, ni*per)
	fast := use512()
	parallelWork(work, ni, 1, func(lo, hi int) {
		cb := chunkPool.Get().(*chunkBufs)
		cb.sc = grow(cb.sc, group*DecodeChunk)
		cb.qtHead = -1
		if fast {
			cb.qt = grow(cb.qt, (group+gemm7-1)/gemm7*hd*8)
			if group%gemm7 != 0 {
				cb.s7 = grow(cb.s7, gemm7*DecodeChunk)
			}
		}
		if wide {
			cb.k = grow(cb.k, hd*DecodeChunk)
			cb.v = grow(cb.v, hd*DecodeChunk)
		}
		var pf *prefetcher
		if d := int(attendPrefetch.Load()); d > 0 && fast { // only the AVX-512 kernels step it
			pf = &cb.pf
			pf.reset()
			pf.emit = attendPrefetchEmit
			for i := lo; i < hi; i++ {
				it := ds.items[i]
				pf.addChunk(&heads[it.head], hd, it.p0, it.p1)
			}
			if wide {
				// A chunk is widened as a whole before its products, so the walk runs a chunk
				// ahead: the first chunk (the bytes of its keys and values) is issued at once.
				it := ds.items[lo]
				d += 2 * 2 * (it.p1 - it.p0) * hd
				pf.shift = 1
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
			attendChunk(ds.part[i*per:(i+1)*per], cb, &heads[it.head], qt, group, hd, it.p0, it.p1, pf)
		}
		clear(cb.pf.regs) // the pooled walk must not keep the blocks alive
		chunkPool.Put(cb)
	})
	i := 0
	for h := range heads {
		i0 := i
		for i < ni && ds.items[i].head == h {
			i++
		}
		mergeChunks(heads[h].Out, ds.part[i0*per:i*per], i-i0, group, hd)
	}
}

// DecodeChunk is the most positions of one AttendDecode chunk: its scores (Group × DecodeChunk)
// stay in L1 between the two products, and a long context gives the threads many chunks.
const DecodeChunk = 256

// gemm7 is the input rows of one gemm2x7F32 call.
const gemm7 = 7

// decodeItem is one chunk of AttendDecode: positions [p0, p1) of heads[head].
type decodeItem struct{ head, p0, p1 int }

// decodeScratch is one AttendDecode call's chunk list and partial results.
type decodeScratch struct {
	items []decodeItem
	part  []float32
}

// chunkBufs is one thread's scratch for attendChunk: the scores and, for bf16 blocks, the
// chunk's keys and values widened to f32; on AVX-512 the queries of head qtHead transposed
// (transposeQ) and the scores of a last block of fewer than 7 query rows.
type chunkBufs struct {
	sc, k, v []float32
	qt, s7   []float32
	qtHead   int
	pf       prefetcher
}

// attendPrefetch is how far ahead of its reads, in bytes, decode attention prefetches the keys
// and values (0: not at all); tests and benchmarks change it. On Zen 5 a
// depth-2,048 decode step's attention from memory took 19-34% less time with it over f32 blocks
// (4 KiB; 2 to 16 KiB all gained), 0-26% less over bf16 ones; docs/BENCHMARKS.md ("KV
// cache: huge pages and prefetch").
var attendPrefetch atomic.Int32

func init() { attendPrefetch.Store(4096) }

// attendPrefetchEmit, when not nil (tests only; set it while no AttendDecode runs), receives
// AttendDecode's prefetches instead of the CPU, from every thread.
var attendPrefetchEmit func(p unsafe.Pointer, n int)

// pfRegion is rows rows of rowBytes bytes each, stride bytes apart, from p.
type pfRegion struct {
	p                      unsafe.Pointer
	rowBytes, stride, rows int
}

// prefetcher walks the keys and values one thread's chunks read, in the order attendChunk reads
// them (per chunk its keys, then its value rows), a distance ahead: issue(d) starts the walk and
// each kernel call issues as many bytes as it reads: a chunk's keys and values are two streams
// of 64 KiB, which the hardware prefetcher alone leaves waiting on memory (docs/DESIGN.md, "Paged
// KV cache"). Prefetches change no result.
type prefetcher struct {
	regs        []pfRegion
	r, row, col int                           // the walk's position: region, row, byte in the row
	shift       int                           // step's shift: 1 over bf16 blocks
	emit        func(p unsafe.Pointer, n int) // nil: prefetch the lines of [p, p+n); tests record
}

// reset empties the walk.
func (f *prefetcher) reset() { f.regs, f.r, f.row, f.col, f.shift = f.regs[:0], 0, 0, 0, 0 }

// addChunk appends the keys, then the value rows, of positions [p0, p1) of d (the positions in
// one block, starting at a multiple of KeyTile; f32 or bf16 blocks) to the walk, in the order
// attendChunk reads them: the keys' whole tiles front to back, then the rows of a last tile of
// fewer than KeyTile positions, then the value rows.
func (f *prefetcher) addChunk(d *DecodeHead, hd, p0, p1 int) {
	B := d.K.Block
	b, n := p0/B, p1-p0
	full, tail := n/KeyTile*KeyTile, n%KeyTile
	var k, v unsafe.Pointer
	e := 4
	if d.K.BF16 != nil {
		k, v, e = unsafe.Pointer(&d.K.BF16[b][(p0-b*B)*hd]), unsafe.Pointer(&d.V.BF16[b][p0-b*B]), 2
	} else {
		k, v = unsafe.Pointer(&d.K.Blocks[b][(p0-b*B)*hd]), unsafe.Pointer(&d.V.Blocks[b][p0-b*B])
	}
	if full > 0 {
		f.regs = append(f.regs, pfRegion{p: k, rowBytes: e * full * hd, rows: 1})
	}
	if tail > 0 {
		f.regs = append(f.regs, pfRegion{p: unsafe.Add(k, e*full*hd), rowBytes: e * tail, stride: e * KeyTile, rows: hd})
	}
	f.regs = append(f.regs, pfRegion{p: v, rowBytes: e * n, stride: e * B, rows: hd})
}

// step advances the walk as a kernel call reading n bytes of f32 keys or values does: by n, or
// by n/2 over bf16 blocks (shift 1), whose walk runs a chunk ahead.
func (f *prefetcher) step(n int) { f.issue(n >> f.shift) }

// issue prefetches the next n bytes of the walk (fewer at its end).
func (f *prefetcher) issue(n int) {
	for n > 0 && f.r < len(f.regs) {
		g := &f.regs[f.r]
		take := min(n, g.rowBytes-f.col)
		p := unsafe.Add(g.p, f.row*g.stride+f.col)
		if f.emit != nil {
			f.emit(p, take)
		} else {
			prefetchLines((*byte)(p), (take+63)>>6)
		}
		n -= take
		if f.col += take; f.col == g.rowBytes {
			f.col = 0
			if f.row++; f.row == g.rows {
				f.row = 0
				f.r++
			}
		}
	}
}

var (
	decodePool = sync.Pool{New: func() any { return new(decodeScratch) }}
	chunkPool  = sync.Pool{New: func() any { return new(chunkBufs) }}
)

func checkDecodeHead(d *DecodeHead, group, hd int, wide bool) {
	switch {
	case d.K == nil || d.V == nil:
		panic("cpu: AttendDecode: nil keys or values")
	case !d.K.Tiled || d.V.ByRows || d.V.Tiled:
		panic("cpu: AttendDecode: keys must be tiled, values by columns")
	case d.V.Rows != hd || d.K.Rows != hd || d.K.Cols != d.V.Cols:
		panic(fmt.Sprintf("cpu: AttendDecode: head dim %d, keys %d×%d, values %d×%d", hd, d.K.Rows, d.K.Cols, d.V.Rows, d.V.Cols))
	case d.V.Cols < 1:
		panic(fmt.Sprintf("cpu: AttendDecode: %d keys, want ≥ 1", d.V.Cols))
	case d.K.Block != d.V.Block:
		panic(fmt.Sprintf("cpu: AttendDecode: key blocks of %d, value blocks of %d", d.K.Block, d.V.Block))
	case (d.K.BF16 != nil) != (d.V.BF16 != nil) || (d.K.BF16 != nil) != wide:
		panic("cpu: AttendDecode: keys and values of every head must be all f32 or all bf16")
	case len(d.Q) < group*hd || len(d.Out) < group*hd:
		panic(fmt.Sprintf("cpu: AttendDecode: %d queries and %d outputs, want %d×%d", len(d.Q), len(d.Out), group, hd))
	}
	checkPagedBlocks(d.K)
	checkPagedBlocks(d.V)
}

// attendChunk computes part = [m (group), l (group), o (group × hd)] for positions [p0, p1) of d,
// which lie in one KV block and start at a multiple of KeyTile: scores sc = Q·Kᵀ (group × n), per
// row m = max, sc = e^(sc−m) and l = Σ sc, then o = sc·V. bf16 keys and values are first widened
// into cb.k (in tiles, as stored) and cb.v (hd × n). qt is the head's queries transposed
// (transposeQ) on AVX-512, else nil. pf (or nil) is the thread's prefetch walk, which the
// products advance.
func attendChunk(part []float32, cb *chunkBufs, d *DecodeHead, qt []float32, group, hd, p0, p1 int, pf *prefetcher) {
	n := p1 - p0
	B := d.K.Block
	b := p0 / B
	var kb, vb []float32
	ldv := B
	if d.K.BF16 != nil {
		kb, vb, ldv = cb.k[:hd*((n+KeyTile-1)/KeyTile*KeyTile)], cb.v[:hd*n], n
		k16 := d.K.BF16[b][(p0-b*B)*hd:]
		full, tail := n/KeyTile*KeyTile, n%KeyTile
		WidenBF16(kb[:full*hd], k16[:full*hd])
		if tail > 0 { // the rows of a part tile, so that nothing past the sequence is read
			for c := range hd {
				o := full*hd + c*KeyTile
				WidenBF16(kb[o:o+tail], k16[o:o+tail])
			}
		}
		v16 := d.V.BF16[b]
		for c := range hd {
			WidenBF16(vb[c*n:(c+1)*n], v16[c*B+p0-b*B:c*B+p1-b*B])
		}
	} else {
		kb = d.K.Blocks[b][(p0-b*B)*hd:]
		vb = d.V.Blocks[b][p0-b*B:]
	}
	sc := cb.sc
	m, l, o := part[:group], part[group:2*group], part[2*group:]
	scoresT(sc, cb.s7, d.Q, qt, kb, group, hd, n, pf)
	for r := range group {
		m[r], l[r] = expRow(sc[r*n : (r+1)*n])
	}
	groupRows(o, hd, vb, ldv, hd, sc, n, group, n, pf)
}

// scoresT sets sc (group × n, row-major) to Q·K for the queries q (group × hd) and the n keys kt
// in tiles (hd × KeyTile each, back to back; the last may be partly used): sc[r, j] =
// Σ_d q[r, d]·kt[j/KeyTile][d][j%KeyTile], summed over d in order. With qt (the queries
// transposed, transposeQ) it runs scoresT7F32 on two tiles and 7 query rows a call, a last block
// of fewer than 7 rows through s7 (7 × n), each call of the first block first advancing pf's walk
// by the bytes of keys it reads; without qt, one Axpy per query row, tile and dimension (any
// SIMD tier).
func scoresT(sc, s7, q, qt, kt []float32, group, hd, n int, pf *prefetcher) {
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
	for b := 0; b*gemm7 < group; b++ {
		rows := min(gemm7, group-b*gemm7)
		dst := sc[b*gemm7*n:]
		if rows < gemm7 {
			dst = s7
		}
		for j := 0; j < n; j += 2 * KeyTile {
			w := min(2*KeyTile, n-j)
			if pf != nil && b == 0 {
				pf.step(4 * hd * w)
			}
			scoresT7F32(&qt[b*hd*8], &kt[j*hd], hd, &dst[j], n, w)
		}
		if rows < gemm7 {
			copy(sc[b*gemm7*n:(b*gemm7+rows)*n], s7[:rows*n])
		}
	}
}

// transposeQ writes the group × hd queries q as scoresT7F32 reads them: per block of 7 query rows
// (the last zero-padded), hd rows of 8 values, qt[(b·hd+d)·8+r] = q[(7b+r)·hd+d], the 8th zero.
func transposeQ(qt, q []float32, group, hd int) {
	clear(qt)
	for r := range group {
		b, i := r/gemm7, r%gemm7
		for c, x := range q[r*hd : (r+1)*hd] {
			qt[(b*hd+c)*8+i] = x
		}
	}
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

// groupRows sets dst[i·ldd+j] = Σ_{c<k} w[j·ldw+c]·x[i·ldx+c] for rows j < nr and input rows
// i < n, as dotRows does, but on AVX-512 takes the input rows seven at a time through gemm2x7F32
// (two weight rows loaded once for seven inputs) while the rows left are not a multiple of six,
// then six at a time through gemm4x6F32 (four weight rows for six inputs), the rest through
// dotRows. The two micro-kernels sum each product in the same order, their own, so results may
// differ from dotRows' in the last bits. With pf, each micro-kernel call of the first pass over
// the rows first advances pf's walk by the bytes of the rows it reads (AVX-512 only).
func groupRows(dst []float32, ldd int, w []float32, ldw, nr int, x []float32, ldx, n, k int, pf *prefetcher) {
	kb, tier := bulk(k)
	i := 0
	if tier == tier512 && kb > 0 && nr >= 2 {
		nr2 := nr &^ 1
		for ; n-i >= gemm7 && (n-i)%gemmN != 0; i += gemm7 {
			for j := 0; j < nr2; j += 2 {
				if pf != nil && i == 0 {
					pf.step(8 * k) // the bytes of the two rows this call reads
				}
				gemm2x7F32(&w[j*ldw], ldw, &x[i*ldx], ldx, kb, &dst[i*ldd+j], ldd)
			}
			if nr2 < nr {
				dotRows(dst[i*ldd+nr2:], ldd, w[nr2*ldw:], ldw, 1, x[i*ldx:], ldx, gemm7, k)
			}
			addTail(dst[i*ldd:], ldd, w, ldw, nr2, x[i*ldx:], ldx, gemm7, kb, k)
		}
	}
	if tier == tier512 && kb > 0 && nr >= 4 {
		nr4 := nr &^ 3
		for ; i+gemmN <= n; i += gemmN {
			for j := 0; j < nr4; j += 4 {
				if pf != nil && i == 0 {
					pf.step(16 * k)
				}
				gemm4x6F32(&w[j*ldw], ldw, &x[i*ldx], ldx, kb, &dst[i*ldd+j], ldd, 0)
			}
			if nr4 < nr {
				dotRows(dst[i*ldd+nr4:], ldd, w[nr4*ldw:], ldw, nr-nr4, x[i*ldx:], ldx, gemmN, k)
			}
			addTail(dst[i*ldd:], ldd, w, ldw, nr4, x[i*ldx:], ldx, gemmN, kb, k)
		}
	}
	if i < n {
		dotRows(dst[i*ldd:], ldd, w, ldw, nr, x[i*ldx:], ldx, n-i, k)
	}
}
