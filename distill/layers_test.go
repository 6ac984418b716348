package distill_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNothingAboveTheRunDirImportsTheRunner: the packages that read, score, show or step
// episodes take the trajectory and the run-dir format from rundir, the protocol from protocol
// and the episode from episode; none of them links the resumable runner (only cmd/ and
// evaluate/evalrun do).
func TestNothingAboveTheRunDirImportsTheRunner(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	const mod = "github.com/chainedsql/chainedsql/"
	pkgs := []string{"protocol", "rundir", "episode", "rewards", "curate", "stats", "evaluate", "view", "env", "rollout", "turns"}
	for _, p := range pkgs {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", mod+p).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", p, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == mod+"distill" || strings.HasPrefix(dep, mod+"distill/") {
				t.Errorf("%s imports %s", p, dep)
			}
		}
	}
}
