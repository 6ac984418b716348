package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
