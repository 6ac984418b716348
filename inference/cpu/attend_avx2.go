package cpu

import "unsafe"

// pipeValues is the value rows of one step of attendAVX2 (a shared head's chunk takes all its rows
// in one): as many positions as a key tile, so that a step reads about as many bytes of values as
// of keys (4 KiB each at head dim 64). A multiple of KeyTile: a step meets whole key tiles.
const pipeValues = KeyTile

var _ [0]struct{} = [pipeValues % KeyTile]struct{}{} // pipeValues is a multiple of KeyTile

// pipeChunk is one chunk of attendAVX2: its keys and values from the chunk's first position (f32
// blocks, or bf16 in k16 and v16), its length, its scores and then weights (7 rows per block of
// query rows, n apart), its partial result (m, l, o: attendChunk's part), and whether its head
// shares its blocks with others of the window (decodeScratch.markShared).
type pipeChunk struct {
	k, v     []float32
	k16, v16 []uint16
	n        int
	sc, part []float32
	shared   bool
}

// attendAVX2 computes the partial results of the chunks ds.items[lo:hi] (one task of the
// threads', in order) on the AVX2 kernels, to the bit as chunk by chunk (TestAttendAVX2Pipeline),
// but software-pipelined: chunk i+1's key tiles are read in turn with chunk i's value rows, a tile
// against pipeValues rows, so that memory serves two streams at once while the kernels work,
// where chunk by chunk reads a chunk's keys, then its values, one stream at a time; the first
// chunk's scores come alone, the last chunk's values too. On Zen 3 (family 25, two threads) a
// depth-2,048 decode step's attention from memory took 6-18% less time than chunk by chunk, and
// 4-5% less again with a step's value rows in one avx2Gemv7x16N call (docs/BENCHMARKS.md, "Issue
// 30: attention in two streams on AVX2"). bf16 keys and values (wide) are widened exactly in the
// kernels' registers as they load them (avx2Gemv7x16 and avx2Gemv7x16N with b16 = 1); a part
// tile (cb.t16) and the value rows of a head dim that is not a multiple of 16 (cb.v) are widened
// into scratch first. On Zen 5 under the AVX2 tier that took 11-20% less attention time than a
// tile or a step's rows widened into scratch each (docs/BENCHMARKS.md, "Issue 30: bf16 widened in
// the AVX2 attention kernels").
// Each stream has its prefetch walk (cb.pf
// over the keys, cb.pfv over the values; none where attendPrefetch is 0), started half of
// attendPrefetch ahead, which the kernels advance by what they read. A chunk of a shared head
// (ds.shared: a prompt's tokens, each reading from cache what its neighbours read) is left out of
// the walks, and its values go in one step: there finer steps and prefetches only cost
// instructions (256 tokens after 2,048: 3-14% less time with whole-chunk steps than with steps of
// 16 rows, and 0-8% less again without the walks).
func attendAVX2(heads []AttendHead, ds *decodeScratch, cb *chunkBufs, group, hd, lo, hi int, wide bool) {
	var pk, pv *prefetcher
	if d := int(attendPrefetch.Load()); d > 0 {
		pk, pv = &cb.pf, &cb.pfv
		pk.start(wide)
		pv.start(wide)
		for i := lo; i < hi; i++ {
			if it := ds.items[i]; !ds.shared[it.head] {
				pk.addKeys(&heads[it.head], hd, it.p0, it.p1)
				pv.addValues(&heads[it.head], hd, it.p0, it.p1)
			}
		}
		pk.issue(d / 2)
		pv.issue(d - d/2)
	}
	per := group * (hd + 2)
	blocks := (group + rows7 - 1) / rows7
	bufs := [2][]float32{cb.sc, cb.sc2}
	chunk := func(i int) pipeChunk {
		it := ds.items[i]
		d := &heads[it.head]
		B := d.K.Block
		b := it.p0 / B
		off := (it.p0 - b*B) * hd
		c := pipeChunk{n: it.p1 - it.p0, sc: bufs[(i-lo)&1], part: ds.part[i*per : (i+1)*per], shared: ds.shared[it.head]}
		c.k, c.k16 = d.K.block(b, off)
		c.v, c.v16 = d.V.block(b, off)
		if cb.qtHead != it.head {
			transposeQ(cb.qt, d.Q, group, hd)
			cb.qtHead = it.head
		}
		return c
	}
	// walk is the stream's walk for chunk c: none for a shared head's.
	walk := func(w *prefetcher, c *pipeChunk) *prefetcher {
		if c.shared {
			return nil
		}
		return w
	}
	cur := chunk(lo)
	for j := 0; j < cur.n; j += KeyTile {
		pipeKeyTile(cb, &cur, hd, blocks, j, walk(pk, &cur))
	}
	pipeExp(&cur, group)
	for i := lo; i < hi; i++ {
		var next pipeChunk
		tiles := 0
		if i+1 < hi {
			// The next chunk's queries replace this one's: its values need none.
			next = chunk(i + 1)
			tiles = (next.n + KeyTile - 1) / KeyTile
		}
		rows := pipeValues // and rows/KeyTile key tiles a step
		if cur.shared {
			rows = AttendChunkLen
		}
		for j := 0; j < max(tiles*KeyTile, cur.n); j += rows {
			for t := j / KeyTile; t < (j+rows)/KeyTile && t < tiles; t++ {
				pipeKeyTile(cb, &next, hd, blocks, t*KeyTile, walk(pk, &next))
			}
			if j < cur.n {
				pipeValueRows(cb, &cur, group, hd, blocks, j, min(cur.n, j+rows), walk(pv, &cur))
			}
		}
		if i+1 < hi {
			pipeExp(&next, group)
		}
		cur = next
	}
}

