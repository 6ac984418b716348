package cuda

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// sourceHash is the SHA-256 kernels/stamp.sh prints: for each *.cu, *.cuh and nvcc.flags of
// kernels/ in byte order of their names, "== NAME\n" then the file's bytes.
func sourceHash(t *testing.T) string {
	t.Helper()
	var names []string
	for _, pat := range []string{"*.cu", "*.cuh", "nvcc.flags"} {
		m, err := filepath.Glob(filepath.Join("kernels", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			names = append(names, filepath.Base(p))
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("kernels", n))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte("== " + n + "\n"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestPTXCurrent fails when the embedded PTX is stale: the kernel sources or nvcc flags changed
// since kernels/gen.sh wrote it.
func TestPTXCurrent(t *testing.T) {
	stamp, err := os.ReadFile("kernels/kernels.ptx.stamp")
	if err != nil {
		t.Fatal(err)
	}
	var recorded string
	for _, line := range strings.Split(string(stamp), "\n") {
		if v, ok := strings.CutPrefix(line, "sources "); ok {
			recorded = v
		}
	}
	if got := sourceHash(t); got != recorded {
		t.Fatalf("the embedded PTX is stale: kernel sources hash to %s, the PTX was built from %s; run go generate ./inference/cuda (needs nvcc)", got, recorded)
	}
	emu, err := os.ReadFile("emu_kernels.cc")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(emu), "// kernel sources: "+recorded+"\n") {
		t.Fatalf("emu_kernels.cc does not carry the kernel sources' hash %s (go build would not recompile the emulated kernels); run go generate ./inference/cuda", recorded)
	}
	if !strings.Contains(ptxSource, ".target sm_80") {
		t.Fatal("embedded PTX does not target sm_80 (compute_80)")
	}
	if cmd, err := exec.LookPath("bash"); err == nil {
		out, err := exec.Command(cmd, "kernels/stamp.sh").Output()
		if err != nil {
			t.Fatalf("kernels/stamp.sh: %v", err)
		}
		if s := strings.TrimSpace(string(out)); s != recorded {
			t.Fatalf("kernels/stamp.sh prints %s, the stamp records %s", s, recorded)
		}
	}
}

// TestPTXEntries checks the embedded module has every kernel the backend launches.
func TestPTXEntries(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	var have []string
	for _, m := range re.FindAllStringSubmatch(ptxSource, -1) {
		have = append(have, m[1])
	}
	for _, k := range kernelNames {
		if !slices.Contains(have, k) {
			t.Errorf("kernel %s missing from the embedded PTX (entries %v)", k, have)
		}
	}
}

// TestPTXAssembles assembles the embedded PTX with ptxas for sm_80 and sm_90 when ptxas is on
// PATH, and reports registers and spills per kernel; a spill in a kernel fails the test.
func TestPTXAssembles(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("ptxas not on PATH (Debian nvidia-cuda-toolkit)")
	}
	src := filepath.Join(t.TempDir(), "kernels.ptx")
	if err := os.WriteFile(src, []byte(ptxSource), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	spill := regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	regs := regexp.MustCompile(`Used (\d+) registers`)
	for _, arch := range []string{"sm_80", "sm_90"} {
		var out bytes.Buffer
		cmd := exec.Command(ptxas, "-arch="+arch, "-v", src, "-o", os.DevNull)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("ptxas -arch=%s: %v\n%s", arch, err, out.String())
		}
		var name string
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			line := sc.Text()
			if m := entry.FindStringSubmatch(line); m != nil {
				name = m[1]
			}
			if m := spill.FindStringSubmatch(line); m != nil && (m[1] != "0" || m[2] != "0") {
				t.Errorf("%s %s: %s", arch, name, m[0])
			}
			if m := regs.FindStringSubmatch(line); m != nil {
				t.Logf("%s %-12s %s registers", arch, name, m[1])
			}
		}
	}
}
