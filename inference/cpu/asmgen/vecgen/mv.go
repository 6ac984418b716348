package vecgen

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The matrix-vector kernels (decode): four rows of a row-major weight matrix dotted with one f32
// vector x. x is loaded once per step for the four rows, the weights are streamed once, and
// independent accumulators (two per row; one for q8, whose blocks have their own partial sums)
// hide the FMA latency, so the loop runs at memory speed.
// The tiers differ in the frame around that loop: the AVX-512 kernels (dot4F32 ...) do one group
// of four rows and store it to out, their Go caller loops over the rows; the AVX2 kernels
// (avx2MvF32 ...) loop over nrows rows (a multiple of 4) themselves and write dst. In both, a row
// stride of 0 repeats one row (the caller's last rows).

// mvRegs are the general registers of a matrix-vector kernel: rows 0 and 3 of the group (rows 1
// and 2 are row0 + stride·1 and ·2), x, the columns left, the prefetch pointer and, for Q8, the
// scales of rows 0 and 3 and their stride in bytes. The AVX2 frame also has the first row of the
// group (base), the scale row (sbase), dst and the rows left.
type mvRegs struct {
	row0, row3, stride, x, cnt, pf reg.Register
	s0, s3, sstride                reg.Register
	base, sbase, dst, rows         reg.Register
}

// mvKernel is one matrix-vector kernel: its names on the two tiers ("" where a tier has none), what
// its signatures are made of, the log2 of the weight size, whether it has Q8 scales, prefetches
// and keeps two accumulators per row, its doc, and the code before the row loop and of the column
// loop (which emits the accumulation into the tier's registers).
type mvKernel struct {
	name512, name2 string
	wtype          string // Go type of a weight
	shift          int
	q8             bool
	half           bool // q8 scales as IEEE halves (Matrix.Scales16 in rows), widened by VCVTPH2PS
	prefetch       bool
	doc            []string
	setup          func(g *gen) // before the row loop (constants)
	loop           func(g *gen, r *mvRegs)
	twoAcc         bool // two accumulators per row (folded before the reduction)
}

// scaleShift is the log2 of the size of one of k's q8 scales: 2 (f32), 1 (a half).
func (k *mvKernel) scaleShift() int {
	if k.half {
		return 1
	}
	return 2
}

// mvRegs returns the tier's registers for k (those of the hand-written kernels it replaced).
func (g *gen) mvRegs(k *mvKernel) *mvRegs {
	if g.t.lanes == 16 {
		r := &mvRegs{row0: reg.RSI, row3: reg.R9, stride: reg.R8, x: reg.RDI, cnt: reg.RCX, pf: reg.R10}
		if k.q8 {
			r.s0, r.s3, r.sstride = reg.RBX, reg.R11, reg.R10
		}
		return r
	}
	if k.q8 {
		return &mvRegs{row0: reg.RAX, row3: reg.R9, stride: reg.R8, x: reg.RDI, cnt: reg.RCX,
			s0: reg.R10, s3: reg.R11, sstride: reg.R12,
			base: reg.RSI, sbase: reg.RBX, dst: reg.RDX, rows: reg.R13}
	}
	return &mvRegs{row0: reg.RAX, row3: reg.R9, stride: reg.R8, x: reg.R11, cnt: reg.R10, pf: reg.R12,
		base: reg.RSI, dst: reg.RDX, rows: reg.RBX}
}

// rowAt returns the address of row i (0-3) of the group plus disp bytes.
func (r *mvRegs) rowAt(i, disp int) operand.Mem {
	switch i {
	case 0:
		return operand.Mem{Base: r.row0, Disp: disp}
	case 3:
		return operand.Mem{Base: r.row3, Disp: disp}
	}
	return operand.Mem{Base: r.row0, Index: r.stride, Scale: uint8(i), Disp: disp}
}

// scaleAt returns the address of the current block scale of row i.
func (r *mvRegs) scaleAt(i int) operand.Mem {
	switch i {
	case 0:
		return operand.Mem{Base: r.s0}
	case 3:
		return operand.Mem{Base: r.s3}
	}
	return operand.Mem{Base: r.s0, Index: r.sstride, Scale: uint8(i)}
}

