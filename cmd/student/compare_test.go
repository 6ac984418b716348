package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestCompareTaskSets: the built `student compare` of eval dirs over different task sets says
// so, with each dir's task count and the EX on the tasks in common; over the same tasks it
// adds nothing.
func TestCompareTaskSets(t *testing.T) {
	bin := testbin.Build(t, ".")
	tmp := t.TempDir()
	eval := func(name, limit string) string {
		dir := filepath.Join(tmp, name)
		code, _, stderr := testbin.Run(t, exec.Command(bin, "eval", "--policy", "oracle", "--tasks", "sample", "--limit", limit, "--out", dir, "--progress", "off"))
		if code != 0 {
			t.Fatalf("eval %s: exit %d: %s", name, code, stderr)
		}
		return dir
	}
	big, small, same := eval("big", "6"), eval("small", "2"), eval("same", "6")
	code, out, stderr := testbin.Run(t, exec.Command(bin, "compare", big, small))
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, stderr)
	}
	t.Logf("%s", out)
	for _, w := range []string{"different task sets", "big 6", "small 2", "2 in common", "EX on the 2 tasks in common: big 100.00% (2/2), small 100.00% (2/2)"} {
		if !strings.Contains(out, w) {
			t.Errorf("compare output lacks %q", w)
		}
	}
	code, out, stderr = testbin.Run(t, exec.Command(bin, "compare", big, same))
	if code != 0 || strings.Contains(out, "note:") || strings.Contains(out, "in common") {
		t.Errorf("compare over the same tasks: exit %d, output %s %s", code, out, stderr)
	}
}

// TestCompareTaskSetsUnjudged: the EX on the tasks in common says how many of their results
// are unjudged (their gold SQL failed).
func TestCompareTaskSetsUnjudged(t *testing.T) {
	tmp := t.TempDir()
	write := func(name string, lines ...string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, evaluate.ResultsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	a := write("a", `{"id":"t/0","index":0,"correct":true}`, `{"id":"t/1","index":1,"correct":false,"gold_error":"error: no such function"}`, `{"id":"t/2","index":2,"correct":true}`)
	b := write("b", `{"id":"t/0","index":0,"correct":true}`, `{"id":"t/1","index":1,"correct":true}`)
	var out strings.Builder
	if err := compareTaskSets(&out, []string{a, b}); err != nil {
		t.Fatal(err)
	}
	if want := "EX on the 2 tasks in common: a 50.00% (1/2, 1 unjudged), b 100.00% (2/2)"; !strings.Contains(out.String(), want) {
		t.Errorf("compare:\n%s\nwant %q", out.String(), want)
	}
}
