package cpu

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/chainedsql/chainedsql/internal/benchprocs"
)

// span is n bytes at address p.
type span struct{ p, n uintptr }

// TestPrefetcherWalk: the walk of three chunks (a part of a block, a last block of less than one
// key tile, a whole block) visits exactly the bytes attendChunk reads, in its order (the keys'
// whole tiles, the rows of a part tile, then the value rows), chunk after chunk, whatever the
// step, and stops at its end; so does it when a kernel takes a share of each step (step: at most
// maxLines of the next contiguous piece, the rest issued at once).
func TestPrefetcherWalk(t *testing.T) {
	const hd, B, n = 16, 64, 140
	rng := rand.New(rand.NewPCG(33, 1))
	d := &AttendHead{
		K: toKeyTiles(randVec(rng, n*hd), n, hd, B),
		V: toPaged(randVec(rng, n*hd), n, hd, B, true),
	}
	var want []span
	addr := func(s []float32, i int) uintptr { return uintptr(unsafe.Pointer(&s[i])) }
	chunks := [][2]int{{80, 128}, {128, 140}, {0, 64}} // block 1 from offset 16, block 2's 12, all of block 0
	for _, c := range chunks {
		b, m := c[0]/B, c[1]-c[0]
		off, full, tail := (c[0]-b*B)*hd, m/KeyTile*KeyTile, m%KeyTile
		if full > 0 {
			want = append(want, span{addr(d.K.Blocks[b], off), uintptr(4 * full * hd)})
		}
		if tail > 0 {
			for r := range hd {
				want = append(want, span{addr(d.K.Blocks[b], off+full*hd+r*KeyTile), uintptr(4 * tail)})
			}
		}
		want = append(want, span{addr(d.V.Blocks[b], (c[0]-b*B)*hd), uintptr(4 * m * hd)})
	}
	for _, c := range []struct{ step, maxLines int }{{1, 0}, {60, 0}, {64, 0}, {100, 0}, {4096, 0}, {1 << 20, 0}, {100, 1}, {4096, 3}, {4096, 64}} {
		step, maxLines := c.step, c.maxLines
		var f prefetcher
		var got []span
		f.emit = func(p unsafe.Pointer, n int) {
			// Join pieces that continue the last span, as one row is issued in several steps.
			if k := len(got) - 1; k >= 0 && got[k].p+got[k].n == uintptr(p) && len(got) <= len(want) && got[k].n < want[k].n {
				got[k].n += uintptr(n)
				return
			}
			got = append(got, span{uintptr(p), uintptr(n)})
		}
		f.reset()
		for _, c := range chunks {
			f.addChunk(d, hd, c[0], c[1])
		}
		for range 1 << 16 {
			if maxLines == 0 {
				f.issue(step)
			} else if p, n := f.step(step, maxLines); p != nil || n != 0 {
				t.Fatalf("step %d, %d lines: the kernel's share went to the kernel, not to emit", step, maxLines)
			}
		}
		if maxLines > 0 {
			stepShares(t, d, hd, chunks, step, maxLines)
		}
		if len(got) != len(want) {
			t.Fatalf("step %d (kernel share %d lines): %d spans, want %d", step, maxLines, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("step %d (kernel share %d lines): span %d is %d bytes at %#x, want %d at %#x", step, maxLines, i, got[i].n, got[i].p, want[i].n, want[i].p)
			}
		}
	}
}

// stepShares checks what step hands a kernel (emit nil): step after step, the address and line
// count of the piece that a walk with emit set emits first for the same step (the kernel's
// share comes before what step issues at once), never more than maxLines lines.
func stepShares(t *testing.T, d *AttendHead, hd int, chunks [][2]int, step, maxLines int) {
	t.Helper()
	var f, ref prefetcher
	var first []span
	ref.emit = func(p unsafe.Pointer, n int) { first = append(first, span{uintptr(p), uintptr(n)}) }
	f.reset()
	ref.reset()
	for _, c := range chunks {
		f.addChunk(d, hd, c[0], c[1])
		ref.addChunk(d, hd, c[0], c[1])
	}
	for i := range 1 << 16 {
		first = first[:0]
		ref.step(step, maxLines)
		p, lines := f.step(step, maxLines)
		var want span
		if len(first) > 0 {
			want = first[0]
		}
		if uintptr(p) != want.p || lines != int(want.n+63)>>6 || lines > maxLines {
			t.Fatalf("step %d of %d bytes (%d lines at most): the kernel got %d lines at %#x, want %d at %#x",
				i, step, maxLines, lines, uintptr(p), (want.n+63)>>6, want.p)
		}
	}
}

// TestAttendDecodeWalks: in Attend the kernels advance each thread's walks to their ends,
// on the AVX-512 tier (one walk: a chunk's keys, then its values) and AVX2 (two: the keys, and
// the values), over f32 and bf16 blocks: with groups that take the kernels whole (7), through the
// padded block (6) or two blocks (8), head dims of 64 and 128 (where, over f32 blocks, AVX-512's
// values kernels take only half of their step's lines and the rest is issued at once), 40 (on
// AVX2 a last 8 dimensions) and 20 (no values kernel), sequences ending inside
// a key tile, with 1 and 2 threads, the prefetches cover every key and value byte of every chunk
// exactly once: they add up to all of them, and no two overlap. Without the kernels' steps only
// the first 4 KiB of the walks would be issued.
func TestAttendDecodeWalks(t *testing.T) {
	onSIMDTiers(t, func(t *testing.T, _ string) { attendWalks(t) })
}

