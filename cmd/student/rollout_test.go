package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/internal/testbin/readback"
	"github.com/chainedsql/chainedsql/rollout"
	"github.com/chainedsql/chainedsql/rundir"
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
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--out-dir", "."}, "--out-dir is for --serve"},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--serve", "127.0.0.1:0"}, "--serve needs --out-dir DIR or --out FILE"},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--subset", "test"}, `--subset "test": want train or val`},
		{[]string{"rollout", "--model", model, "--tasks", "sample", "--out", "x", "--val-fraction", "2"}, "--val-fraction"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestRolloutCommand runs student rollout on the tiny checkpoint: the file it writes reads back
// with the groups, and its report counts them. An --out that is a file other than a rollout
// table is refused before the rollout starts, and left as it was.
func TestRolloutCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.parquet")
	var stdout, stderr bytes.Buffer
	args := []string{"rollout", "--model", shared.Path(t, "models/tiny-qwen2-f32"), "--tokenizer", shared.Path(t, "tokenizer/qwen2.5"),
		"--tasks", "sample", "--db-root", t.TempDir(), "--limit", "2", "--group", "3", "--max-turns", "1", "--max-tokens", "4", "--seed", "5", "--out", out}
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := dispatch(context.Background(), append(slices.Clone(args), "--out", notes), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "not a rollout table") {
		t.Fatalf("--out over a text file: exit %d: %s", code, stderr.String())
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "keep me\n" {
		t.Fatalf("%s: %q, %v", notes, b, err)
	}
	stdout.Reset()
	stderr.Reset()
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
	if model := shared.Path(t, "models/tiny-qwen2-f32"); rows[0].WeightsVersion != 1 || rows[0].WeightsPath != model {
		t.Fatalf("rows name weights version %d from %q, want 1 from %s", rows[0].WeightsVersion, rows[0].WeightsPath, model)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutLogDir runs the built `student rollout --log-dir` twice on one dir (seeds 5 and 6),
// checks that a repeat of seed 5 and a rollout of another group size are refused, and that the
// built `curate build` and `curate stats` and the viewer read the dir with the counts of the two
// Parquet tables.
func TestRolloutLogDir(t *testing.T) {
	bin := testbin.Build(t, ".")
	curateBin := testbin.Build(t, "../curate")
	tok := shared.Path(t, "tokenizer/qwen2.5")
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	roll := func(seed, group string, out string) (int, string) {
		code, _, stderr := testbin.Run(t, exec.Command(bin, "rollout", "--model", shared.Path(t, "models/tiny-qwen2-f32"), "--tokenizer", tok,
			"--tasks", "sample", "--db-root", filepath.Join(tmp, "db"), "--limit", "2", "--group", group, "--max-turns", "1", "--max-tokens", "4",
			"--seed", seed, "--out", out, "--log-dir", logDir))
		return code, stderr
	}
	var played []rollout.Row
	for _, seed := range []string{"5", "6"} {
		out := filepath.Join(tmp, "r"+seed+".parquet")
		if code, stderr := roll(seed, "3", out); code != 0 {
			t.Fatalf("seed %s: exit %d: %s", seed, code, stderr)
		}
		rows, err := rollout.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		played = append(played, rows...)
	}
	if code, stderr := roll("5", "3", filepath.Join(tmp, "again.parquet")); code != 1 || !strings.Contains(stderr, "seed 5") {
		t.Errorf("seed 5 again: exit %d: %s", code, stderr)
	}
	if code, stderr := roll("7", "2", filepath.Join(tmp, "g2.parquet")); code != 1 || !strings.Contains(stderr, "samples") {
		t.Errorf("--group 2 on a dir of groups of 3: exit %d: %s", code, stderr)
	}

	correct, converged := 0, 0
	keys := map[string]bool{}
	for _, r := range played {
		if r.Correct {
			correct++
		}
		if r.Converged {
			converged++
		}
		keys[rollout.Key(r.TaskID, r.Seed, int(r.Group), int(r.Sample))] = true
	}
	n := 0
	err := rundir.ReadRun(logDir, func(tr *rundir.Trajectory) error {
		if !keys[tr.Key] || tr.Teacher != rollout.LogTeacher || tr.Model == "" {
			return fmt.Errorf("trajectory %s (teacher %s, model %q) is not one of the rows played", tr.Key, tr.Teacher, tr.Model)
		}
		n++
		return nil
	})
	if err != nil || n != 12 || len(played) != 12 {
		t.Fatalf("log: %v; %d trajectories of %d rows, want 12", err, n, len(played))
	}

	readback.Check(t, curateBin, tok, logDir, readback.Counts{Rows: 12, Correct: correct, Converged: converged})
}
