package cuda

import (
	"fmt"
	"os"
)

// envNoMMA, when 1, runs prefill attention on the f32 kernel (attn_prefill) for every head
// size, instead of the tensor-core one (attn_mma64, attn_mma128) where it applies.
const envNoMMA = "CHAINEDSQL_CUDA_NOMMA"

// kernelNames are the kernels the backend launches (all in the embedded PTX).
var kernelNames = []string{
	"embed_bf16", "rmsnorm", "silu_mul", "to_bf16", "rope_kv",
	"gemv_bf16", "gemm_bf16", "attn_prefill", "attn_mma64", "attn_mma128", "attn_split", "attn_merge", "argmax_rows", "sample_rows",
}

// gemvMaxT is GEMV_MAXT of gemm.cu: the most input rows of the matrix-vector kernel.
const gemvMaxT = 8

// Block sizes of the launches. Multiples of 32 as the reductions need; small enough that the
// emulator's fibers per block stay cheap.
const (
	rowBlock     = 128 // per-row kernels: embedding, RMSNorm, RoPE, argmax
	gemvBlock    = 128 // 4 warps: 4 weight rows per block
	gemmBlock    = 256 // 64×64 tile, 4×4 per thread
	attnBlock    = 128 // attn_split: 4 warps
	prefillBlock = 256
	mmaBlock     = 128 // attn_mma*: 4 warps of 16 query rows each
	mergeBlock   = 64  // attn_merge: a thread per head dimension (looping past 64)
	sampleBlock  = 256 // SAMPLE_BLOCK of sample.cu
	elemBlock    = 256
	maxHeadDim   = 256 // the largest head the kernels are tested with
	// maxTileRows is the most query rows (tokens × the group's heads) of one attn_prefill block.
	maxTileRows = 64
	// maxShared is the dynamic shared memory a kernel may take without opting in.
	maxShared = 48 << 10
	// maxSharedOptIn is the most a kernel takes by opting in (the driver device sets
	// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES past maxShared): 99 KiB, what compute
	// capabilities 8.6 and 8.9 allow a block (8.0 allows 163 KiB, 9.0 227 KiB).
	maxSharedOptIn = 99 << 10
	// maxGroupDims is the most (query head, dimension) pairs of one KV head's group that
	// attn_split holds: ATTS_ACC accumulators per thread of attnBlock.
	maxGroupDims = 16 * attnBlock
	// maxSplits is ATTM_MAXS of attention.cu: the most key splits attn_merge combines.
	maxSplits = 1024
	// minSplitKeys is the fewest keys a split of decode attention takes (two cache blocks):
	// below that the merge and the per-block setup cost more than the keys.
	minSplitKeys = 2 * blockTokens
	// splitBlocksPerSM is the blocks per multiprocessor decodeSplits aims at (attn_split's 65
	// to 79 registers per thread leave room for about 7 resident blocks of 128 threads).
	splitBlocksPerSM = 4
)

// ops launches the kernels with the grids and blocks they are written for; the model and the
// kernel tests both go through it, so the tests check the launches the forward pass makes.
type ops struct {
	d Device
	f map[string]Func
	// noMMA runs prefill attention on attn_prefill where attn_mma would take it
	// (CHAINEDSQL_CUDA_NOMMA=1; the benchmarks and tests compare the two).
	noMMA bool
}

func newOps(d Device) (*ops, error) {
	o := &ops{d: d, f: map[string]Func{}, noMMA: os.Getenv(envNoMMA) == "1"}
	for _, n := range kernelNames {
		f, err := d.Func(n)
		if err != nil {
			return nil, err
		}
		o.f[n] = f
	}
	return o, nil
}

func (o *ops) launch(name string, grid, block Dim, args ...any) error {
	return o.launchShared(name, grid, block, 0, args...)
}

