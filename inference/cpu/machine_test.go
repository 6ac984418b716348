package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

func TestUarch(t *testing.T) {
	cases := []struct {
		vendor     string
		fam, model int
		want       string
	}{
		{"AMD", 0x17, 0x31, "zen2"},
		{"AMD", 0x17, 0x01, "other"},
		{"AMD", 0x19, 0x01, "zen3"},
		{"AMD", 0x19, 0x21, "zen3"},
		{"AMD", 0x19, 0x11, "zen4"},
		{"AMD", 0x19, 0x61, "zen4"},
		{"AMD", 0x19, 0xa0, "zen4"},
		{"AMD", 0x1a, 0x02, "zen5"},
		{"AMD", 0x1a, 0x44, "zen5"},
		{"Intel", 6, 0x8f, "intel"},
		{"HygonGenuine", 0x18, 0, "other"},
	}
	for _, c := range cases {
		if got := uarch(c.vendor, c.fam, c.model); got != c.want {
			t.Errorf("uarch(%s, %#x, %#x) = %s, want %s", c.vendor, c.fam, c.model, got, c.want)
		}
	}
}

func TestPlanFor(t *testing.T) {
	cases := []struct {
		m        Machine
		tier     int
		name     string
		prefetch bool
	}{
		{Machine{Uarch: "zen5", Datapath512: 512}, tier512, "zen5", true},
		{Machine{Uarch: "intel", Datapath512: 512}, tier512, "avx512", true},
		{Machine{Uarch: "zen4", Datapath512: 256}, tier512, "zen4", false},
		{Machine{Uarch: "zen4", Datapath512: 512}, tier512, "zen4", false}, // the family decides
		{Machine{Uarch: "other", Datapath512: 256}, tier512, "avx512-256", false},
		{Machine{Uarch: "zen5", Datapath512: 512}, tierAVX2, "avx2", false},
		{Machine{Uarch: "zen3"}, tierAVX2, "avx2", false},
		{Machine{}, tierGo, "go", false},
	}
	for _, c := range cases {
		p := planFor(c.m, c.tier)
		if p.Name != c.name || p.F32Prefetch != c.prefetch {
			t.Errorf("planFor(%+v, %d) = %+v, want %s prefetch %v", c.m, c.tier, p, c.name, c.prefetch)
		}
	}
}

func TestCPU(t *testing.T) {
	m := CPU()
	s := m.String()
	if !strings.Contains(s, m.Uarch) {
		t.Errorf("String() = %q lacks the uarch %q", s, m.Uarch)
	}
	if runtime.GOARCH != "amd64" || !hasCPUID {
		return
	}
	if m.Vendor == "unknown" || m.Vendor == "" || m.Family == 0 {
		t.Errorf("CPU() = %+v: no vendor or family read", m)
	}
	if m.L1D > 0 && (m.L2 > 0 && m.L2 < m.L1D || m.L3 > 0 && m.L3 < m.L2) {
		t.Errorf("CPU() = %+v: caches not growing with the level", m)
	}
	if use512() != (m.Datapath512 > 0) {
		t.Errorf("CPU() = %+v with use512() %v", m, use512())
	}
	if m.Datapath512 != 0 && m.Datapath512 != 256 && m.Datapath512 != 512 {
		t.Errorf("Datapath512 = %d", m.Datapath512)
	}
	t.Logf("%s; plan %s", s, DecodePlan())
}

// TestDot4F32PF: the prefetching f32 kernel is dot4F32's instructions plus prefetches, so its
// results equal dot4F32's to the bit, and with small integers (exact in f32, every partial sum
// exact) they equal the scalar reference.
func TestDot4F32PF(t *testing.T) {
	if !use512() {
		t.Skip("no AVX-512 tier")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, k := range []int{16, 32, 48, 896, 4864} {
		for _, ints := range []bool{false, true} {
			w := make([]float32, 4*k+8192)
			x := make([]float32, k)
			for i := range w {
				w[i] = rng.Float32()*2 - 1
				if ints {
					w[i] = float32(rng.IntN(17) - 8)
				}
			}
			for i := range x {
				x[i] = rng.Float32()*2 - 1
				if ints {
					x[i] = float32(rng.IntN(17) - 8)
				}
			}
			for _, ld := range []int{k, 0} {
				var a, b [4]float32
				dot4F32(&w[0], ld, &x[0], k, &a)
				dot4F32PF(&w[0], ld, &x[0], k, &b)
				for j := range 4 {
					if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
						t.Fatalf("k=%d ld=%d row %d: dot4F32PF %v, dot4F32 %v", k, ld, j, b[j], a[j])
					}
					if !ints {
						continue
					}
					var want float64
					for c := range k {
						want += float64(w[j*ld+c]) * float64(x[c])
					}
					if float64(b[j]) != want {
						t.Fatalf("k=%d ld=%d row %d: %v, want %v", k, ld, j, b[j], want)
					}
				}
			}
		}
	}
}
