package cpu

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Machine is the CPU as CPUID describes it (read once, on first use): vendor, family and model, the
// microarchitecture they name, the cache sizes and how wide AVX-512 runs in practice. The decode
// plan (Plan) is chosen from it.
type Machine struct {
	Vendor string `json:"vendor"` // "AMD", "Intel", another CPUID vendor string or "unknown"
	Family int    `json:"family"` // display family (base plus extended)
	Model  int    `json:"model"`  // display model (extended model for families 6, 15 and up)
	Uarch  string `json:"uarch"`  // "zen2", "zen3", "zen4", "zen5", "intel", "other"
	L1D    int    `json:"l1d_bytes"`
	L2     int    `json:"l2_bytes"`
	L3     int    `json:"l3_bytes"` // the whole L3 one core sees (0: none reported)
	// Datapath512 is the width in bits an AVX-512 instruction executes at: 512, 256 (split in
	// two, as on Zen 4), 0 where the CPU lacks what the AVX-512 kernels need. Measured when first
	// read (see probeDatapath), whichever tier is switched on.
	Datapath512 int `json:"avx512_datapath_bits"`
}

// String is the machine in one line, as `student bench` logs it.
func (m Machine) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s family %d model %d (%s)", m.Vendor, m.Family, m.Model, m.Uarch)
	fmt.Fprintf(&b, ", L1d %s, L2 %s per core, L3 %s", sizeStr(m.L1D), sizeStr(m.L2), sizeStr(m.L3))
	if m.Datapath512 > 0 {
		fmt.Fprintf(&b, ", AVX-512 at %d bits", m.Datapath512)
	}
	return b.String()
}