// launchShared is launch with shared bytes of dynamic shared memory.
func (o *ops) launchShared(name string, grid, block Dim, shared int, args ...any) error {
	if err := o.d.Launch(o.f[name], grid, block, shared, args...); err != nil {
		return fmt.Errorf("cuda: %s: %w", name, err)
	}
	return nil
}

// embed writes the rows of table (bf16, V×H) for the T token ids at toks into out (f32 T×H).
func (o *ops) embed(out, table, toks Ptr, T, H int) error {
	return o.launch("embed_bf16", Dim{X: T}, Dim{X: rowBlock}, out, table, toks, int32(H))
}

// rmsnorm normalises R rows of x (rows[r] of x when rows is not 0) into out.
func (o *ops) rmsnorm(out, x, w, rows Ptr, R, H int, eps float32) error {
	return o.launch("rmsnorm", Dim{X: R}, Dim{X: rowBlock}, out, x, w, rows, int32(H), eps)
}

// matmul computes out[t][n] (+)= Σ_k x[t][k]·w[n][k] for T rows: the matrix-vector kernel for
// T ≤ gemvMaxT, else cuBLAS on the bf16-rounded activations (xbf, room for T×K bf16) where the
// device has it and xbf is not 0, else the backend's tiled kernel.
func (o *ops) matmul(out, x, w Ptr, T, N, K, ldo int, accumulate bool, xbf Ptr) error {
	acc := int32(0)
	if accumulate {
		acc = 1
	}
	if T <= gemvMaxT {
		g := gemvLanes(K)
		rows := gemvBlock / 32 * (32 / g)
		return o.launch("gemv_bf16", Dim{X: (N + rows - 1) / rows}, Dim{X: gemvBlock}, out, x, w, int32(T), int32(N), int32(K), int32(ldo), acc, int32(g))
	}
	if xbf != 0 {
		if err := o.toBF16(xbf, x, T*K); err != nil {
			return err
		}
		beta := float32(0)
		if accumulate {
			beta = 1
		}
		ok, err := o.d.Gemm(N, T, K, w, xbf, out, ldo, beta)
		if ok || err != nil {
			return err
		}
	}
	return o.launch("gemm_bf16", Dim{X: (N + 63) / 64, Y: (T + 63) / 64}, Dim{X: gemmBlock}, out, x, w, int32(T), int32(N), int32(K), int32(ldo), acc)
}

// gemvLanes is the lanes gemv_bf16 gives one weight row of K values: 32, halved while half of
// them would still have a load (8 weights, or one where K is not a multiple of 8) each.
func gemvLanes(K int) int {
	units := K
	if K%8 == 0 {
		units = K / 8
	}
	g := 32
	for g > 1 && g/2 >= units {
		g /= 2
	}
	return g
}

func (o *ops) toBF16(out, in Ptr, n int) error {
	return o.launch("to_bf16", Dim{X: min((n+elemBlock-1)/elemBlock, 4096)}, Dim{X: elemBlock}, out, in, int32(n))
}

// siluMul computes out (T×I) from the fused gate/up rows gu (T×2I).
func (o *ops) siluMul(out, gu Ptr, T, I int) error {
	return o.launch("silu_mul", Dim{X: min((T*I+elemBlock-1)/elemBlock, 4096)}, Dim{X: elemBlock}, out, gu, int32(T), int32(I))
}

// kvLayout is the paged KV cache's geometry.
type kvLayout struct {
	nh, nkv, hd, bs int
}

// meta points at the per-token and per-sequence arrays of a pass (device int32 arrays).
type meta struct {
	pos, seq, tables, tableOff Ptr
}

// ropeKV: see rope_kv in ops.cu.
func (o *ops) ropeKV(q, qkv, bias, cos, sin Ptr, mt meta, kv Ptr, T int, g kvLayout) error {
	return o.launch("rope_kv", Dim{X: T}, Dim{X: rowBlock}, q, qkv, bias, cos, sin, mt.pos, mt.seq, mt.tables, mt.tableOff, kv, int32(g.nh), int32(g.nkv), int32(g.hd), int32(g.bs))
}

