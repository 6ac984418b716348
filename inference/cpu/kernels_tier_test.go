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