// row3 sets r3 to base + 3·stride.
func (g *gen) row3(base, stride, r3 reg.Register) {
	g.LEAQ(operand.Mem{Base: base, Index: stride, Scale: 2}, r3)
	g.ADDQ(stride, r3)
}

// acc returns accumulator j (0-3: the first of row j, 4-7: the second) of the tier: Z0-Z3 and
// Z16-Z19 on AVX-512, Y0-Y7 on AVX2.
func (g *gen) acc(j int) reg.Register {
	if g.t.lanes == 16 && j >= 4 {
		return zmm[12+j]
	}
	return g.t.v(j)
}

// mv writes kernel k on the current tier (nothing where the tier has none).
func (g *gen) mv(k *mvKernel) {
	t := g.t
	avx512 := t.lanes == 16
	name, sig := k.name2, ""
	sc := ""
	if k.q8 {
		sc = " scales *" + map[bool]string{false: "float32", true: "uint16"}[k.half] + ", lds int,"
	}
	if avx512 {
		name = k.name512
		sig = fmt.Sprintf("func(w *%s, ldw int,%s x *float32, k int, out *[4]float32)", k.wtype, sc)
	} else {
		sig = fmt.Sprintf("func(w *%s, ldw int,%s x *float32, k int, dst *float32, nrows int)", k.wtype, sc)
	}
	if name == "" {
		return
	}
	g.Function(name)
	g.Attributes(attr.NOSPLIT)
	g.SignatureExpr(sig)
	doc := append([]string{}, k.doc...)
	if avx512 {
		doc = append(doc, "One group of four rows (ldw = 0 repeats one row) into out; the Go caller loops over the rows.")
	} else {
		doc = append(doc, "Loops over nrows rows (a multiple of 4; ldw = 0 with nrows = 4 repeats one row) into dst.")
	}
	g.Doc(doc...)
	g.Pragma("noescape")
	g.Comment(doc...)
	r := g.mvRegs(k)
	nacc := 4
	if k.twoAcc {
		nacc = 8
	}
	if avx512 {
		g.load("w", r.row0, "ldw", r.stride)
		if k.shift > 0 {
			g.SHLQ(operand.U8(k.shift), r.stride)
		}
		g.row3(r.row0, r.stride, r.row3)
		if k.q8 {
			g.load("scales", r.s0, "lds", r.sstride)
			g.SHLQ(operand.U8(k.scaleShift()), r.sstride)
			g.row3(r.s0, r.sstride, r.s3)
		}
		g.load("x", r.x, "k", r.cnt)
		if k.prefetch {
			g.LEAQ(operand.Mem{Base: r.row0, Disp: 8192}, r.pf)
		}
		if k.setup != nil {
			k.setup(g)
		}
		for j := range nacc {
			g.zero(g.acc(j))
		}
		k.loop(g, r)
		g.mvReduce(k.twoAcc)
		g.MOVQ(g.arg("out"), reg.RAX)
		g.VMOVUPS(x(0), operand.Mem{Base: reg.RAX})
		g.done()
		return
	}
	g.load("w", r.base, "ldw", r.stride)
	if k.shift > 0 {
		g.SHLQ(operand.U8(k.shift), r.stride)
	}
	if k.q8 {
		g.load("scales", r.sbase, "lds", r.sstride)
		g.SHLQ(operand.U8(k.scaleShift()), r.sstride)
	} else {
		g.load("x", reg.RDI, "k", reg.RCX)
	}
	g.load("dst", r.dst, "nrows", r.rows)
	if k.setup != nil {
		k.setup(g)
	}
	label := name + "rows"
	g.Label(label)
	if k.prefetch {
		g.LEAQ(operand.Mem{Base: r.base, Disp: 8192}, r.pf)
	}
	g.MOVQ(r.base, r.row0)
	g.row3(r.base, r.stride, r.row3)
	if k.q8 {
		g.MOVQ(r.sbase, r.s0)
		g.row3(r.sbase, r.sstride, r.s3)
		g.load("x", r.x, "k", r.cnt)
	} else {
		g.MOVQ(reg.RDI, r.x)
		g.MOVQ(reg.RCX, r.cnt)
	}
	for j := range nacc {
		g.zero(g.acc(j))
	}
	k.loop(g, r)
	g.mvReduce(k.twoAcc)
	g.VMOVUPS(x(0), operand.Mem{Base: r.dst})
	g.ADDQ(operand.U8(16), r.dst)
	g.LEAQ(operand.Mem{Base: r.base, Index: r.stride, Scale: 4}, r.base)
	if k.q8 {
		g.LEAQ(operand.Mem{Base: r.sbase, Index: r.sstride, Scale: 4}, r.sbase)
	}
	g.SUBQ(operand.U8(4), r.rows)
	g.JGT(operand.LabelRef(label))
	g.done()
}

