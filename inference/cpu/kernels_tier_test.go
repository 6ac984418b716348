package cpu

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// tierName is the tier of the vector kernel table in use, as Kernels names tiers.
func tierName() string {
	return [...]string{tierGo: "go", tierAVX2: "avx2", tier512: "avx512"}[vec.Load().id]
}

// tiersHere returns the tier this CPU runs with SIMD on and with AVX-512 switched off.
func tiersHere() (best, noAVX512 string) {
	noAVX512 = "go"
	if hasAVX2 {
		noAVX512 = "avx2"
	}
	if hasAVX512 {
		return "avx512", noAVX512
	}
	return noAVX512, noAVX512
}

// onSIMDTiers runs f as a subtest on the AVX-512 tier and on the AVX2 tier (AVX-512 switched off
// for it), those of the two this CPU has. A tier switched off by CHAINEDSQL_NOSIMD or
// CHAINEDSQL_NOAVX512 is skipped; one that another test left switched off fails.
func onSIMDTiers(t *testing.T, f func(t *testing.T, tier string)) {
	t.Helper()
	best, avx2 := tiersHere()
	if avx2 == "go" {
		t.Skip("CPU without AVX2")
	}
	for _, tier := range []string{"avx512", "avx2"} {
		if tier != best && tier != avx2 {
			continue
		}
		t.Run(tier, func(t *testing.T) {
			if tier == "avx2" {
				was := avx512Off.Swap(true)
				defer avx512Off.Store(was)
			}
			if tierName() != tier {
				if !envOn("CHAINEDSQL_NOSIMD") && !envOn("CHAINEDSQL_NOAVX512") {
					t.Fatalf("tier %s in use, want %s: a switch was left set", tierName(), tier)
				}
				t.Skipf("tier %s in use, want %s (switched off by CHAINEDSQL_NOSIMD or CHAINEDSQL_NOAVX512)", tierName(), tier)
			}
			f(t, tier)
		})
	}
}

// envOn reports whether the switch named k is set in the environment as pool.go reads it
// (anything but empty or "0").
func envOn(k string) bool { v := os.Getenv(k); return v != "" && v != "0" }

// TestTierSwitches: the table of vector kernels follows UseSIMD and the AVX-512 switch, and
// agrees with Kernels.
func TestTierSwitches(t *testing.T) {
	check := func(want string) {
		t.Helper()
		if got := tierName(); got != want || !strings.HasPrefix(Kernels(), want) {
			t.Errorf("table of tier %s, Kernels() = %q; want %s", got, Kernels(), want)
		}
	}
	was := UseSIMD(false)
	defer UseSIMD(was)
	avxWas := avx512Off.Swap(false)
	defer avx512Off.Store(avxWas)
	check("go")
	UseSIMD(true)
	best, avx2 := tiersHere()
	check(best)
	avx512Off.Store(true)
	check(avx2)
	UseSIMD(false)
	check("go")
	avx512Off.Store(false)
	UseSIMD(true)
	check(best)
}

// TestTierEnv: CHAINEDSQL_NOSIMD and CHAINEDSQL_NOAVX512 select the table at start-up (a child
// test process reports the tier it started with).
func TestTierEnv(t *testing.T) {
	if os.Getenv("CPU_TIER_CHILD") != "" {
		if got := tierName(); got != os.Getenv("CPU_TIER_CHILD") {
			t.Fatalf("started with the table of tier %s, want %s", got, os.Getenv("CPU_TIER_CHILD"))
		}
		return
	}
	best, avx2 := tiersHere()
	var env []string // this process's environment without the switches
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAINEDSQL_NOSIMD=") && !strings.HasPrefix(kv, "CHAINEDSQL_NOAVX512=") {
			env = append(env, kv)
		}
	}
	for _, c := range []struct{ env, want string }{{"CHAINEDSQL_NOSIMD=1", "go"}, {"CHAINEDSQL_NOAVX512=1", avx2},
		{"CHAINEDSQL_NOAVX512=0", best}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTierEnv$", "-test.count=1")
		cmd.Env = append(env[:len(env):len(env)], c.env, "CPU_TIER_CHILD="+c.want)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", c.env, err, out)
		}
	}
}
