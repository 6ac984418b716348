// Package vecgen generates the elementwise kernels of inference/cpu for both assembly tiers,
// AVX-512 (zmm, 16 lanes) and AVX2 (ymm, 8 lanes), from one description written with avo: the
// vector helpers of ops.go (dot, axpy, add, mulScale, max, expSum, siluMul, scale) and the
// widening of weight rows (cvtBF16, cvtF16, cvtQ8). Each kernel is written once against a tier,
// which supplies the register width and what the hand-written tiers did differently: how exp
// clamps its input and applies 2^n (VSCALEFPS on AVX-512; exponent bits and a mask on AVX2), where
// its constants live (broadcast into Z16-Z27 on AVX-512; 8-lane tables in memory on AVX2, which
// has only 16 registers) and how many accumulators dot keeps. The instruction sequences,
// accumulation orders and registers are those of the hand-written kernels they replace: the
// machine code is the same but for the addresses of the exp constants, the results the same to
// the bit.
//
// It also generates the matrix-vector kernels that are one algorithm at two widths (mv.go: f32,
// f16, bf16 against a deinterleaved x, exact q8), in each tier's frame: one group of four rows per
// call on AVX-512 (dot4F32 ...), the row loop in assembly on AVX2 (avx2MvF32 ...).
//
// Files returns the assembly and its two Go declaration files; asmgen/vecgen/main.go writes them
// (go generate in inference/cpu) and TestAsmGenCurrent fails when the checked-in copies differ.
package vecgen

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
	"github.com/mmcloughlin/avo/reg"
)

// Names of the generated files in inference/cpu.
const (
	AsmFile   = "kernels_vec_amd64.s"
	StubsFile = "kernels_vec_amd64.go"
	OtherFile = "kernels_vec_other.go"
)

// command is how the files are regenerated, as their headers say.
var command = []string{"go", "run", "asmgen/vecgen/main.go"}

// tier is one assembly tier: the vector registers and what its exp needs.
type tier struct {
	prefix string // symbol prefix: "" for AVX-512 (dotF32), "avx2" for AVX2 (avx2DotF32)
	lanes  int    // f32 lanes per vector
	exp    []expConst
	expTab operand.Mem // the exp constants: scalars (AVX-512), 8 lanes each (AVX2)
}

// zmm lists the vector registers by number; a tier takes their zmm or ymm form.
var zmm = []reg.VecPhysical{
	reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7, reg.Z8, reg.Z9, reg.Z10,
	reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15, reg.Z16, reg.Z17, reg.Z18, reg.Z19, reg.Z20,
	reg.Z21, reg.Z22, reg.Z23, reg.Z24, reg.Z25, reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31,
}

// v returns vector register i at the tier's width.
func (t *tier) v(i int) reg.Register {
	if t.lanes == 8 {
		return zmm[i].AsY()
	}
	return zmm[i]
}

// x returns the xmm form of register i.
func x(i int) reg.Register { return zmm[i].AsX() }

// bytes is the size of one vector in bytes.
func (t *tier) bytes() int { return 4 * t.lanes }

// name returns the symbol of kernel base (named as on AVX-512) on this tier.
func (t *tier) name(base string) string {
	if t.prefix == "" {
		return base
	}
	return t.prefix + strings.ToUpper(base[:1]) + base[1:]
}

// expConst is a constant of the vector exp: Cephes expf's range reduction (x = n·ln2 + f, ln2
// split in a high part exact in f32 and a low correction), its degree-6 polynomial for e^f on
// |f| <= ln2/2 (relative error about 2e-7), and the input clamp.
type expConst struct {
	name string
	bits uint32
	doc  string
}

// The exp constants by name; the tiers differ in the clamp and AVX2 adds the exponent bias.
const (
	cLog2e = "log2e"
	cC1    = "c1"
	cC2    = "c2"
	cP0    = "p0"
	cP1    = "p1"
	cP2    = "p2"
	cP3    = "p3"
	cP4    = "p4"
	cP5    = "p5"
	cOne   = "one"
	cLo    = "lo"
	cHi    = "hi"
	cBias  = "bias"
)

