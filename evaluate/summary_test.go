package evaluate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/evaluate"
)

// TestReadOlderSummary reads a summary.json of the layout before rows_with_violation became a
// count (the share under that name, no cache-hit figures), as student compare and curate view
// do, and compares it with itself.
func TestReadOlderSummary(t *testing.T) {
	dir := t.TempDir()
	old := `{"protocol": "chained-sql/v1", "policy": "student", "policy_spec": "student", "tasks": "bird:dev.json",
 "dialect": "sqlite", "samples": 1, "temperature": 0, "max_turns": 5, "loaded": 8, "counts": {"simple": 8},
 "complete": true, "pending": 0, "failed": 0,
 "eval": {"n": 8, "correct": 4, "ex": 0.5, "by_difficulty": [{"difficulty": "simple", "n": 8, "correct": 4, "ex": 0.5}],
  "convergence": 1, "exec_ok": 1, "format_violation_rate": 0.1, "rows_with_violation": 0.375, "avg_turns": 2},
 "tokens": {"prompt_tokens": 800, "completion_tokens": 80},
 "throughput": {"trajectories": 8, "seconds": 2, "tokens": 880, "tasks_per_sec": 4, "tokens_per_sec": 440},
 "turn_time": {"turns": 16}, "updated": "2026-11-01T00:00:00Z"}
`
	if err := os.WriteFile(filepath.Join(dir, evaluate.SummaryFile), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := evaluate.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Eval.RowsWithViolation != 3 || s.Eval.RowsWithViolationShare != 0.375 || s.Eval.EX != 0.5 {
		t.Errorf("eval %+v: want 3 rows with a violation, share 0.375", s.Eval)
	}
	if th := s.Throughput; th.TokensPerSec != 440 || th.CachedTokens != 0 || th.ComputedTokensPerSec != 0 {
		t.Errorf("throughput %+v", th)
	}
	var b strings.Builder
	if err := evaluate.Compare(&b, []string{dir, dir}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "EX") || !strings.Contains(b.String(), "cache-hit tokens") {
		t.Errorf("compare:\n%s", b.String())
	}
}