// mvReduce sums each row's accumulators into X0 = [Σ row 0, ..., Σ row 3]: the second
// accumulators are added to the first, a zmm's upper half to its lower (in Y0-Y3, Y4 the
// scratch), then three horizontal adds and the two 128-bit halves.
func (g *gen) mvReduce(twoAcc bool) {
	if twoAcc {
		for j := range 4 {
			g.VADDPS(g.acc(4+j), g.acc(j), g.acc(j))
		}
	}
	y := func(i int) reg.Register { return zmm[i].AsY() }
	if g.t.lanes == 16 {
		for j := range 4 {
			g.VEXTRACTF64X4(operand.U8(1), zmm[j], y(4))
			g.VADDPS(y(j), y(4), y(j))
		}
	}
	g.VHADDPS(y(1), y(0), y(0))
	g.VHADDPS(y(3), y(2), y(2))
	g.VHADDPS(y(2), y(0), y(0))
	g.VEXTRACTF128(operand.U8(1), y(0), x(1))
	g.VADDPS(x(1), x(0), x(0))
}

// mvLoop emits the column loop over r.cnt: passes of pass columns (body(pass, true), which then
// advances the pointers), and when tail < pass a last step of tail columns (body(tail, false)).
func (g *gen) mvLoop(label string, r *mvRegs, pass, tail int, body func(cols int, advance bool)) {
	if pass == tail {
		g.TESTQ(r.cnt, r.cnt)
		g.JLE(operand.LabelRef(label + "done"))
		g.Label(label + "loop")
		body(pass, true)
		g.SUBQ(operand.U8(pass), r.cnt)
		g.JGT(operand.LabelRef(label + "loop"))
		g.Label(label + "done")
		return
	}
	g.CMPQ(r.cnt, operand.U8(pass))
	g.JLT(operand.LabelRef(label + "tail"))
	g.Label(label + "loop")
	body(pass, true)
	g.SUBQ(operand.U8(pass), r.cnt)
	g.CMPQ(r.cnt, operand.U8(pass))
	g.JGE(operand.LabelRef(label + "loop"))
	g.Label(label + "tail")
	g.CMPQ(r.cnt, operand.U8(tail))
	g.JLT(operand.LabelRef(label + "done"))
	body(tail, false)
	g.Label(label + "done")
}

// advance moves the group's row pointers by wb bytes and x by xb.
func (g *gen) advance(r *mvRegs, wb, xb int) {
	g.ADDQ(imm(wb), r.row0)
	g.ADDQ(imm(wb), r.row3)
	g.ADDQ(imm(xb), r.x)
}

// prefetchPass prefetches the n bytes at r.pf (the four rows' bytes of one pass, 8 KiB ahead:
// decode rows are too short for the hardware prefetcher to ramp up on each) with op, and moves
// r.pf on.
func (g *gen) prefetchPass(r *mvRegs, n int, op func(operand.Op)) {
	for o := 0; o < n; o += 64 {
		op(operand.Mem{Base: r.pf, Disp: o})
	}
	g.ADDQ(imm(n), r.pf)
}