// attnPrefillShared is attn_prefill's dynamic shared memory in bytes for tiles of qt tokens:
// queries and accumulators (rows × hd each), one cache block of keys or values (rows padded
// by one float), the rows' scores and three floats of softmax state per row.
func attnPrefillShared(g kvLayout, qt int) int {
	rows := qt * (g.nh / g.nkv)
	return 4 * (2*rows*g.hd + g.bs*(g.hd+1) + rows*g.bs + 3*rows)
}

// mmaKernel is the tensor-core prefill attention kernel for g (attention.cu: attn_mma64 for
// head dims up to 64, attn_mma128 up to 128, a multiple of 16 either way, and at most
// maxTileRows query heads per kv head), its keys per step and whether it keeps the query
// fragments in shared memory (attn_mma128: QSH); "" where neither takes g.
func mmaKernel(g kvLayout) (name string, keys int, qShared bool) {
	if g.hd%16 != 0 || g.nh/g.nkv > maxTileRows {
		return "", 0, false
	}
	switch {
	case g.hd <= 64:
		return "attn_mma64", 64, false
	case g.hd <= 128:
		return "attn_mma128", 32, true
	}
	return "", 0, false
}

// attnMMAShared is attn_mma's dynamic shared memory in bytes for steps of kc keys: the keys
// (kc rows of hd + 8 bf16) and the values transposed (hd rows of kc + 8 bf16), then with
// qShared the query fragments (per warp of mmaBlock, k step of 16 dims and lane, two uint4).
func attnMMAShared(g kvLayout, kc int, qShared bool) int {
	n := 2 * (kc*(g.hd+8) + g.hd*(kc+8))
	if qShared {
		n += mmaBlock / 32 * (g.hd / 16) * 32 * 32
	}
	return n
}

// useMMA reports whether prefill attention for g runs on attn_mma.
func (o *ops) useMMA(g kvLayout) bool {
	name, kc, qsh := mmaKernel(g)
	return name != "" && !o.noMMA && attnMMAShared(g, kc, qsh) <= maxSharedOptIn
}

// prefillTileTokens is the query tokens per prefill attention tile: for attn_mma as many as
// keep the rows (tokens × query heads per kv head) at most maxTileRows, its 4 warps of 16;
// for attn_prefill f32TileTokens.
func (o *ops) prefillTileTokens(g kvLayout) int {
	if o.useMMA(g) {
		return max(1, maxTileRows/(g.nh/g.nkv))
	}
	return f32TileTokens(g)
}

// f32TileTokens is the query tokens per attn_prefill tile: as many as keep the rows at most
// maxTileRows and the shared memory within maxShared (0 where not even one fits).
func f32TileTokens(g kvLayout) int {
	qt := max(1, maxTileRows/(g.nh/g.nkv))
	for qt > 0 && attnPrefillShared(g, qt) > maxShared {
		qt--
	}
	return qt
}

// prefillTiles cuts a pass's tokens (each one's sequence and position) into prefill
// attention's tiles, appended to dst as (first token, count) pairs: runs of consecutive
// positions of one sequence, at most qt tokens each.
func prefillTiles(dst []int32, seq, pos []int32, qt int) []int32 {
	for t := 0; t < len(seq); {
		n := 1
		for n < qt && t+n < len(seq) && seq[t+n] == seq[t] && pos[t+n] == pos[t]+int32(n) {
			n++
		}
		dst = append(dst, int32(t), int32(n))
		t += n
	}
	return dst
}

