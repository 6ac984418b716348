package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/rollout"
)

func TestRolloutUsage(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "--tasks", "sample", "--out", "x.parquet"}, "--model DIR is required"},
		{[]string{"rollout", "--model", model, "--tasks", "sample"}, "--out FILE is required"},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--group", "0"}, "out of range"},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--temperature", "0"}, "repeats one greedy episode"},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--reward-mode", "sum"}, "--reward-mode"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestRolloutCommand runs student rollout on the tiny checkpoint: the file it writes reads back
// with the groups, and its report counts them.
func TestRolloutCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.parquet")
	var stdout, stderr bytes.Buffer
	args := []string{"rollout", "--model", shared.Path(t, "models/tiny-qwen2-f32"), "--tokenizer", shared.Path(t, "tokenizer/qwen2.5"),
		"--tasks", "sample", "--db-root", t.TempDir(), "--limit", "2", "--group", "3", "--max-turns", "1", "--max-tokens", "4", "--seed", "5", "--out", out}
	if code := dispatch(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep rollout.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Episodes != 6 || rep.GeneratedTokens == 0 {
		t.Fatalf("report %s: %v", stdout.String(), err)
	}
	rows, err := rollout.Read(out)
	if err != nil || len(rows) != 6 || rows[5].Group != 1 || rows[5].Sample != 2 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}