// mvKernels are the matrix-vector kernels: each is one description and the tiers it exists on
// (avx2MvBF16, whose x is not deinterleaved, only on AVX2: the AVX-512 path always deinterleaves).
func mvKernels() []*mvKernel {
	return []*mvKernel{
		{name512: "dot4F32", name2: "avx2MvF32", wtype: "float32", shift: 2, twoAcc: true,
			doc: []string{
				"The f32 matrix-vector kernel: four rows of w (ldw elements apart) dotted with x, k columns",
				"(a multiple of the lanes). The weights are FMA memory operands; x is loaded once per pass",
				"for the four rows, two accumulators per row."},
			loop: func(g *gen, r *mvRegs) { g.mvWide(r, 4, nil) }},
		{name512: "dot4F16", name2: "avx2MvF16", wtype: "uint16", shift: 1, twoAcc: true, prefetch: true,
			doc: []string{
				"As the f32 kernel (dot4F32, avx2MvF32) for IEEE half weights, widened exactly by VCVTPH2PS",
				"(F16C), with an L2 prefetch 8 KiB ahead."},
			loop: func(g *gen, r *mvRegs) {
				g.mvWide(r, 2, func(m operand.Mem, d reg.Register) { g.VCVTPH2PS(m, d) })
			}},
		{name2: "avx2MvBF16", wtype: "uint16", shift: 1, twoAcc: true, prefetch: true,
			doc: []string{
				"As avx2MvF32 for bfloat16 weights, widened exactly (zero-extend, shift into the high half):",
				"the same f32 arithmetic at half the memory traffic. Decode uses avx2MvBF16P (x deinterleaved,",
				"one op fewer per 8 weights); this one serves callers without the deinterleaved copy."},
			loop: func(g *gen, r *mvRegs) {
				g.mvWide(r, 2, func(m operand.Mem, d reg.Register) {
					g.VPMOVZXWD(m, d)
					g.VPSLLD(operand.U8(16), d, d)
				})
			}},
		{name512: "dot4BF16P", name2: "avx2MvBF16P", wtype: "uint16", shift: 1, twoAcc: true, prefetch: true,
			doc: []string{
				"The bf16 matrix-vector kernel (decode), k a multiple of 32, x deinterleaved by blocks of 32",
				"(x[0], x[2], ..., x[30], x[1], ..., x[31]; see deinterleave32). In 32-bit lane i of a load sit",
				"weights 2i (low half) and 2i+1: VPSLLD $16 makes the first an exact f32, an AND with 0xFFFF0000",
				"the second, two single-cycle ops and no shuffle (VPMOVZXWD needs the shuffle port); even and",
				"odd weights go to separate accumulators. The products are ref.go's f32 arithmetic in another",
				"order. Software prefetch 8 KiB ahead: decode rows (1.8 KiB at 896 columns) are too short for",
				"the hardware prefetcher to ramp up on each (AVX-512, measured: 6.6 GB/s with VPMOVZXWD, 7.7",
				"with this widening, 10.3 with the prefetch too). AVX-512 takes 64 columns per pass and",
				"PREFETCHT2; AVX2 32 and PREFETCHT0 (on Zen 3 1-4% faster than PREFETCHT2 in an interleaved A/B",
				"of 0.5B decode, 21.6-22.8 against 21.1-22.4 tok/s; 4 and 16 KiB ahead were slower).",
				"VDPBF16PS would be one op per 32 weights but rounds x to bf16."},
			setup: func(g *gen) { g.mvMask() },
			loop:  func(g *gen, r *mvRegs) { g.mvBF16P(r, true) }},
		{name512: "dot4BF16PFar", name2: "avx2MvBF16PFar", wtype: "uint16", shift: 1, twoAcc: true,
			doc: []string{
				"dot4BF16P without software prefetch, for four rows far apart (the AVX-512 decode plans'",
				"quarters: ldw a quarter of a thread's rows, four sequential DRAM streams that the hardware",
				"prefetcher follows); the same results to the bit. In one process alternating with dot8BF16P",
				"on adjacent rows it ran 6-22% faster on Zen 5 over the 0.5B layers (docs/BENCHMARKS.md).",
				"On AVX2 (avx2MvBF16PFar, the avx2 plan's quarters) it ran 21-26% faster than avx2MvBF16P on",
				"the same rows a quarter apart. k a multiple of 32."},
			setup: func(g *gen) { g.mvMask() },
			loop:  func(g *gen, r *mvRegs) { g.mvBF16P(r, false) }},
		{name512: "dot4Q8", name2: "avx2MvQ8", wtype: "int8", q8: true,
			doc: []string{
				"The exact Q8 matrix-vector kernel: int8 weights with one f32 scale per block of 32 of a row",
				"(ldw, lds in elements) against f32 x, k a multiple of 32. VPMOVSXBD + VCVTDQ2PS widen exactly;",
				"per block and row the vectors' products with x are summed (one chain on AVX-512, two on AVX2)",
				"and added to the row times the block's scale, so the result is the f32 product of the stored",
				"weights up to order. Decode uses the integer kernels (dot4Q8VNNI 1.8×, avx2Dot4Q8I 1.9× the",
				"streaming rate measured, x rounded to 8 bits per block); this one serves AVX-512 CPUs without",
				"VNNI, the matrix-matrix path's leftover rows and plainOff (tests)."},
			loop: func(g *gen, r *mvRegs) { g.mvQ8(r, false) }},
		{name512: "dot4Q8H", name2: "avx2MvQ8H", wtype: "int8", q8: true, half: true,
			doc: []string{
				"dot4Q8 for scales held as IEEE halves (Matrix.Scales16 in rows; lds in halves): each",
				"block's scale is broadcast as a half and widened exactly (VPBROADCASTW, VCVTPH2PS), then",
				"used as dot4Q8 uses its f32 scale, so the results are dot4Q8's over the same scales, to",
				"the bit."},
			loop: func(g *gen, r *mvRegs) { g.mvQ8(r, true) }},
	}
}

