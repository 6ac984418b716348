// Package readback checks, for the tests of the commands that write run dirs (`distill env
// serve --log-dir`, `student rollout --log-dir`), that the rest of the toolkit reads such a
// dir: the built `curate build` and `curate stats --json`, and the viewer on both the dir and
// the dataset built from it.
package readback

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/view"
)

// Counts are the overall counts of `curate stats --json`.
type Counts struct {
	Rows, Correct, Converged int
}

// Check builds a dataset from runDir with the built curate binary curateBin and tokenizer,
// has `curate stats --json` count it, and has the viewer open runDir and the dataset; the
// stats must be want and the viewer must list want.Rows rows in each. A command that fails or
// a path the viewer cannot open fails the test; other differences are errors.
func Check(tb testing.TB, curateBin, tokenizer, runDir string, want Counts) {
	tb.Helper()
	ds := filepath.Join(tb.TempDir(), "ds")
	if code, _, stderr := testbin.Run(tb, exec.Command(curateBin, "build", runDir, "--tokenizer", tokenizer, "--out", ds, "--quiet")); code != 0 {
		tb.Fatalf("curate build: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := testbin.Run(tb, exec.Command(curateBin, "stats", "--json", ds))
	if code != 0 {
		tb.Fatalf("curate stats: exit %d\n%s", code, stderr)
	}
	var st struct {
		Overall Counts `json:"overall"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		tb.Fatalf("curate stats --json: %v\n%s", err, stdout)
	}
	if st.Overall != want {
		tb.Errorf("curate stats: %+v; want %+v", st.Overall, want)
	}
	for _, p := range []string{runDir, ds} {
		vs, err := view.Open(context.Background(), view.Options{Paths: []string{p}})
		if err != nil {
			tb.Fatalf("view %s: %v", p, err)
		}
		page, err := vs.Query(view.Query{})
		vs.Close()
		if err != nil || page.Total != want.Rows {
			tb.Errorf("view %s: %v, %d rows; want %d", p, err, page.Total, want.Rows)
		}
	}
}
