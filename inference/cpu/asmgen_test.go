package cpu

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu/asmgen/vecgen"
)

// TestAsmGenCurrent checks that the generators in asmgen/ still print what the assembly files
// hold: vecgen's files (the elementwise and matrix-vector kernels of both tiers) byte for byte, gen512.py's and
// gen2.py's whole output verbatim, gentr.py's shuffle sequence line by line.
func TestAsmGenCurrent(t *testing.T) {
	files, err := vecgen.Files()
	if err != nil {
		t.Fatalf("asmgen/vecgen: %v", err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what asmgen/vecgen generates: run go generate ./inference/cpu", name)
		}
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python asmgen generators cannot be checked")
	}
	run := func(gen string) string {
		cmd := exec.Command(py, gen)
		cmd.Dir = "asmgen"
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python3 asmgen/%s: %v", gen, err)
		}
		return strings.Trim(string(out), "\n")
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Clean(name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct{ gen, file string }{{"gen512.py", "kernels_amd64.s"}, {"gen2.py", "kernels_avx2_amd64.s"}} {
		if !strings.Contains(read(c.file), run(c.gen)) {
			t.Errorf("asmgen/%s's output is not in %s: regenerate the section (asmgen/README.md)", c.gen, c.file)
		}
	}
	s := read("kernels_amd64.s")
	for _, line := range strings.Split(run("gentr.py"), "\n") {
		if strings.Contains(line, "LDST") || strings.TrimSpace(line) == "" {
			continue // the stores' addressing was written by hand
		}
		if !strings.Contains(s, line+"\n") {
			t.Errorf("asmgen/gentr.py prints %q, which kernels_amd64.s does not hold", line)
		}
	}
}