// mvWide is the loop of the kernels whose weights are whole vectors of one f32 each after
// widening (f32: none, the weights are FMA memory operands; f16, bf16: widen into a temporary).
// A pass takes two vectors per row (into the row's two accumulators), the tail one. The widened
// weights are in Z6-Z13 on AVX-512 (all four rows widened, then their FMAs), Y10-Y13 on AVX2
// (two rows at a time).
func (g *gen) mvWide(r *mvRegs, wsize int, widen func(operand.Mem, reg.Register)) {
	t := g.t
	var xv, tmp []reg.Register
	if t.lanes == 16 {
		xv = []reg.Register{zmm[4], zmm[5]}
		for i := 6; i <= 13; i++ {
			tmp = append(tmp, zmm[i])
		}
	} else {
		xv = []reg.Register{t.v(8), t.v(9)}
		tmp = []reg.Register{t.v(10), t.v(11), t.v(12), t.v(13)}
	}
	wvec := t.lanes * wsize // bytes of one vector of weights
	g.mvLoop("mv", r, 2*t.lanes, t.lanes, func(cols int, advance bool) {
		nv := cols / t.lanes // vectors per row: 2 in a pass, 1 in the tail
		if advance && widen != nil {
			g.prefetchPass(r, 4*nv*wvec, func(m operand.Op) { g.PREFETCHT2(m) })
		}
		for v := range nv {
			g.VMOVUPS(operand.Mem{Base: r.x, Disp: v * t.bytes()}, xv[v])
		}
		if widen == nil {
			for i := range 4 {
				for v := range nv {
					g.VFMADD231PS(r.rowAt(i, v*wvec), xv[v], g.acc(i+4*v))
				}
			}
		} else {
			// rows per group: as many as the temporaries hold (nv each); in the tail the
			// temporaries are spread over the four rows as in a pass.
			group := len(tmp) / 2
			tr := func(i, v int) reg.Register { return tmp[(i%group)*2+v] }
			if nv == 1 {
				group = 4
				tr = func(i, v int) reg.Register { return tmp[i*len(tmp)/4] }
			}
			for i0 := 0; i0 < 4; i0 += group {
				for i := i0; i < i0+group; i++ {
					for v := range nv {
						widen(r.rowAt(i, v*wvec), tr(i, v))
					}
				}
				for i := i0; i < i0+group; i++ {
					for v := range nv {
						g.VFMADD231PS(tr(i, v), xv[v], g.acc(i+4*v))
					}
				}
			}
		}
		if advance {
			g.advance(r, nv*wvec, nv*t.bytes())
		}
	})
}

