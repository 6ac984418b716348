package qwen2

import (
	"reflect"
	"runtime"
	"slices"
	"testing"
	"unsafe"
	"weak"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/safetensors"
)

// TestForkIdentical: a cache forked from another at a block boundary and in the middle of a block
// gives, for the same suffix, exactly the logits of a cache that computed the whole prompt itself
// (the same Forward calls); the source keeps its own results while the fork writes into the
// shared last block (copy on write), and the fork still works after the source is released; with
// f32 and with bf16 KV blocks.
func TestForkIdentical(t *testing.T) {
	for _, kv16 := range []bool{false, true} {
		m := smallModel(t, safetensors.F32, Options{KVBF16: kv16}, nil)
		V := m.VocabSize()
		ids := prompt(45, 2, V)
		suffix := prompt(9, 3, V)
		for _, at := range []int{32, 37, 45, 0} {
			// The reference: the prefix fed as the source is fed (one Forward of 45 tokens, cut to
			// at by Truncate), then the suffix.
			ref := newCache(t, m, 80)
			forward(t, m, lm.Step{Cache: ref, Tokens: ids})
			ref.Truncate(at)
			want := slices.Clone(forward(t, m, lm.Step{Cache: ref, Tokens: suffix, AllLogits: true})[0].Logits)
			alone := newCache(t, m, 80)
			forward(t, m, lm.Step{Cache: alone, Tokens: ids})
			srcWant := slices.Clone(forward(t, m, lm.Step{Cache: alone, Tokens: suffix[:3]})[0].Logits)
			alone.Release()

			src := newCache(t, m, 80).(*Cache)
			forward(t, m, lm.Step{Cache: src, Tokens: ids})
			fc, err := src.Fork(at, 60)
			if err != nil {
				t.Fatal(err)
			}
			f := fc.(*Cache)
			if f.Len() != at || f.Cap() != 60 {
				t.Fatalf("fork at %d: Len %d Cap %d", at, f.Len(), f.Cap())
			}
			for i := range at / 16 {
				if f.blocks[i] != src.blocks[i] {
					t.Fatalf("fork at %d: full block %d not shared", at, i)
				}
			}
			// The source writes first when the fork point is at its end; else the fork does.
			var got []float32
			if at == len(ids) {
				if lg := forward(t, m, lm.Step{Cache: src, Tokens: suffix[:3]})[0].Logits; !slices.Equal(lg, srcWant) {
					t.Fatalf("fork at %d: the source's next logits changed", at)
				}
				got = forward(t, m, lm.Step{Cache: f, Tokens: suffix, AllLogits: true})[0].Logits
			} else {
				got = forward(t, m, lm.Step{Cache: f, Tokens: suffix, AllLogits: true})[0].Logits
				if lg := forward(t, m, lm.Step{Cache: src, Tokens: suffix[:3]})[0].Logits; !slices.Equal(lg, srcWant) {
					t.Fatalf("fork at %d: the fork's writes changed the source (max diff %.3g)", at, maxAbsDiff(lg, srcWant))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("fork at %d: logits differ from computing the prefix (max diff %.3g)", at, maxAbsDiff(got, want))
			}
			if at%16 != 0 && f.blocks[at/16] == src.blocks[at/16] {
				t.Fatalf("fork at %d: the partly filled block is still shared after both wrote", at)
			}
			// The first owner finishes; the fork goes on over the shared blocks.
			src.Release()
			next := forward(t, m, lm.Step{Cache: f, Tokens: []int{5}})[0].Logits
			refNext := forward(t, m, lm.Step{Cache: ref, Tokens: []int{5}})[0].Logits
			if !slices.Equal(next, refNext) {
				t.Fatalf("fork at %d after the source's release: logits differ by %.3g", at, maxAbsDiff(next, refNext))
			}
			f.Release()
			ref.Release()
		}
		if live, _ := m.KVBlocks(); live != 0 {
			t.Errorf("%d KV blocks alive after every cache was released", live)
		}
	}
}

// TestForkChain: forks of forks, truncation below a shared block, and releases in any order keep
// the reference counts right: every block is freed exactly when its last cache drops it.
func TestForkChain(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	a := newCache(t, m, 100).(*Cache)
	forward(t, m, lm.Step{Cache: a, Tokens: prompt(50, 1, V)}) // 4 blocks
	bc, _ := a.Fork(40, 100)
	b := bc.(*Cache)
	cc, _ := b.Fork(20, 100)
	c := cc.(*Cache)
	if live, _ := m.KVBlocks(); live != 4 {
		t.Fatalf("%d blocks alive, want 4 (all shared)", live)
	}
	forward(t, m, lm.Step{Cache: c, Tokens: prompt(30, 2, V)}) // copies block 1, adds 2
	if live, _ := m.KVBlocks(); live != 7 {
		t.Fatalf("%d blocks alive, want 7", live)
	}
	a.Truncate(10) // drops its refs to blocks 1-3
	a.Release()
	if live, _ := m.KVBlocks(); live != 6 {
		t.Fatalf("%d blocks alive after the first cache's release, want 6 (block 3 freed)", live)
	}
	b.Release()
	if live, _ := m.KVBlocks(); live != 4 {
		t.Fatalf("%d blocks alive, want c's 4", live)
	}
	c.Release()
	c.Release() // a second Release is harmless
	if live, _ := m.KVBlocks(); live != 0 {
		t.Fatalf("%d blocks alive after all releases", live)
	}
}

func TestForkErrors(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	c := newCache(t, m, 20).(*Cache)
	forward(t, m, lm.Step{Cache: c, Tokens: []int{1, 2, 3}})
	for _, tc := range [][2]int{{4, 10}, {-1, 10}, {3, 2}, {3, 257}, {0, 0}} {
		if _, err := c.Fork(tc[0], tc[1]); err == nil {
			t.Errorf("Fork(%d, %d) succeeded", tc[0], tc[1])
		}
	}
	c.Release()
	if _, err := c.Fork(0, 5); err == nil {
		t.Error("Fork of a released cache succeeded")
	}
}

// TestBlockSizes: the logits do not depend on the KV block size (multiples of cpu.KeyTile, the
// keys' tiles) beyond rounding (the P·V partial sums are added block by block), for prefill and
// decode.
func TestBlockSizes(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	ids := prompt(70, 4, V)
	run := func(block int) []float32 {
		m.kv.block = block
		c := newCache(t, m, 80)
		defer c.Release()
		out := slices.Clone(forward(t, m, lm.Step{Cache: c, Tokens: ids[:60], AllLogits: true})[0].Logits)
		for _, id := range ids[60:] {
			out = append(out, forward(t, m, lm.Step{Cache: c, Tokens: []int{id}})[0].Logits...)
		}
		return out
	}
	want := run(256)
	for _, b := range []int{16, 48, 64, 112} {
		if d := maxAbsDiff(run(b), want); d > 2e-5 {
			t.Errorf("blocks of %d: logits differ from blocks of 256 by %.3g", b, d)
		}
	}
}

// TestCacheLayout: what store writes, keys and values show as paged matrices (the keys in tiles
// of cpu.KeyTile, the values by rows), for every layer and kv head, lengths ending inside a
// tile, in a block and on a block boundary, f32 and bf16 blocks (the values rounded, exactly);
// and a prefix of the views of all n tokens is the view of its length.
func TestCacheLayout(t *testing.T) {
	const layers, nkv, hd, n = 2, 2, 24, 75
	for _, kv16 := range []bool{false, true} {
		for _, block := range []int{16, 48, 256} {
			m := &Model{cfg: Config{NumHiddenLayers: layers, NumKeyValueHeads: nkv, HeadDim: hd, MaxPositionEmbeddings: 128}}
			m.kv.block, m.kv.bf16 = block, kv16
			gc, err := m.NewCache(n)
			if err != nil {
				t.Fatal(err)
			}
			c := gc.(*Cache)
			c.prepare(n)
			r := rng(9)
			// want[l][0 keys, 1 values][p][kh*hd+d]
			want := make([][2][][]float32, layers)
			for l := range layers {
				for p := range n {
					k, v := make([]float32, nkv*hd), make([]float32, nkv*hd)
					for i := range k {
						k[i], v[i] = r.uniform(1), r.uniform(1)
					}
					c.store(l, p, k, v)
					if kv16 {
						for i := range k {
							k[i], v[i] = cpu.BF16ToF32(cpu.F32ToBF16(k[i])), cpu.BF16ToF32(cpu.F32ToBF16(v[i]))
						}
					}
					want[l][0], want[l][1] = append(want[l][0], k), append(want[l][1], v)
				}
			}
			c.n = n
			at := func(w *cpu.Paged, b, i int) float32 {
				if kv16 {
					return cpu.BF16ToF32(w.BF16[b][i])
				}
				return w.Blocks[b][i]
			}
			for l := range layers {
				for kh := range nkv {
					for _, ln := range []int{n, 64, 48, 33, 1} {
						var pk, pv cpu.Paged
						c.keys(&pk, l, kh, ln)
						c.values(&pv, l, kh, ln)
						if !pk.Tiled || pk.Rows != hd || pk.Cols != ln || !pv.ByRows || pv.Rows != ln || pv.Cols != hd {
							t.Fatalf("keys %+v, values %+v: want tiled keys (%d × %d) and values by rows", pk, pv, hd, ln)
						}
						var fk, fv, ck, cv cpu.Paged
						c.keys(&fk, l, kh, n)
						c.values(&fv, l, kh, n)
						c.prefix(&ck, &fk, ln)
						c.prefix(&cv, &fv, ln)
						if !reflect.DeepEqual(ck, pk) || !reflect.DeepEqual(cv, pv) {
							t.Fatalf("bf16 %v, blocks of %d, %d of %d tokens: prefixes %+v and %+v, want %+v and %+v", kv16, block, ln, n, ck, cv, pk, pv)
						}
						for p := range ln {
							b, o := p/block, p%block
							for d := range hd {
								wk, wv := want[l][0][p][kh*hd+d], want[l][1][p][kh*hd+d]
								pkv := at(&pk, b, (o/cpu.KeyTile*hd+d)*cpu.KeyTile+o%cpu.KeyTile)
								pvv := at(&pv, b, o*hd+d)
								if pkv != wk || pvv != wv {
									t.Fatalf("bf16 %v, blocks of %d, layer %d, kv head %d, %d tokens, position %d, dim %d: paged key %g and value %g, want %g and %g",
										kv16, block, l, kh, ln, p, d, pkv, pvv, wk, wv)
								}
							}
						}
					}
				}
			}
			c.Release()
		}
	}
}

// TestReleasedBlocksUnreachable: once a cache is released, its blocks are garbage even while
// the model goes on with other caches: the attention's pooled views do not keep them alive
// (with bf16 blocks too).
func TestReleasedBlocksUnreachable(t *testing.T) {
	for _, kv16 := range []bool{false, true} {
		m := smallModel(t, safetensors.F32, Options{KVBF16: kv16}, nil)
		ids := prompt(200, 3, m.VocabSize())
		a := newCache(t, m, 256)
		forward(t, m, lm.Step{Cache: a, Tokens: ids})
		var blocks []weak.Pointer[byte]
		for _, b := range a.(*Cache).blocks {
			p := unsafe.Pointer(unsafe.SliceData(b.data))
			if kv16 {
				p = unsafe.Pointer(unsafe.SliceData(b.data16))
			}
			blocks = append(blocks, weak.Make((*byte)(p)))
		}
		if len(blocks) < 2 {
			t.Fatalf("bf16 %v: %d blocks for 200 tokens, want several", kv16, len(blocks))
		}
		a.Release()
		b := newCache(t, m, 64)
		forward(t, m, lm.Step{Cache: b, Tokens: ids[:1]})
		runtime.GC()
		for i, w := range blocks {
			if w.Value() != nil {
				t.Errorf("bf16 %v: block %d of the released cache is still reachable", kv16, i)
			}
		}
		forward(t, m, lm.Step{Cache: b, Tokens: ids[1:2]})
	}
}