var expCommon = []expConst{
	{cLog2e, 0x3fb8aa3b, "log2(e)"},
	{cC1, 0x3f318000, "ln2 high 0.693359375"},
	{cC2, 0xb95e8083, "ln2 low -2.12194440e-4"},
	{cP0, 0x39506967, "1.9875691500e-4"},
	{cP1, 0x3ab743ce, "1.3981999507e-3"},
	{cP2, 0x3c088908, "8.3334519073e-3"},
	{cP3, 0x3d2aa9c1, "4.1665795894e-2"},
	{cP4, 0x3e2aaaaa, "1.6666665459e-1"},
	{cP5, 0x3f000000, "0.5"},
	{cOne, 0x3f800000, "1"},
}

// tiers are AVX-512 (VSCALEFPS applies 2^n and handles underflow, so the clamp is loose) and AVX2
// (2^n built in the exponent bits: below lo, e^x under the smallest normal f32, the result is
// masked to exactly 0, so masked (-Inf) softmax positions give 0).
func tiers() []*tier {
	return []*tier{
		{lanes: 16, exp: append(append([]expConst{}, expCommon...),
			expConst{cLo, 0xc2dc0000, "lower clamp -110 (e^x rounds to 0 there)"},
			expConst{cHi, 0x42b16666, "upper clamp 88.7 (e^x overflows above)"})},
		{prefix: "avx2", lanes: 8, exp: append(append([]expConst{}, expCommon...),
			expConst{cLo, 0xc2aeac4f, "lower clamp -87.33654: e^x is the smallest normal f32"},
			expConst{cHi, 0x42b00000, "upper clamp 88: 2^127 still finite"},
			expConst{cBias, 0x0000007f, "127, the f32 exponent bias (int32)"})},
	}
}

// gen is one generation: the avo context and the tier being written.
type gen struct {
	*build.Context
	t *tier
}

// Files returns the generated files by name: the assembly of both tiers, its Go declarations
// (amd64) and the declarations of the other builds (panicking bodies, never called).
func Files() (map[string][]byte, error) {
	c := build.NewContext()
	c.ConstraintExpr("amd64,!purego")
	g := &gen{Context: c}
	ts := tiers()
	for _, t := range ts {
		g.t = t
		g.data()
	}
	for _, t := range ts {
		g.t = t
		g.dot()
		g.streams()
		g.max()
		g.expSum()
		g.siluMul()
		g.cvt16("cvtBF16", "Widens bf16 to f32 (zero-extend, shift into the high half).")
		g.cvt16("cvtF16", "Widens IEEE half to f32 with VCVTPH2PS.")
		g.cvtQ8(false)
		g.cvtQ8(true)
		for _, k := range mvKernels() {
			g.mv(k)
		}
		g.mv8BF16()
	}
	f, err := c.Result()
	if err != nil {
		return nil, err
	}
	if err := pass.Compile.Execute(f); err != nil {
		return nil, err
	}
	cfg := printer.Config{Argv: command, Pkg: "cpu"}
	asm, err := printer.NewGoAsm(cfg).Print(f)
	if err != nil {
		return nil, err
	}
	stubs, err := printer.NewStubs(cfg).Print(f)
	if err != nil {
		return nil, err
	}
	other, err := otherStubs(cfg, f)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{AsmFile: asm, StubsFile: stubs, OtherFile: other}, nil
}

// otherStubs declares f's functions for builds without the assembly.
func otherStubs(cfg printer.Config, f *ir.File) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n\n//go:build !amd64 || purego\n\npackage %s\n\n", cfg.GeneratedWarning(), cfg.Pkg)
	b.WriteString("// Without amd64 assembly the kernels of " + AsmFile + " do not exist; the kernel\n")
	b.WriteString("// table of the portable tier has none of them, so these are never called.\n\n")
	for _, fn := range f.Functions() {
		fmt.Fprintf(&b, "%s { panic(\"cpu: no SIMD\") }\n", fn.Stub())
	}
	return format.Source(b.Bytes())
}