// mvMask broadcasts the bf16 odd-weight mask 0xFFFF0000 into Z20 (AVX-512) or Y12 (AVX2).
func (g *gen) mvMask() {
	g.MOVL(operand.U32(0xFFFF0000), reg.EAX)
	if g.t.lanes == 16 {
		g.VPBROADCASTD(reg.EAX, zmm[20])
		return
	}
	g.VMOVD(reg.EAX, x(12))
	g.VPBROADCASTD(x(12), g.t.v(12))
}

// mvBF16P is dot4BF16P's loop: per block of 32 columns a row is 64 bytes, one zmm load or two
// ymm loads (j); the block's x is 128 bytes, even values then odd, i.e. 2 or 4 vectors. A pass is
// two blocks on AVX-512 (its x in Z4, Z5, Z21, Z22; the tail one block), one on AVX2 (Y8-Y11).
// AVX-512 shifts and masks straight from memory into Z6-Z13 (two per row); AVX2 loads into Y13
// first (VEX shifts take no memory operand), shifts into Y14 and masks Y13 in place.
func (g *gen) mvBF16P(r *mvRegs, pf bool) {
	t := g.t
	nl := 64 / t.bytes() // loads per row and block
	var xv []reg.Register
	var pass int
	prefetch := func(m operand.Op) { g.PREFETCHT0(m) }
	if t.lanes == 16 {
		xv = []reg.Register{zmm[4], zmm[5], zmm[21], zmm[22]}
		pass = 64
		prefetch = func(m operand.Op) { g.PREFETCHT2(m) }
	} else {
		xv = []reg.Register{t.v(8), t.v(9), t.v(10), t.v(11)}
		pass = 32
	}
	g.mvLoop("bfp", r, pass, 32, func(cols int, advance bool) {
		nb := cols / 32
		if advance && pf {
			g.prefetchPass(r, 4*2*cols, prefetch)
		}
		for v := range nb * 2 * nl {
			g.VMOVUPS(operand.Mem{Base: r.x, Disp: v * t.bytes()}, xv[v])
		}
		for b := range nb {
			for i := range 4 {
				for j := range nl {
					m := r.rowAt(i, 64*b+j*t.bytes())
					xe, xo := xv[b*2*nl+j], xv[b*2*nl+nl+j]
					var te, to reg.Register
					if t.lanes == 16 {
						te, to = zmm[6+2*i], zmm[7+2*i]
						g.VPSLLD(operand.U8(16), m, te)
						g.VPANDD(m, zmm[20], to)
					} else {
						te, to = t.v(14), t.v(13)
						g.VMOVDQU(m, to)
						g.VPSLLD(operand.U8(16), to, te)
						g.VPAND(t.v(12), to, to)
					}
					g.VFMADD231PS(xe, te, g.acc(i))
					g.VFMADD231PS(xo, to, g.acc(4+i))
				}
			}
		}
		if advance {
			g.advance(r, 2*cols, 4*cols)
		}
	})
}