func sizeStr(n int) string {
	switch {
	case n == 0:
		return "?"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Plan is the decode kernel choice made for the Machine at start-up: the CPU class it was made
// for and the kernels that class runs.
type Plan struct {
	Name    string `json:"name"`    // "zen5", "zen4", "avx512", "avx512-256", "avx2" or "go"
	Kernels string `json:"kernels"` // Kernels() of the tier in use
	// BF16Rows8: bf16 decode (one input row) takes eight weight rows per kernel call
	// (dot8BF16P, PREFETCHNTA) instead of four (dot4BF16P, PREFETCHT2); the same results. It has
	// no effect while BF16Quarters reads decode in quarters (a range leaves at most three rows
	// beyond its quarters, which go through dot4BF16P); it is the path with quarters off.
	BF16Rows8 bool `json:"bf16_rows8"`
	// Q8Prefetch is how far ahead of its rows, in bytes, q8 decode (one input row) on
	// AVX512_VNNI (dot4Q8VNNI) prefetches: 8 KiB, 16 KiB in the zen5 plan (decode batches keep 8).
	Q8Prefetch int `json:"q8_prefetch_bytes"`
	// Q8Quarters: q8 decode (one input row) on AVX512_VNNI or AVX2 reads each part of rows as
	// four sequential streams, its quarters, four rows a call one from each (dot4Q8VNNIFar, no
	// software prefetch; avx2Dot4Q8IFar, a prefetch per stream), instead of four adjacent rows a
	// call (dot4Q8VNNI; avx2Dot4Q8I); the same results.
	Q8Quarters bool `json:"q8_quarters"`
	// BF16Quarters: bf16 decode (one input row) on AVX-512 or AVX2 reads each part of rows in
	// quarters, four rows a call one from each (dot4BF16PFar, no software prefetch;
	// avx2MvBF16PFar),
	// instead of adjacent rows (dot8BF16P with BF16Rows8, else dot4BF16P; avx2MvBF16P); the same
	// results.
	BF16Quarters bool `json:"bf16_quarters"`
	// F32Quarters: f32 decode (one input row) on AVX-512 or AVX2 reads each part of rows in
	// quarters, four rows a call one from each (dot4F32; avx2MvF32), instead of four adjacent rows
	// a call; the same results.
	F32Quarters bool `json:"f32_quarters"`
	// Q8Panels: q8 weights are held in panels of 32 rows (PackQ8Panels, at load) and decode
	// reads them four panel groups a call (dot128Q8P) on AVX512_VNNI; a different summation
	// order from the row layout's kernels (results agree to float rounding), the same as the
	// matrix-matrix kernel's.
	Q8Panels bool `json:"q8_panels"`
}

// String is the plan in one line, as `student bench` logs it.
func (p Plan) String() string {
	s := p.Name + ": kernels " + p.Kernels
	if p.BF16Rows8 && !p.BF16Quarters {
		s += ", bf16 decode 8 rows"
	}
	if p.Q8Prefetch != q8PrefetchDefault {
		s += fmt.Sprintf(", q8 prefetch %d KiB", p.Q8Prefetch>>10)
	}
	if p.Q8Quarters {
		s += ", q8 decode in quarters"
	}
	if p.BF16Quarters {
		s += ", bf16 decode in quarters"
	}
	if p.F32Quarters {
		s += ", f32 decode in quarters"
	}
	if p.Q8Panels {
		s += ", q8 weights in panels"
	}
	return s
}

// q8PrefetchDefault is dot4Q8VNNI's prefetch distance in every plan but zen5's.
const q8PrefetchDefault = 8192

// q8PfForce overrides the plan's Q8Prefetch for tests and benchmarks where above 0.
var q8PfForce atomic.Int32

// q8Prefetch returns dot4Q8VNNI's prefetch distance (the plan's, or the tests').
func q8Prefetch() int {
	if f := q8PfForce.Load(); f > 0 {
		return int(f)
	}
	return DecodePlan().Q8Prefetch
}

// q8QuartersForce overrides the plan's Q8Quarters for tests, fpQuartersForce its BF16Quarters and
// F32Quarters: 0 follows the plan, 1 on, -1 off.
var q8QuartersForce, fpQuartersForce atomic.Int32

// decodeQuarters reports whether decode of dt weights reads its parts of rows in quarters (the
// plan's choice, or the tests').
func decodeQuarters(dt DType) bool {
	f, p := q8QuartersForce.Load(), DecodePlan()
	if dt != Q8 {
		f = fpQuartersForce.Load()
	}
	if f != 0 {
		return f > 0
	}
	switch dt {
	case Q8:
		return p.Q8Quarters
	case BF16:
		return p.BF16Quarters
	case F32:
		return p.F32Quarters
	}
	return false
}

// rows8Force overrides the plan's BF16Rows8 for tests: 0 follows the plan, 1 on, -1 off.
var rows8Force atomic.Int32

// bf16Rows8 reports whether bf16 decode takes dot8BF16P (the plan's choice, or the tests').
func bf16Rows8() bool {
	if f := rows8Force.Load(); f != 0 {
		return f > 0
	}
	return DecodePlan().BF16Rows8
}

var machineOnce = sync.OnceValue(readMachine)

// CPU returns the Machine, read once.
func CPU() Machine { return machineOnce() }

// plans caches the plan of each tier (the tier can be switched: UseSIMD, CHAINEDSQL_NOAVX512).
var plans [tier512 + 1]atomic.Pointer[Plan]

// DecodePlan returns the plan the kernels follow: chosen once from CPU() for the tier in use.
func DecodePlan() Plan {
	id := vec.Load().id
	if p := plans[id].Load(); p != nil {
		return *p
	}
	p := planFor(CPU(), id, hasVNNI)
	plans[id].Store(&p)
	return p
}

// planFor chooses the plan of machine m with kernel tier tier, AVX512_VNNI there or not (vnni).
// Every class runs its tier's kernels; the variants are the ones measured on Zen 5
// (docs/BENCHMARKS.md). Two kinds:
//
//   - How decode walks memory, which every class with SIMD takes: each part of rows a thread
//     takes read as four sequential streams, its quarters (Q8Quarters, BF16Quarters,
//     F32Quarters; for q8 on AVX-512 with VNNI only), and on AVX512_VNNI q8 weights held in
//     panels (Q8Panels). Four streams per thread keep more DRAM reads in flight, whatever the
//     core: on Zen 5 the layers' products ran 19-29% faster in quarters at two threads (q8
//     22-27%, bf16 19-20%, f32 21-29%) and the panels decode q8 10-17% faster; on an AVX2-only Zen 3, quarters 8-39%; with AVX-512
//     switched off on Zen 5, 24-50%. The panels also take a quarter of the row kernel's
//     instructions per weight and no horizontal sums, which matters most where a zmm
//     instruction costs two (Zen 4's 256-bit datapath). On Zen 4 (family 25 model 17, two
//     threads) the quarters ran q8 1.16-1.20×, bf16 1.05-1.21× and f32 1.13-1.14× as fast as
//     adjacent rows, and the panels 0.99-1.02× the rows; on Intel (family 6 model 167, AVX-512 at
//     512 bits, two threads) the quarters ran q8 1.02×, bf16 1.06× and f32 1.03×, the panels
//     1.15×, eight bf16 rows 0.54× (docs/BENCHMARKS.md, "Issue 30 on Intel"). Both
//     variants give the same bits as the paths they replace but for the panels' summation
//     order (Q8Panels), so a class can take or drop them on measurement alone.
//   - Tweaks of the row kernels measured on Zen 5, which only the zen5 class takes: bf16
//     decode on eight rows per call with PREFETCHNTA (BF16Rows8), 10-19% faster there than four
//     rows with PREFETCHT2 (on Zen 4 0.65-0.80× as fast: the zen4 class leaves it), and q8 row
//     decode prefetching 16 KiB ahead instead of 8 (Q8Prefetch), even to 5% faster (on Zen 4
//     even). With the quarters and panels on, BF16Rows8 changes
//     nothing and Q8Prefetch reaches only q8 rows outside panels and beyond a range's quarters.
//
// (An f32 decode kernel with software prefetch, 8 KiB ahead or the next group of four rows, was
// 5-15% slower than the plain one on Zen 5, so no class has it.)
func planFor(m Machine, tier int, vnni bool) Plan {
	p := Plan{Kernels: tierKernels(tier), Q8Prefetch: q8PrefetchDefault}
	switch {
	case tier == tierGo:
		p.Name = "go"
		return p
	case tier == tierAVX2:
		p.Name = "avx2"
	case m.Uarch == "zen4":
		p.Name = "zen4"
	case m.Datapath512 == 256:
		p.Name = "avx512-256"
	case m.Uarch == "zen5":
		p.Name = "zen5"
		p.BF16Rows8 = true
		if vnni {
			p.Q8Prefetch = 16384
		}
	default:
		p.Name = "avx512"
	}
	// How decode walks memory, every SIMD class; q8's on AVX-512 are VNNI kernels' (without VNNI
	// q8 is widened).
	p.BF16Quarters, p.F32Quarters = true, true
	p.Q8Quarters = tier == tierAVX2 || vnni
	p.Q8Panels = tier == tier512 && vnni
	return p
}

// readMachine reads the Machine with CPUID.
func readMachine() Machine {
	m := Machine{Vendor: "unknown", Uarch: "other"}
	if !hasCPUID {
		return m
	}
	maxLeaf, b, c, d := cpuid(0, 0)
	v := string(le32(b)) + string(le32(d)) + string(le32(c))
	switch v {
	case "AuthenticAMD":
		m.Vendor = "AMD"
	case "GenuineIntel":
		m.Vendor = "Intel"
	default:
		m.Vendor = strings.TrimSpace(v)
	}
	if maxLeaf >= 1 {
		a, _, _, _ := cpuid(1, 0)
		fam := int(a>>8) & 0xf
		model := int(a>>4) & 0xf
		if fam == 0xf {
			fam += int(a>>20) & 0xff
		}
		if fam == 6 || fam >= 0xf {
			model += int(a>>16) & 0xf << 4
		}
		m.Family, m.Model = fam, model
	}
	m.Uarch = uarch(m.Vendor, m.Family, m.Model)
	m.L1D, m.L2, m.L3 = caches(m.Vendor, maxLeaf)
	if hasAVX512 {
		m.Datapath512 = probeDatapath()
	}
	return m
}

// le32 returns the four bytes of v, low first (CPUID's vendor string order).
func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// uarch names the microarchitecture of an AMD family and model ("intel" for Intel: the
// kernels treat its AVX-512 and AVX2 parts by their features).
func uarch(vendor string, fam, model int) string {
	switch {
	case vendor == "Intel":
		return "intel"
	case vendor != "AMD":
		return "other"
	case fam == 0x17 && model >= 0x30:
		return "zen2"
	case fam == 0x19 && (model >= 0x10 && model <= 0x1f || model >= 0x60 && model <= 0x7f || model >= 0xa0 && model <= 0xaf):
		return "zen4"
	case fam == 0x19:
		return "zen3"
	case fam == 0x1a:
		return "zen5"
	}
	return "other"
}

// caches returns the L1 data, L2 and L3 sizes from the deterministic cache parameters leaf
// (4 on Intel, 0x8000001D on AMD; the same layout): for each cache, ways × partitions × line
// size × sets.
func caches(vendor string, maxLeaf uint32) (l1d, l2, l3 int) {
	leaf := uint32(4)
	if vendor == "AMD" {
		if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt < 0x8000001d {
			return 0, 0, 0
		}
		leaf = 0x8000001d
	} else if maxLeaf < 4 {
		return 0, 0, 0
	}
	for i := uint32(0); i < 16; i++ {
		a, b, c, _ := cpuid(leaf, i)
		typ, level := a&0x1f, (a>>5)&7
		if typ == 0 {
			break
		}
		size := int((b>>22)+1) * int((b>>12)&0x3ff+1) * int(b&0xfff+1) * int(c+1)
		switch {
		case level == 1 && typ == 1:
			l1d = size
		case level == 2 && typ != 2:
			l2 = size
		case level == 3 && typ != 2:
			l3 = size
		}
	}
	return l1d, l2, l3
}

// probeDatapath measures how wide AVX-512 runs: the same number of independent register FMAs on
// zmm and on ymm registers, best of several timings each. Where a zmm instruction takes as long
// as a ymm one (Zen 5, Intel with two 512-bit FMA units) it runs at 512 bits; where it takes
// about twice as long (Zen 4, which splits it into two 256-bit halves) at 256.
func probeDatapath() int {
	best := func(f func(n int)) time.Duration {
		var min time.Duration
		for range 9 {
			t := time.Now()
			f(4096) // 49,152 FMAs: about 25 µs at two a cycle
			if d := time.Since(t); min == 0 || d < min {
				min = d
			}
		}
		return min
	}
	t256 := best(fmaLoop256)
	t512 := best(fmaLoop512)
	if float64(t512) < 1.4*float64(t256) {
		return 512
	}
	return 256
}