func attendWalks(t *testing.T) {
	was := attendPrefetch.Load()
	defer attendPrefetch.Store(was)
	attendPrefetch.Store(4096)
	defer func() { attendPrefetchEmit = nil }()
	rng := rand.New(rand.NewPCG(34, 2))
	const B = 256
	for _, c := range []struct{ group, hd int }{{7, 64}, {6, 64}, {7, 128}, {8, 40}, {7, 20}} {
		group, hd := c.group, c.hd
		for _, kv16 := range []bool{false, true} {
			lens := []int{700, 2049}
			heads := make([]AttendHead, len(lens))
			total := 0 // bytes of every chunk's keys and values
			elem := 4
			if kv16 {
				elem = 2
			}
			for h, n := range lens {
				heads[h] = AttendHead{
					Out: make([]float32, group*hd), Q: randVec(rng, group*hd),
					K: toKeyTiles(randVec(rng, n*hd), n, hd, B),
					V: toPaged(randVec(rng, n*hd), n, hd, B, true),
				}
				if kv16 {
					heads[h].K, heads[h].V = toBF16Paged(heads[h].K), toBF16Paged(heads[h].V)
				}
				total += 2 * n * hd * elem
			}
			for _, th := range []int{1, 2} {
				var mu sync.Mutex
				var spans []span
				bytes := 0
				attendPrefetchEmit = func(p unsafe.Pointer, n int) {
					mu.Lock()
					defer mu.Unlock()
					bytes += n
					spans = append(spans, span{uintptr(p), uintptr(n)})
				}
				restore := withThreads(th)
				Attend(heads, group)
				restore()
				attendPrefetchEmit = nil
				if bytes != total {
					t.Errorf("group %d, hd %d, bf16 %v, %d threads: %d bytes prefetched, want all %d", group, hd, kv16, th, bytes, total)
				}
				slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.p, b.p) })
				for i := 1; i < len(spans); i++ {
					if a, b := spans[i-1], spans[i]; a.p+a.n > b.p {
						t.Errorf("group %d, hd %d, bf16 %v, %d threads: %d bytes at %#x and %d at %#x overlap", group, hd, kv16, th, a.n, a.p, b.n, b.p)
						break
					}
				}
			}
		}
	}
}

// TestAttendDecodeWalksShared: on AVX2 a prompt's heads (prefixes of one block list per KV head,
// as qwen2 passes them) are prefetched not at all, their blocks being in cache, while heads with
// lists of their own are walked whole, even over the same blocks (forked sequences), in the same
// call as the prompt's.
func TestAttendDecodeWalksShared(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU without AVX2")
	}
	defer avx512Off.Store(avx512Off.Swap(true))
	if tierName() != "avx2" {
		t.Skipf("tier %s in use (switched off by CHAINEDSQL_NOSIMD)", tierName())
	}
	was := attendPrefetch.Load()
	defer attendPrefetch.Store(was)
	attendPrefetch.Store(4096)
	defer func() { attendPrefetchEmit = nil }()
	rng := rand.New(rand.NewPCG(34, 3))
	const group, hd, B, n = 7, 64, 256, 700
	full := AttendHead{K: toKeyTiles(randVec(rng, n*hd), n, hd, B), V: toPaged(randVec(rng, n*hd), n, hd, B, true)}
	var heads []AttendHead
	for t := n - 4; t < n; t++ { // a prompt's last four tokens
		k, v := *full.K, *full.V
		k.Cols, v.Rows = t+1, t+1
		heads = append(heads, AttendHead{Out: make([]float32, group*hd), Q: randVec(rng, group*hd), K: &k, V: &v})
	}
	k, v := *full.K, *full.V
	k.Blocks, v.Blocks = slices.Clone(k.Blocks), slices.Clone(v.Blocks)
	fork := AttendHead{Out: make([]float32, group*hd), Q: randVec(rng, group*hd), K: &k, V: &v}
	for _, th := range []int{1, 2} {
		for _, withFork := range []bool{false, true} {
			hs := heads
			want := 0
			if withFork {
				hs = append(slices.Clone(heads), fork)
				want = 2 * n * hd * 4
			}
			var mu sync.Mutex
			bytes := 0
			attendPrefetchEmit = func(p unsafe.Pointer, n int) {
				mu.Lock()
				bytes += n
				mu.Unlock()
			}
			restore := withThreads(th)
			Attend(hs, group)
			restore()
			attendPrefetchEmit = nil
			if bytes != want {
				t.Errorf("%d threads, a fork with its own list %v: %d bytes prefetched, want %d", th, withFork, bytes, want)
			}
		}
	}
}