// mvQ8 is dot4Q8's loop, one block of 32 columns per pass. Per row the block's 32/lanes vectors
// are widened exactly (VPMOVSXBD, VCVTDQ2PS) and multiplied by x into partial sums, vector v into
// chain v mod chains (one chain on AVX-512: w0·x0 + w1·x1 by an FMA; two on AVX2, added at the
// end), and the sum goes into the row's accumulator times the broadcast block scale. The
// temporaries hold the first two vectors of each row of a group: all four rows on AVX-512
// (Z6-Z13, the scales in Z16-Z19, x in Z4, Z5), one row on AVX2 (Y12, Y13; Y14 widens the other
// vectors and takes the scale; x in Y8-Y11); each step is done for the whole group in turn. With
// half the scales are halves (dot4Q8H), each broadcast as a half and widened (bcastScale).
func (g *gen) mvQ8(r *mvRegs, half bool) {
	t := g.t
	nv := 32 / t.lanes
	nc := nv / 2
	xv := func(v int) reg.Register { return t.v(8 + v) }
	held := func(i, v int) reg.Register { return t.v(12 + v) }
	w, sc := func(int) reg.Register { return t.v(14) }, func(int) reg.Register { return t.v(14) }
	group := 1
	if t.lanes == 16 {
		xv = func(v int) reg.Register { return zmm[4+v] }
		held = func(i, v int) reg.Register { return zmm[6+2*i+v] }
		sc = func(i int) reg.Register { return zmm[16+i] }
		group = 4
	}
	g.mvLoop("q8", r, 32, 32, func(int, bool) {
		for v := range nv {
			g.VMOVUPS(operand.Mem{Base: r.x, Disp: v * t.bytes()}, xv(v))
		}
		for i0 := 0; i0 < 4; i0 += group {
			rows := func(f func(i int)) {
				for i := i0; i < i0+group; i++ {
					f(i)
				}
			}
			rows(func(i int) {
				for v := range 2 {
					g.VPMOVSXBD(r.rowAt(i, v*t.lanes), held(i, v))
				}
			})
			rows(func(i int) {
				for v := range 2 {
					g.VCVTDQ2PS(held(i, v), held(i, v))
				}
			})
			for v := range 2 {
				rows(func(i int) {
					if v < nc {
						g.VMULPS(xv(v), held(i, v), held(i, v))
					} else {
						g.VFMADD231PS(xv(v), held(i, v), held(i, v%nc))
					}
				})
			}
			for v := 2; v < nv; v++ {
				rows(func(i int) {
					g.VPMOVSXBD(r.rowAt(i, v*t.lanes), w(i))
					g.VCVTDQ2PS(w(i), w(i))
					g.VFMADD231PS(xv(v), w(i), held(i, v%nc))
				})
			}
			rows(func(i int) {
				for c := 1; c < nc; c++ {
					g.VADDPS(held(i, c), held(i, 0), held(i, 0))
				}
			})
			rows(func(i int) { g.bcastScale(r.scaleAt(i), sc(i), half) })
			rows(func(i int) { g.VFMADD231PS(sc(i), held(i, 0), g.acc(i)) })
		}
		ss := 4
		if half {
			ss = 2
		}
		g.ADDQ(operand.U8(32), r.row0)
		g.ADDQ(operand.U8(32), r.row3)
		g.ADDQ(operand.U8(ss), r.s0)
		g.ADDQ(operand.U8(ss), r.s3)
		g.ADDQ(operand.U8(128), r.x)
	})
}

// bcastScale broadcasts the q8 block scale at m into every lane of v: an f32 (VBROADCASTSS), or
// with half an IEEE half, broadcast into v's lower half (VPBROADCASTW: 8 or 16 words) and widened
// exactly into v (VCVTPH2PS), the same f32 value as the f32 scale a half holds.
func (g *gen) bcastScale(m operand.Mem, v reg.Register, half bool) {
	if !half {
		g.VBROADCASTSS(m, v)
		return
	}
	h := v.(reg.Vec).AsX() // AVX2: 8 halves for a ymm
	if g.t.lanes == 16 {
		h = v.(reg.Vec).AsY() // 16 for a zmm
	}
	g.VPBROADCASTW(m, h)
	g.VCVTPH2PS(h, v)
}

// imm is n as an immediate ADDQ takes: 8 bits where it fits, else 32.
func imm(n int) operand.Constant {
	if n < 256 {
		return operand.U8(n)
	}
	return operand.U32(n)
}