// pipeKeyTile sets the scores of c's key tile at position j (a multiple of KeyTile), for every
// block of 7 query rows (cb.qt), with avx2Gemv7x16: sc[r, j..j+16) = Σ_d qt[d, r]·tile[d, 0..16),
// a whole bf16 tile widened by the kernel as it loads (b16); a part tile (past the
// sequence's end) is first copied whole into cb.t16 (widened from bf16). The first block's call
// advances pk by the tile's f32 bytes and prefetches that share.
func pipeKeyTile(cb *chunkBufs, c *pipeChunk, hd, blocks, j int, pk *prefetcher) {
	w := min(KeyTile, c.n-j)
	t := cb.t16[:hd*KeyTile]
	var src unsafe.Pointer
	b16 := 0
	switch {
	case c.k16 != nil && w == KeyTile: // widened by the kernel as it loads
		src, b16 = unsafe.Pointer(&c.k16[j*hd]), 1
	case c.k16 != nil: // the rows of a part tile, so that nothing past the sequence is read
		for d := range hd {
			o := j*hd + d*KeyTile
			WidenBF16(t[d*KeyTile:d*KeyTile+w], c.k16[o:o+w])
			clear(t[d*KeyTile+w : (d+1)*KeyTile])
		}
		src = unsafe.Pointer(&t[0])
	case w < KeyTile:
		for d := range hd {
			o := j*hd + d*KeyTile
			copy(t[d*KeyTile:d*KeyTile+w], c.k[o:o+w])
			clear(t[d*KeyTile+w : (d+1)*KeyTile])
		}
		src = unsafe.Pointer(&t[0])
	default:
		src = unsafe.Pointer(&c.k[j*hd])
	}
	n := c.n
	for b := range blocks {
		var pp unsafe.Pointer
		var pl int
		if pk != nil && b == 0 {
			pp, pl = pk.step(4*hd*w, 4*hd) // avx2Gemv7x16 prefetches four lines a step
		}
		qb := &cb.qt[b*hd*8]
		if w < KeyTile {
			var out [rows7 * KeyTile]float32
			avx2Gemv7x16(src, KeyTile, qb, 1, 8, hd, &out[0], KeyTile, 0, pp, pl, 0)
			for r := range rows7 {
				copy(c.sc[(b*rows7+r)*n+j:(b*rows7+r)*n+n], out[r*KeyTile:r*KeyTile+w])
			}
			continue
		}
		avx2Gemv7x16(src, KeyTile, qb, 1, 8, hd, &c.sc[b*rows7*n+j], n, 0, pp, pl, b16)
	}
}