// attnPrefill runs prefill attention over the pass's tiles (nTiles pairs at tiles on the
// device, of at most qt = o.prefillTileTokens(g) tokens; see prefillTiles): attn_mma where it
// takes g (useMMA), else attn_prefill.
func (o *ops) attnPrefill(out, q, kv, tiles Ptr, mt meta, nTiles, qt int, g kvLayout, scale float32) error {
	if o.useMMA(g) {
		name, kc, qsh := mmaKernel(g)
		return o.launchShared(name, Dim{X: nTiles, Y: g.nkv}, Dim{X: mmaBlock}, attnMMAShared(g, kc, qsh),
			out, q, kv, tiles, mt.pos, mt.seq, mt.tables, mt.tableOff, int32(g.nh), int32(g.nkv), int32(g.hd), int32(g.bs), scale)
	}
	return o.launchShared("attn_prefill", Dim{X: nTiles, Y: g.nkv}, Dim{X: prefillBlock}, attnPrefillShared(g, qt),
		out, q, kv, tiles, mt.pos, mt.seq, mt.tables, mt.tableOff, int32(qt), int32(g.nh), int32(g.nkv), int32(g.hd), int32(g.bs), scale)
}

// attnSplitShared is attn_split's dynamic shared memory in bytes: the group's queries, one
// cache block of keys or values (rows padded by one float against bank conflicts), the
// group's scores and three floats of softmax state per head.
func attnSplitShared(g kvLayout) int {
	group := g.nh / g.nkv
	return 4 * (group*g.hd + g.bs*(g.hd+1) + group*g.bs + 3*group)
}

// attnSplit runs decode attention with each token's keys split S ways (see attn_split in
// attention.cu): chunk points at the keys per split on the device (a multiple of g.bs); part
// and ml hold T·nh·S·hd and T·nh·S·2 floats of partial results when S > 1, merged into out by
// attn_merge.
func (o *ops) attnSplit(out, part, ml, q, kv Ptr, mt meta, chunk Ptr, T, S int, g kvLayout, scale float32) error {
	err := o.launchShared("attn_split", Dim{X: T, Y: g.nkv, Z: S}, Dim{X: attnBlock}, attnSplitShared(g),
		out, part, ml, q, kv, mt.pos, mt.seq, mt.tables, mt.tableOff, chunk, int32(g.nh), int32(g.nkv), int32(g.hd), int32(g.bs), scale)
	if err != nil || S == 1 {
		return err
	}
	return o.launch("attn_merge", Dim{X: T, Y: g.nh}, Dim{X: mergeBlock}, out, part, ml, mt.pos, chunk, int32(g.nh), int32(g.hd), int32(S))
}

// decodeSplits is the number of key splits of a decode pass of T tokens (the grid's z extent,
// fixed per batch size so that a captured graph serves every depth): enough that T·nkv·S
// blocks give each of the device's sms multiprocessors about splitBlocksPerSM (more than one
// resident block each, so that one block's key loads overlap another's arithmetic), at most
// one split per minSplitKeys keys of the context length ctxLen and at most maxSplits.
func decodeSplits(T, nkv, sms, ctxLen int) int {
	want := (splitBlocksPerSM*sms + T*nkv - 1) / (T * nkv)
	return max(1, min(want, maxSplits, (ctxLen+minSplitKeys-1)/minSplitKeys))
}

// splitChunk is the keys per split of a pass whose longest context is maxCtx tokens, split S
// ways: the share of each, at least minSplitKeys, rounded up to whole cache blocks of bs.
func splitChunk(maxCtx, S, bs int) int {
	c := max(minSplitKeys, (maxCtx+S-1)/S)
	return (c + bs - 1) / bs * bs
}

// argmax writes the greedy token of each of R logit rows to out (int32).
func (o *ops) argmax(out, logits Ptr, R, V int) error {
	return o.launch("argmax_rows", Dim{X: R}, Dim{X: rowBlock}, out, logits, int32(V))
}

// sample picks a token per row and its log-probability (params: R × (1/temperature, top_p,
// u, top_k) f64; greedy: the rows' argmax tokens; lp: R f32). It needs no scratch memory:
// sample_rows recomputes the probabilities from the logits on each pass.
func (o *ops) sample(out, lp, greedy, logits, params Ptr, R, V int) error {
	return o.launch("sample_rows", Dim{X: R}, Dim{X: sampleBlock}, out, lp, greedy, logits, params, int32(V))
}