// data declares the tier's exp constants: scalars for AVX-512 (broadcast by expConsts), 8-lane
// tables for AVX2.
func (g *gen) data() {
	t := g.t
	if t.lanes == 16 {
		t.expTab = g.StaticGlobal("expc")
		g.DataAttributes(attr.RODATA | attr.NOPTR)
		for i, k := range t.exp {
			g.AddDatum(4*i, operand.U32(k.bits))
		}
		return
	}
	t.expTab = g.StaticGlobal("expv")
	g.DataAttributes(attr.RODATA | attr.NOPTR)
	for i, k := range t.exp {
		for l := range t.lanes {
			g.AddDatum(t.bytes()*i+4*l, operand.U32(k.bits))
		}
	}
}

// expIndex returns the position of constant name in the tier's table.
func (t *tier) expIndex(name string) int {
	for i, k := range t.exp {
		if k.name == name {
			return i
		}
	}
	panic("vecgen: no exp constant " + name)
}

// c returns exp constant name as an operand: its register (Z16 on) on AVX-512, its table row on
// AVX2.
func (g *gen) c(name string) operand.Op {
	i := g.t.expIndex(name)
	if g.t.lanes == 16 {
		return zmm[16+i]
	}
	return g.t.expTab.Offset(g.t.bytes() * i)
}

// expConsts loads the AVX-512 exp constants into Z16-Z27 (AVX2 reads them from memory).
func (g *gen) expConsts() {
	if g.t.lanes != 16 {
		return
	}
	for i := range g.t.exp {
		g.VBROADCASTSS(g.t.expTab.Offset(4*i), zmm[16+i])
	}
}

// exp computes r = e^v (v clobbered) with t, n and, on AVX2, mk as temporaries.
func (g *gen) exp(v, r, t, n, mk reg.Register) {
	avx2 := g.t.lanes == 8
	if avx2 {
		g.VCMPPS(operand.U8(0x1d), g.c(cLo), v, mk) // v >= lo (ordered): lanes that stay
	}
	g.VMAXPS(g.c(cLo), v, v)
	g.VMINPS(g.c(cHi), v, v)
	g.VMULPS(g.c(cLog2e), v, n)
	if avx2 {
		g.VROUNDPS(operand.U8(0), n, n)
	} else {
		g.VRNDSCALEPS(operand.U8(0), n, n)
	}
	g.VFNMADD231PS(g.c(cC1), n, v)
	g.VFNMADD231PS(g.c(cC2), n, v)
	if avx2 {
		g.VMOVUPS(g.c(cP0), r)
	} else {
		g.VMOVAPS(g.c(cP0), r)
	}
	for _, p := range []string{cP1, cP2, cP3, cP4, cP5} {
		g.VFMADD213PS(g.c(p), v, r)
	}
	g.VMULPS(v, v, t)
	g.VFMADD213PS(v, t, r)
	g.VADDPS(g.c(cOne), r, r)
	if avx2 {
		g.VCVTPS2DQ(n, n)
		g.VPADDD(g.c(cBias), n, n)
		g.VPSLLD(operand.U8(23), n, n)
		g.VMULPS(n, r, r)
		g.VANDPS(mk, r, r)
	} else {
		g.VSCALEFPS(n, r, r)
	}
}

// fn starts kernel base with signature sig and its doc (a comment in both the assembly and the
// declaration).
func (g *gen) fn(base, sig string, doc ...string) {
	g.Function(g.t.name(base))
	g.Attributes(attr.NOSPLIT)
	g.SignatureExpr(sig)
	if strings.Contains(sig, " n int") {
		doc = append(doc, fmt.Sprintf("n is a multiple of %d.", g.t.lanes))
	}
	g.Doc(doc...)
	g.Pragma("noescape")
	g.Comment(doc...)
}