// TestAttendDecodePrefetch: the prefetch distance (none, less than a line, the default, past
// every chunk) changes no result, for groups of one block of seven query rows (7), two (14), a
// padded one (6) and one row (1), over f32 and bf16 blocks that chunks fill or not, with 1 and 2
// threads.
func TestAttendDecodePrefetch(t *testing.T) {
	was := attendPrefetch.Load()
	defer attendPrefetch.Store(was)
	old := Threads()
	defer SetThreads(old)
	rng := rand.New(rand.NewPCG(34, 1))
	for _, sh := range []struct {
		group, hd, block int
		kv16             bool
	}{{7, 64, 256, false}, {14, 64, 112, false}, {6, 64, 256, false}, {1, 48, 64, false}, {7, 64, 256, true}, {6, 64, 112, true}} {
		lens := []int{1, 255, 700, 2049}
		heads := make([]AttendHead, len(lens))
		for h, n := range lens {
			heads[h] = AttendHead{
				Q: randVec(rng, sh.group*sh.hd),
				K: toKeyTiles(randVec(rng, n*sh.hd), n, sh.hd, sh.block),
				V: toPaged(randVec(rng, n*sh.hd), n, sh.hd, sh.block, true),
			}
			if sh.kv16 {
				heads[h].K, heads[h].V = toBF16Paged(heads[h].K), toBF16Paged(heads[h].V)
			}
		}
		run := func(pf int32, th int) []float32 {
			attendPrefetch.Store(pf)
			SetThreads(th)
			out := make([]float32, len(heads)*sh.group*sh.hd)
			for h := range heads {
				heads[h].Out = out[h*sh.group*sh.hd : (h+1)*sh.group*sh.hd]
			}
			Attend(heads, sh.group)
			return out
		}
		want := run(0, 1)
		for _, pf := range []int32{32, 4096, 1 << 24} {
			for _, th := range []int{1, 2} {
				for i, g := range run(pf, th) {
					if g != want[i] {
						t.Fatalf("bf16 %v, group %d, block %d, prefetch %d, %d threads: out[%d] = %g, want %g", sh.kv16, sh.group, sh.block, pf, th, i, g, want[i])
					}
				}
			}
		}
	}
}

// BenchmarkAttendPrefetchAB is one decode step's attention at depth 2,048 over the 0.5B shape
// (24 layers × 2 KV heads of 64 dims, 7 query heads each, blocks of 256 tokens: 48 MiB in f32,
// 24 in bf16),
// from memory (a 128 MiB pass over other memory before each step evicts the cache, as a decode
// step's weights do), without and with the software prefetch in turn (the order alternating):
// the median ms of each and the median of the per-pair ratios with/without (a change of load
// slows both sides of a pair alike).
func BenchmarkAttendPrefetchAB(b *testing.B) {
	b.Run("kv=f32", func(b *testing.B) { benchAttendPrefetch(b, false) })
	b.Run("kv=bf16", func(b *testing.B) { benchAttendPrefetch(b, true) })
}

func benchAttendPrefetch(b *testing.B, kv16 bool) {
	was := attendPrefetch.Load()
	defer attendPrefetch.Store(was)
	defer withThreads(benchprocs.Threads(b))()
	const layers, kvh, group, hd, n, block = 24, 2, 7, 64, 2048, 256
	rng := rand.New(rand.NewPCG(35, 1))
	heads := make([][]AttendHead, layers)
	for l := range heads {
		heads[l] = make([]AttendHead, kvh)
		for h := range heads[l] {
			heads[l][h] = AttendHead{
				Out: make([]float32, group*hd), Q: randVec(rng, group*hd),
				K: toKeyTiles(randVec(rng, n*hd), n, hd, block),
				V: toPaged(randVec(rng, n*hd), n, hd, block, true),
			}
			if kv16 {
				heads[l][h].K, heads[l][h].V = toBF16Paged(heads[l][h].K), toBF16Paged(heads[l][h].V)
			}
		}
	}
	evict := make([]byte, 128<<20)
	for i := range evict {
		evict[i] = byte(i)
	}
	var sink byte
	dists := []int32{0, was}
	ts := make([][]time.Duration, len(dists))
	i := 0
	for b.Loop() {
		for j := range dists {
			k := (i + j) % len(dists)
			for p := 0; p < len(evict); p += 64 {
				sink += evict[p]
			}
			attendPrefetch.Store(dists[k])
			t := time.Now()
			for l := range heads {
				Attend(heads[l], group)
			}
			ts[k] = append(ts[k], time.Since(t))
		}
		i++
	}
	ratios := make([]float64, len(ts[0]))
	for i := range ratios {
		ratios[i] = float64(ts[1][i]) / float64(ts[0][i])
	}
	ms := func(v []time.Duration) float64 {
		s := append([]time.Duration(nil), v...)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	slices.Sort(ratios)
	b.ReportMetric(ms(ts[0]), "ms-plain")
	b.ReportMetric(ms(ts[1]), "ms-prefetch")
	b.ReportMetric(ratios[len(ratios)/2], "prefetch/plain")
	if sink == 1 {
		b.Log("") // keeps the eviction pass
	}
}
