package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestSalvageDamagedRun: a run dir that an earlier distill damaged, with a journaled line of
// 70 MiB (a statement's error stored whole, over the readers' 64 MiB limit) and a journaled
// line that is not JSON, through the built curate binary. A plain build refuses it, naming the
// line and --salvage; a --salvage build writes every other trajectory and lists both lines
// (stderr, stats.json, the card); curate view serves the other trajectories and names the
// damaged lines. distill resumes the run dir without touching the damaged
// lines, reporting them, and its summary counts the rest.
func TestSalvageDamagedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the curate binary on a 70 MiB line")
	}
	tokPath := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	bin := testbin.Build(t, ".")
	tmp := t.TempDir()
	cfg := oracleRun(t, filepath.Join(tmp, "run"), 6, 1)
	run, tasks := cfg.Dir, cfg.Tasks

	// Damage it as an earlier version would have: two more lines in the last shard, journaled.
	shards, err := rundir.ShardFiles(run)
	if err != nil || len(shards) == 0 {
		t.Fatal(shards, err)
	}
	name := shards[len(shards)-1]
	shardPath := filepath.Join(run, rundir.ShardsDir, name)
	data, err := os.ReadFile(shardPath)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	goodLines := strings.Count(string(data), "\n")
	var big map[string]any
	if err := json.Unmarshal([]byte(first), &big); err != nil {
		t.Fatal(err)
	}
	big["key"] = "damaged|big"
	turn := big["turns"].([]any)[0].(map[string]any)
	turn["exec"] = map[string]any{"outcome": "error", "error": "invalid input syntax for type integer: \"" + strings.Repeat("9", 70<<20) + "\"", "total": 0, "duration_ns": 1}
	bigLine, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(bigLine) <= rundir.MaxLine {
		t.Fatalf("the long line has %d bytes, not over %d", len(bigLine), rundir.MaxLine)
	}
	f, err := os.OpenFile(shardPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	j, err := os.OpenFile(filepath.Join(run, rundir.JournalFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	end := int64(len(data))
	for i, line := range [][]byte{bigLine, []byte(`{"key": "damaged|garbage", "turns": [}` + "\x00garbage")} {
		if _, err := f.Write(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
		end += int64(len(line)) + 1
		key := []string{"damaged|big", "damaged|garbage"}[i]
		e, _ := json.Marshal(rundir.JournalEntry{Key: key, Task: key, Teacher: episode.OracleName, Dialect: datasets.SQLite, Sample: 0, Shard: name, End: end})
		if _, err := j.Write(append(e, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	j.Close()
	bigLine, data = nil, nil

	build := func(args ...string) (int, string, string) {
		return testbin.Run(t, exec.Command(bin, append([]string{"build", run, "--tokenizer", tokPath, "--quiet"}, args...)...))
	}
	code, stdout, stderr := build("--out", filepath.Join(tmp, "plain"))
	wantLine := fmt.Sprintf("%s line %d", shardPath, goodLines+1)
	if code != 1 || !strings.Contains(stderr, wantLine) || !strings.Contains(stderr, "--salvage") || !strings.Contains(stderr, "damaged|big") {
		t.Fatalf("plain build: exit %d, want 1 naming %q and --salvage\n%s\n%s", code, wantLine, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(tmp, "plain")); !os.IsNotExist(err) {
		t.Fatalf("the refused build left its output: %v", err)
	}

	ds := filepath.Join(tmp, "salvaged")
	code, stdout, stderr = build("--salvage", "--out", ds)
	if code != 0 {
		t.Fatalf("salvage build: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("salvage: skipped run %s line %d", name, goodLines+1),
		"key damaged|big): the line is longer than the readers' limit",
		fmt.Sprintf("salvage: skipped run %s line %d", name, goodLines+2),
		"key damaged|garbage): not a trajectory",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("salvage build's stderr lacks %q:\n%s", want, stderr)
		}
	}
	if len(stderr) > 64<<10 {
		t.Errorf("salvage build wrote %d bytes to stderr", len(stderr))
	}
	rep, err := curate.ReadReport(ds)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != len(tasks) || len(rep.Salvaged) != 2 || rep.Salvaged[0].Key != "damaged|big" || rep.Salvaged[0].Line != goodLines+1 ||
		rep.Salvaged[1].Key != "damaged|garbage" || rep.Salvaged[1].File != name {
		t.Fatalf("salvaged build: %d rows, salvaged %+v", rep.Rows, rep.Salvaged)
	}
	card, err := os.ReadFile(filepath.Join(ds, curate.CardFile))
	if err != nil || !strings.Contains(string(card), "Salvaged (`--salvage`): 2 damaged run-dir lines") {
		t.Errorf("the card does not mention the salvaged lines: %v", err)
	}

	// curate view serves the rest, the damaged lines as the run's error line.
	cmd := exec.Command(bin, "view", run, "--addr", "127.0.0.1:0")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`: (\d+) rows of .*serving (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(start)
	if err != nil || m == nil || m[1] != fmt.Sprint(len(tasks)) {
		t.Fatalf("curate view start line %q: %v", start, err)
	}
	resp, err := http.Get(m[2] + "/api/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Paths []struct {
			Rows  int    `json:"rows"`
			Error string `json:"error"`
		} `json:"paths"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || len(info.Paths) != 1 || info.Paths[0].Rows != len(tasks) || !strings.HasPrefix(info.Paths[0].Error, "skipped 2 damaged lines: ") {
		t.Fatalf("curate view info: %+v, %v", info, err)
	}

	// distill resumes: nothing to redo, the damaged lines stay as they are and are reported.
	before, _ := os.Stat(shardPath)
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(shardPath)
	if res.Done != 0 || before.Size() != after.Size() || len(res.BadLines) != 2 || res.Summary[0].Trajectories != len(tasks) {
		t.Fatalf("resume: done %d, shard %d → %d bytes, bad lines %v, summary %+v", res.Done, before.Size(), after.Size(), res.BadLines, res.Summary)
	}
}

// oracleRun distils the first n tasks of the sample (all of them when n is 0) with the oracle
// on SQLite, samples times each, into dir, and returns the run's config (to resume it).
func oracleRun(t *testing.T, dir string, n, samples int) distill.RunConfig {
	t.Helper()
	tasks, err := datasets.LoadTasks("sample", "")
	if err != nil {
		t.Skipf("the sample benchmark does not load: %v", err)
	}
	if n > 0 {
		tasks = tasks[:n]
	}
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	cfg := distill.RunConfig{
		Dir: dir, Tasks: tasks, TaskSpec: "sample", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{{Name: episode.OracleName, Spec: episode.OracleName, Policy: episode.Oracle{}}},
		Samples:  samples, Opener: conn, Toolkit: "test",
	}
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}