// arg returns the stack slot of parameter name.
func (g *gen) arg(name string) operand.Mem {
	b, err := g.Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// ret returns the stack slot of the result.
func (g *gen) ret() operand.Mem {
	b, err := g.ReturnIndex(0).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// zero clears vector register r.
func (g *gen) zero(r reg.Register) {
	if g.t.lanes == 16 {
		g.VPXORD(r, r, r)
	} else {
		g.VXORPS(r, r, r)
	}
}

// done ends a kernel.
func (g *gen) done() {
	g.VZEROUPPER()
	g.RET()
}

// load loads parameters, given as pairs of name and register: a pointer or count into its general
// register, a float32 broadcast to every lane of its vector register.
func (g *gen) load(pairs ...any) {
	for i := 0; i < len(pairs); i += 2 {
		name, r := pairs[i].(string), pairs[i+1].(reg.Register)
		if r.Size() > 8 {
			g.VBROADCASTSS(g.arg(name), r)
		} else {
			g.MOVQ(g.arg(name), r)
		}
	}
}

// step is a pointer a loop advances and by how many bytes per iteration.
type step struct {
	p     reg.Register
	bytes int
}

// loop emits a loop over CX (may be 0): body, then the pointers advance and CX drops by count.
func (g *gen) loop(label string, steps []step, count int, body func()) {
	g.TESTQ(reg.RCX, reg.RCX)
	g.JLE(operand.LabelRef(label + "done"))
	g.Label(label + "loop")
	body()
	for _, s := range steps {
		g.ADDQ(operand.U8(s.bytes), s.p)
	}
	if count == 1 {
		g.DECQ(reg.RCX)
	} else {
		g.SUBQ(operand.U8(count), reg.RCX)
	}
	g.JGT(operand.LabelRef(label + "loop"))
	g.Label(label + "done")
}

// stream is the loop most kernels are: over CX f32 elements, body for one vector at the pointers
// ptrs, which then advance by one vector.
func (g *gen) stream(label string, body func(), ptrs ...reg.Register) {
	steps := make([]step, len(ptrs))
	for i, p := range ptrs {
		steps[i] = step{p, g.t.bytes()}
	}
	g.loop(label, steps, g.t.lanes, body)
}

// hsum sums the lanes of vector register 0 of the tier (acc, which must be register 0) into the
// low lane of X0: the upper half of a zmm is added to its lower, then the two 128-bit halves,
// then two horizontal adds. Clobbers register 1.
func (g *gen) hsum(acc int) {
	if g.t.lanes == 16 {
		g.VEXTRACTF64X4(operand.U8(1), zmm[acc], zmm[0].AsY())
		g.VADDPS(zmm[acc].AsY(), zmm[0].AsY(), zmm[0].AsY())
	} else if acc != 0 {
		g.VMOVAPS(zmm[acc].AsY(), zmm[0].AsY())
	}
	g.VEXTRACTF128(operand.U8(1), zmm[0].AsY(), x(1))
	g.VADDPS(x(1), x(0), x(0))
	g.VHADDPS(x(0), x(0), x(0))
	g.VHADDPS(x(0), x(0), x(0))
}

// dot: the main loop takes 32 elements per step into 128/bytes accumulators (two zmm, four ymm),
// the tail (at most one zmm, or a loop of up to three ymm) goes into the first; the accumulators
// are then summed pairwise and across lanes.
func (g *gen) dot() {
	t := g.t
	g.fn("dotF32", "func(a, b *float32, n int) float32",
		"A plain dot product (attention scores, RMSNorm), "+map[int]string{16: "two", 8: "four"}[t.lanes]+" accumulators.")
	nacc := 128 / t.bytes()
	acc0 := map[int]int{16: 2, 8: 0}[t.lanes] // the registers the hand-written kernels used
	acc := func(i int) reg.Register { return t.v(acc0 + i) }
	tmp := func(i int) reg.Register { return t.v(4 + i) }
	g.load("a", reg.RSI, "b", reg.RDI, "n", reg.RCX)
	for i := range nacc {
		g.zero(acc(i))
	}
	g.CMPQ(reg.RCX, operand.U8(32))
	g.JLT(operand.LabelRef("dottail"))
	g.Label("dotloop")
	for i := range nacc {
		g.VMOVUPS(operand.Mem{Base: reg.RSI, Disp: i * t.bytes()}, tmp(i))
	}
	for i := range nacc {
		g.VFMADD231PS(operand.Mem{Base: reg.RDI, Disp: i * t.bytes()}, tmp(i), acc(i))
	}
	g.ADDQ(operand.U8(128), reg.RSI)
	g.ADDQ(operand.U8(128), reg.RDI)
	g.SUBQ(operand.U8(32), reg.RCX)
	g.CMPQ(reg.RCX, operand.U8(32))
	g.JGE(operand.LabelRef("dotloop"))
	g.Label("dottail")
	if nacc == 2 { // at most one vector left
		g.CMPQ(reg.RCX, operand.U8(t.lanes))
		g.JLT(operand.LabelRef("dotdone"))
		g.VMOVUPS(operand.Mem{Base: reg.RSI}, tmp(0))
		g.VFMADD231PS(operand.Mem{Base: reg.RDI}, tmp(0), acc(0))
	} else {
		g.TESTQ(reg.RCX, reg.RCX)
		g.JLE(operand.LabelRef("dotdone"))
		g.VMOVUPS(operand.Mem{Base: reg.RSI}, tmp(0))
		g.VFMADD231PS(operand.Mem{Base: reg.RDI}, tmp(0), acc(0))
		g.ADDQ(operand.U8(t.bytes()), reg.RSI)
		g.ADDQ(operand.U8(t.bytes()), reg.RDI)
		g.SUBQ(operand.U8(t.lanes), reg.RCX)
		g.JMP(operand.LabelRef("dottail"))
	}
	g.Label("dotdone")
	for s := 1; s < nacc; s *= 2 {
		for i := 0; i+s < nacc; i += 2 * s {
			g.VADDPS(acc(i+s), acc(i), acc(i))
		}
	}
	g.hsum(acc0)
	g.VMOVSS(x(0), g.ret())
	g.done()
}

// streams writes the kernels that are one stream loop and nothing else: each with its
// parameters (as load takes them), the pointers the loop advances and the body for one vector.
func (g *gen) streams() {
	t := g.t
	v0, v1 := t.v(0), t.v(1)
	at := func(r reg.Register) operand.Mem { return operand.Mem{Base: r} }
	for _, k := range []struct {
		base, sig, doc, label string
		args                  []any
		ptrs                  []reg.Register
		body                  func()
	}{
		{"axpyF32", "func(dst *float32, a float32, x *float32, n int)", "dst += a·x (attention's weighted sum of values).",
			"axpy", []any{"dst", reg.RDI, "a", v1, "x", reg.RSI, "n", reg.RCX}, []reg.Register{reg.RSI, reg.RDI}, func() {
				g.VMOVUPS(at(reg.RSI), v0)
				g.VFMADD213PS(at(reg.RDI), v1, v0)
				g.VMOVUPS(v0, at(reg.RDI))
			}},
		{"addF32", "func(dst, x *float32, n int)", "dst += x (residual connections).",
			"add", []any{"dst", reg.RDI, "x", reg.RSI, "n", reg.RCX}, []reg.Register{reg.RSI, reg.RDI}, func() {
				g.VMOVUPS(at(reg.RDI), v0)
				g.VADDPS(at(reg.RSI), v0, v0)
				g.VMOVUPS(v0, at(reg.RDI))
			}},
		{"mulScaleF32", "func(dst, x, w *float32, s float32, n int)", "dst = x·s·w elementwise (the second half of RMSNorm).",
			"muls", []any{"dst", reg.RDI, "x", reg.RSI, "w", reg.RBX, "s", v1, "n", reg.RCX}, []reg.Register{reg.RSI, reg.RBX, reg.RDI}, func() {
				g.VMULPS(at(reg.RSI), v1, v0)
				g.VMULPS(at(reg.RBX), v0, v0)
				g.VMOVUPS(v0, at(reg.RDI))
			}},
		{"scaleF32", "func(x *float32, s float32, n int)", "x *= s in place (softmax normalisation).",
			"scale", []any{"x", reg.RDI, "s", v1, "n", reg.RCX}, []reg.Register{reg.RDI}, func() {
				g.VMULPS(at(reg.RDI), v1, v0)
				g.VMOVUPS(v0, at(reg.RDI))
			}},
	} {
		g.fn(k.base, k.sig, k.doc)
		g.load(k.args...)
		g.stream(k.label, k.body, k.ptrs...)
		g.done()
	}
}

// max: the largest of x, n > 0; the halves are folded with the upper half as VMAXPS's first
// source.
func (g *gen) max() {
	t := g.t
	g.fn("maxF32", "func(x *float32, n int) float32", "The largest of x[0:n], n > 0.")
	g.load("x", reg.RSI, "n", reg.RCX)
	g.VMOVUPS(operand.Mem{Base: reg.RSI}, t.v(2))
	g.ADDQ(operand.U8(t.bytes()), reg.RSI)
	g.SUBQ(operand.U8(t.lanes), reg.RCX)
	g.JLE(operand.LabelRef("maxdone"))
	g.Label("maxloop")
	g.VMAXPS(operand.Mem{Base: reg.RSI}, t.v(2), t.v(2))
	g.ADDQ(operand.U8(t.bytes()), reg.RSI)
	g.SUBQ(operand.U8(t.lanes), reg.RCX)
	g.JGT(operand.LabelRef("maxloop"))
	g.Label("maxdone")
	if t.lanes == 16 {
		g.VEXTRACTF64X4(operand.U8(1), zmm[2], zmm[0].AsY())
		g.VMAXPS(zmm[2].AsY(), zmm[0].AsY(), zmm[0].AsY())
		g.VEXTRACTF128(operand.U8(1), zmm[0].AsY(), x(1))
		g.VMAXPS(x(1), x(0), x(0))
	} else {
		g.VEXTRACTF128(operand.U8(1), zmm[2].AsY(), x(0))
		g.VMAXPS(x(2), x(0), x(0))
	}
	for _, sh := range []uint8{0x4e, 0xb1} {
		g.VPERMILPS(operand.U8(sh), x(0), x(1))
		g.VMAXPS(x(1), x(0), x(0))
	}
	g.VMOVSS(x(0), g.ret())
	g.done()
}

// expSum: x = e^(x-m) in place, returning the sum.
func (g *gen) expSum() {
	t := g.t
	g.fn("expSumF32", "func(x *float32, n int, m float32) float32", "x[i] = e^(x[i]-m) in place, returning Σ x[i] (the body of a softmax).")
	// The registers of the hand-written kernels: m, the sum.
	rm, rs := map[int]int{16: 5, 8: 6}[t.lanes], map[int]int{16: 4, 8: 7}[t.lanes]
	g.load("x", reg.RSI, "n", reg.RCX, "m", t.v(rm))
	g.expConsts()
	g.zero(t.v(rs))
	g.stream("exp", func() {
		g.VMOVUPS(operand.Mem{Base: reg.RSI}, t.v(0))
		g.VSUBPS(t.v(rm), t.v(0), t.v(0))
		g.exp(t.v(0), t.v(1), t.v(2), t.v(3), t.v(4))
		g.VMOVUPS(t.v(1), operand.Mem{Base: reg.RSI})
		g.VADDPS(t.v(1), t.v(rs), t.v(rs))
	}, reg.RSI)
	g.hsum(rs)
	g.VMOVSS(x(0), g.ret())
	g.done()
}

// siluMul: dst = gate/(1+e^-gate)·up.
func (g *gen) siluMul() {
	t := g.t
	g.fn("siluMulF32", "func(dst, gate, up *float32, n int)", "dst = gate/(1+e^-gate) · up (SwiGLU), with an exact division.")
	g.load("dst", reg.RDI, "gate", reg.RSI, "up", reg.RBX, "n", reg.RCX)
	g.expConsts()
	g.zero(t.v(5))
	g.stream("silum", func() {
		g.VMOVUPS(operand.Mem{Base: reg.RSI}, t.v(6))
		g.VSUBPS(t.v(6), t.v(5), t.v(0))
		g.exp(t.v(0), t.v(1), t.v(2), t.v(3), t.v(4))
		g.VADDPS(g.c(cOne), t.v(1), t.v(1))
		g.VDIVPS(t.v(1), t.v(6), t.v(6))
		g.VMULPS(operand.Mem{Base: reg.RBX}, t.v(6), t.v(6))
		g.VMOVUPS(t.v(6), operand.Mem{Base: reg.RDI})
	}, reg.RSI, reg.RBX, reg.RDI)
	g.done()
}

// cvt16 widens 16-bit values (bf16 or f16) to f32.
func (g *gen) cvt16(base, doc string) {
	t := g.t
	g.fn(base, "func(dst *float32, src *uint16, n int)", doc)
	g.load("dst", reg.RDI, "src", reg.RSI, "n", reg.RCX)
	label := map[string]string{"cvtBF16": "cvtb", "cvtF16": "cvth"}[base]
	g.loop(label, []step{{reg.RSI, 2 * t.lanes}, {reg.RDI, t.bytes()}}, t.lanes, func() {
		if base == "cvtBF16" {
			g.VPMOVZXWD(operand.Mem{Base: reg.RSI}, t.v(0))
			g.VPSLLD(operand.U8(16), t.v(0), t.v(0))
		} else {
			g.VCVTPH2PS(operand.Mem{Base: reg.RSI}, t.v(0))
		}
		g.VMOVUPS(t.v(0), operand.Mem{Base: reg.RDI})
	})
	g.done()
}

// cvtQ8 dequantises blocks of 32 int8 values, 32/lanes vectors per block; with half (cvtQ8H) the
// block scales are IEEE halves, widened exactly (bcastScale).
func (g *gen) cvtQ8(half bool) {
	t := g.t
	if half {
		g.fn("cvtQ8H", "func(dst *float32, src *int8, scales *uint16, nblocks int)",
			"cvtQ8 with the block scales as IEEE halves (Matrix.Scales16 in rows), widened exactly:",
			"the values cvtQ8 gives over the same scales in f32.")
	} else {
		g.fn("cvtQ8", "func(dst *float32, src *int8, scales *float32, nblocks int)",
			"Dequantises nblocks blocks of 32 int8 values: dst = float32(q) * scale of the block.")
	}
	nv := 32 / t.lanes
	sc := t.v(nv)
	ss := 4
	label := "cvtq"
	if half {
		ss, label = 2, "cvtqh"
	}
	g.load("dst", reg.RDI, "src", reg.RSI, "scales", reg.RBX, "nblocks", reg.RCX)
	g.loop(label, []step{{reg.RSI, 32}, {reg.RBX, ss}, {reg.RDI, 128}}, 1, func() {
		g.bcastScale(operand.Mem{Base: reg.RBX}, sc, half)
		for i := range nv {
			g.VPMOVSXBD(operand.Mem{Base: reg.RSI, Disp: i * t.lanes}, t.v(i))
		}
		for i := range nv {
			g.VCVTDQ2PS(t.v(i), t.v(i))
		}
		for i := range nv {
			g.VMULPS(sc, t.v(i), t.v(i))
		}
		for i := range nv {
			g.VMOVUPS(t.v(i), operand.Mem{Base: reg.RDI, Disp: i * t.bytes()})
		}
	})
	g.done()
}