// mv8BF16 writes dot8BF16P, AVX-512 only: dot4BF16P's loop on eight rows per call, each row's
// products summed in dot4BF16P's order (two accumulators per row, the same reduction), so the
// results are its results to the bit. Rows 0-3 accumulate in Z0-Z3 and Z16-Z19 as there, rows 4-7
// in Z23-Z26 and Z27-Z30; the widened weights reuse Z6-Z13 (row i in those of row i mod 4). Rows
// 4 and 7 are R11 and R12 (5 and 6 are R11 + stride·1 and ·2). The prefetch is PREFETCHNTA of the
// eight rows' bytes of each pass, 8 KiB ahead of row 0.
func (g *gen) mv8BF16() {
	if g.t.lanes != 16 {
		return
	}
	doc := []string{
		"The bf16 matrix-vector kernel of the zen5 decode plan: dot4BF16P on eight rows (ldw elements",
		"apart) per call, each row summed in dot4BF16P's order, so out holds what two dot4BF16P calls",
		"give, to the bit. Eight rows are eight DRAM streams in flight where dot4BF16P has four; with",
		"PREFETCHNTA 8 KiB ahead it ran 10-19% faster on Zen 5 over the 0.5B layers, in one process",
		"alternating with dot4BF16P (docs/BENCHMARKS.md). k a multiple of 32."}
	g.Function("dot8BF16P")
	g.Attributes(attr.NOSPLIT)
	g.SignatureExpr("func(w *uint16, ldw int, x *float32, k int, out *[8]float32)")
	g.Doc(doc...)
	g.Pragma("noescape")
	g.Comment(doc...)
	r := &mvRegs{row0: reg.RSI, row3: reg.R9, stride: reg.R8, x: reg.RDI, cnt: reg.RCX, pf: reg.R10}
	row4, row7 := reg.R11, reg.R12
	g.load("w", r.row0, "ldw", r.stride)
	g.SHLQ(operand.U8(1), r.stride)
	g.row3(r.row0, r.stride, r.row3)
	g.LEAQ(operand.Mem{Base: r.row0, Index: r.stride, Scale: 4}, row4)
	g.LEAQ(operand.Mem{Base: r.row3, Index: r.stride, Scale: 4}, row7)
	g.load("x", r.x, "k", r.cnt)
	g.LEAQ(operand.Mem{Base: r.row0, Disp: 8192}, r.pf)
	g.mvMask()
	accE := func(i int) reg.Register {
		return []reg.Register{zmm[0], zmm[1], zmm[2], zmm[3], zmm[23], zmm[24], zmm[25], zmm[26]}[i]
	}
	accO := func(i int) reg.Register {
		return []reg.Register{zmm[16], zmm[17], zmm[18], zmm[19], zmm[27], zmm[28], zmm[29], zmm[30]}[i]
	}
	for i := range 8 {
		g.zero(accE(i))
		g.zero(accO(i))
	}
	rowAt := func(i, disp int) operand.Mem {
		if i < 4 {
			return r.rowAt(i, disp)
		}
		switch i {
		case 4:
			return operand.Mem{Base: row4, Disp: disp}
		case 7:
			return operand.Mem{Base: row7, Disp: disp}
		}
		return operand.Mem{Base: row4, Index: r.stride, Scale: uint8(i - 4), Disp: disp}
	}
	xv := []reg.Register{zmm[4], zmm[5], zmm[21], zmm[22]}
	g.mvLoop("bf8", r, 64, 32, func(cols int, advance bool) {
		nb := cols / 32
		if advance {
			g.prefetchPass(r, 8*2*cols, func(m operand.Op) { g.PREFETCHNTA(m) })
		}
		for v := range nb * 2 {
			g.VMOVUPS(operand.Mem{Base: r.x, Disp: v * 64}, xv[v])
		}
		for b := range nb {
			for i := range 8 {
				m := rowAt(i, 64*b)
				te, to := zmm[6+2*(i%4)], zmm[7+2*(i%4)]
				g.VPSLLD(operand.U8(16), m, te)
				g.VPANDD(m, zmm[20], to)
				g.VFMADD231PS(xv[2*b], te, accE(i))
				g.VFMADD231PS(xv[2*b+1], to, accO(i))
			}
		}
		if advance {
			g.advance(r, 2*cols, 4*cols)
			g.ADDQ(imm(2*cols), row4)
			g.ADDQ(imm(2*cols), row7)
		}
	})
	g.MOVQ(g.arg("out"), reg.RAX)
	g.mvReduce(true)
	g.VMOVUPS(x(0), operand.Mem{Base: reg.RAX})
	for j := range 4 {
		g.VADDPS(accO(4+j), accE(4+j), zmm[j])
	}
	g.mvReduce(false)
	g.VMOVUPS(x(0), operand.Mem{Base: reg.RAX, Disp: 16})
	g.done()
}
