package cpu

import (
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
		m       Machine
		tier    int
		name    string
		kernels string
		rows8   bool
		q8pf    int
	}{
		{Machine{Uarch: "zen5", Datapath512: 512}, tier512, "zen5", "avx512", true, 16384},
		{Machine{Uarch: "intel", Datapath512: 512}, tier512, "avx512", "avx512", false, 8192},
		{Machine{Uarch: "zen4", Datapath512: 256}, tier512, "zen4", "avx512", false, 8192},
		{Machine{Uarch: "zen4", Datapath512: 512}, tier512, "zen4", "avx512", false, 8192}, // the family decides
		{Machine{Uarch: "zen5", Datapath512: 256}, tier512, "avx512-256", "avx512", false, 8192},
		{Machine{Uarch: "zen5", Datapath512: 512}, tierAVX2, "avx2", "avx2", false, 8192},
		{Machine{Uarch: "zen3"}, tierAVX2, "avx2", "avx2", false, 8192},
		{Machine{}, tierGo, "go", "go", false, 8192},
	}
	for _, vnni := range []bool{true, false} {
		for _, c := range cases {
			p := planFor(c.m, c.tier, vnni)
			quarters := c.tier != tierGo // every SIMD class reads decode in quarters
			panels := c.tier == tier512  // and every AVX-512 class holds q8 in panels,
			q8 := quarters               // q8's on AVX-512 with VNNI only
			q8pf := c.q8pf
			if c.tier == tier512 && !vnni {
				panels, q8, q8pf = false, false, q8PrefetchDefault
			}
			if p.Name != c.name || !strings.HasPrefix(p.Kernels, c.kernels) || p.BF16Rows8 != c.rows8 || p.Q8Prefetch != q8pf ||
				p.Q8Quarters != q8 || p.BF16Quarters != quarters || p.F32Quarters != quarters || p.Q8Panels != panels {
				t.Errorf("VNNI %v: planFor(%+v, %d) = %+v, want %s with %s kernels, BF16Rows8 %v, Q8Prefetch %d, Q8Quarters %v, BF16Quarters and F32Quarters %v, Q8Panels %v",
					vnni, c.m, c.tier, p, c.name, c.kernels, c.rows8, q8pf, q8, quarters, panels)
			}
			if s := p.String(); !vnni && c.tier == tier512 && (strings.Contains(s, "q8") || !strings.Contains(s, "bf16 decode in quarters")) {
				t.Errorf("VNNI off: %s: plan %q names a q8 variant or lacks the bf16 quarters", c.name, s)
			}
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
	if hasAVX512 != (m.Datapath512 > 0) {
		t.Errorf("CPU() = %+v with hasAVX512 %v", m, hasAVX512)
	}
	if m.Datapath512 != 0 && m.Datapath512 != 256 && m.Datapath512 != 512 {
		t.Errorf("Datapath512 = %d", m.Datapath512)
	}
	t.Logf("%s; plan %s", s, DecodePlan())
}