// pipeExp turns c's scores into weights: per query row m = max, e^(s−m) and l = Σ e^(s−m), m and
// l into c.part.
func pipeExp(c *pipeChunk, group int) {
	m, l := c.part[:group], c.part[group:2*group]
	for r := range group {
		m[r], l[r] = expRow(c.sc[r*c.n : (r+1)*c.n])
	}
}

// pipeValueRows adds the value rows [j0, j1) of c, weighted, to its output (c.part's o; set at
// j0 = 0): o[r, x] += Σ_j p[r, j]·v[j, x] over j in order, so that the steps of a chunk sum as
// one pass over its rows does (valuesR). With hd a multiple of 8, per block of 7 query rows (a
// last block of fewer than 7 through cb.o7, copied out at the chunk's end) one avx2Gemv7x16N call
// on 16 dimensions at a time and one avx2Gemv7 on a last 8, each call of the first block
// advancing pv by the bytes it reads and prefetching that share; else one Axpy per row and
// position. bf16 rows go to avx2Gemv7x16N as they are (b16), which widens them as it loads,
// where hd is a multiple of 16; else they are widened into cb.v first.
func pipeValueRows(cb *chunkBufs, c *pipeChunk, group, hd, blocks, j0, j1 int, pv *prefetcher) {
	k, n := j1-j0, c.n
	o := c.part[2*group:]
	var v []float32
	var v16 []uint16 // bf16 rows that avx2Gemv7x16N widens as it loads (head dims of 16s)
	switch {
	case c.v16 != nil && hd%16 == 0:
		v16 = c.v16[j0*hd : j1*hd]
	case c.v16 != nil:
		v = cb.v[:k*hd]
		WidenBF16(v, c.v16[j0*hd:j1*hd])
	default:
		v = c.v[j0*hd : j1*hd]
	}
	if hd%8 != 0 {
		if pv != nil {
			pv.step(4*hd*k, 0)
		}
		for r := range group {
			row := o[r*hd : (r+1)*hd]
			if j0 == 0 {
				clear(row)
			}
			for j := range k {
				Axpy(row, c.sc[r*n+j0+j], v[j*hd:(j+1)*hd])
			}
		}
		return
	}
	acc := 0
	if j0 > 0 {
		acc = 1
	}
	cols := hd &^ 15 // the lanes of avx2Gemv7x16N, a last 8 for avx2Gemv7
	vp, b16 := elemPtr(v, v16, 0)
	for b := range blocks {
		dst := o[b*rows7*hd:]
		if group-b*rows7 < rows7 {
			dst = cb.o7
		}
		pb := &c.sc[b*rows7*n+j0]
		var pp unsafe.Pointer
		var pl int
		if cols > 0 {
			if pv != nil && b == 0 {
				pp, pl = pv.step(4*cols*k, cols/16*k) // a line a step: a row of 16 lanes
			}
			avx2Gemv7x16N(vp, hd, pb, n, 1, k, &dst[0], hd, acc, pp, pl, cols, b16)
		}
		if cols < hd { // 8 dimensions left
			if pv != nil && b == 0 {
				pp, pl = pv.step(4*8*k, 4*k)
			}
			avx2Gemv7(&v[cols], hd, pb, n, 1, k, &dst[cols], hd, acc, pp, pl)
		}
	}
	if j1 == n && group%rows7 != 0 {
		b := blocks - 1
		rows := group - b*rows7
		copy(o[b*rows7*hd:(b*rows7+rows)*hd], cb.o7[:rows*hd])
	}
}
