//go:build faults

package evaluate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// Crash safety of evaluate.Run (issue 8): run with `go test -tags faults -run '^TestFaults' ./evaluate`.

const (
	evalKills   = 24
	evalSamples = 20
	evalDelay   = 4 * time.Millisecond
)

// slowOracle is the oracle with a delay before each reply, so that an eval lasts long enough
// to be killed at many different moments.
type slowOracle struct{}

func (slowOracle) ForTask(t datasets.Task, d datasets.Dialect) (chat.Policy, error) {
	p, err := episode.Oracle{}.ForTask(t, d)
	if err != nil {
		return nil, err
	}
	return chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, o chat.Options) (chat.Reply, error) {
		select {
		case <-time.After(evalDelay):
		case <-ctx.Done():
			return chat.Reply{}, ctx.Err()
		}
		return p.Chat(ctx, msgs, o)
	}), nil
}

func (slowOracle) Chat(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
	return chat.Reply{}, errors.New("slow oracle: needs the task")
}

func killEval(tb testing.TB, dev, dir string) (*evaluate.Summary, error) {
	h := &episode.PolicyHandle{Name: episode.OracleName, Spec: episode.OracleName, Model: episode.OracleName, Policy: slowOracle{}}
	return runEval(tb, context.Background(), dir, "bird:"+dev, loadBIRD(tb, dev), h, func(c *evaluate.Config) { c.Samples = evalSamples })
}

// TestFaultsEvalKillChild is the child of TestFaultsEvalKill (it does nothing in a normal run).
func TestFaultsEvalKillChild(t *testing.T) {
	dev, dir := os.Getenv("EVAL_KILL_DEV"), os.Getenv("EVAL_KILL_DIR")
	if dev == "" || dir == "" {
		t.Skip("child of TestFaultsEvalKill only")
	}
	if _, err := killEval(t, dev, dir); err != nil {
		t.Fatal(err)
	}
}

// TestFaultsEvalKill SIGKILLs a process running evaluate.Run at random moments on a small
// BIRD-layout dataset, the next run resuming what the killed ones did. After each kill every
// derived file present parses whole; a run that finishes before its kill, and the final
// rerun, give results.jsonl and predict_dev.json are byte-identical to an uninterrupted run's,
// summary.json equal but for its times, trajectories.jsonl holds each key once, and no temporary
// file is left.
func TestFaultsEvalKill(t *testing.T) {
	if os.Getenv("EVAL_KILL_DIR") != "" {
		t.Skip("in the child")
	}
	dev := writeBIRD(t, evalEntries)
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := killEval(t, dev, ref); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "eval")
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFaultsEvalKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EVAL_KILL_DEV="+dev, "EVAL_KILL_DIR="+dir)
		return cmd
	}
	// Uncut child runs give the process's duration, the shortest of three (the first may run
	// while go test still compiles other packages); they are then thrown away.
	full := testbin.Shortest(3, func() {
		if b, err := child().CombinedOutput(); err != nil {
			t.Fatalf("uncut child: %v\n%s", err, b)
		}
		sameEval(t, "uncut child", dir, ref)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	})

	rng := rand.New(rand.NewPCG(8, 20))
	kills, finished := 0, 0
	for attempt := 0; kills < evalKills && attempt < 3*evalKills; attempt++ {
		cmd := child()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(full) * 5 / 4)))
		cmd.Process.Kill()
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && !ee.Exited() {
			kills++
			derivedWhole(t, dir)
			continue
		}
		// The run finished before the kill: it must be the uninterrupted run's result. Start
		// again from nothing, since a finished eval dir has nothing left to kill.
		finished++
		sameEval(t, "a run that finished between kills", dir, ref)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if kills < evalKills {
		t.Fatalf("only %d runs were killed before they finished", kills)
	}
	if b, err := child().CombinedOutput(); err != nil {
		t.Fatalf("final rerun: %v\n%s", err, b)
	}
	sameEval(t, "final rerun after the kills", dir, ref)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left in the eval dir", e.Name())
		}
	}
	t.Logf("%d tasks × %d samples, uncut child %v; %d kills (%d runs finished first); rerun identical", len(evalEntries), evalSamples, full.Round(time.Millisecond), kills, finished)
}

// derivedWhole checks that each derived file present decodes completely.
func derivedWhole(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{evaluate.SummaryFile, evaluate.PredictFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s after a kill is not whole: %v", name, err)
		}
	}
	for _, name := range []string{evaluate.ResultsFile, evaluate.TrajectoriesFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s after a kill ends in a torn line", name)
		}
		for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			if len(b) > 0 && !json.Valid(line) {
				t.Fatalf("%s after a kill: line %d is not JSON", name, i+1)
			}
		}
	}
}

// sameEval compares the eval dir got with want: results.jsonl and predict_dev.json byte for
// byte, summary.json without its times, trajectories.jsonl by key.
func sameEval(t *testing.T, what, got, want string) {
	t.Helper()
	for _, name := range []string{evaluate.ResultsFile, evaluate.PredictFile} {
		g, err := os.ReadFile(filepath.Join(got, name))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		w, err := os.ReadFile(filepath.Join(want, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: %s differs from the uninterrupted run's (%d bytes, want %d)", what, name, len(g), len(w))
		}
	}
	gs, ws := summaryContent(t, got), summaryContent(t, want)
	if gs != ws {
		t.Fatalf("%s: summary.json differs:\n%s\nwant\n%s", what, gs, ws)
	}
	keys := func(dir string) map[string]int {
		m := map[string]int{}
		for _, rec := range readJSONL(t, filepath.Join(dir, evaluate.TrajectoriesFile)) {
			m[rec["key"].(string)]++
		}
		return m
	}
	gk, wk := keys(got), keys(want)
	if len(gk) != len(wk) || len(wk) != len(evalEntries)*evalSamples {
		t.Fatalf("%s: %d trajectory keys, want %d", what, len(gk), len(wk))
	}
	for k, n := range gk {
		if n != 1 || wk[k] != 1 {
			t.Fatalf("%s: key %s %d times in trajectories.jsonl", what, k, n)
		}
	}
}

// summaryContent is summary.json without the fields that describe one invocation's timing.
func summaryContent(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, evaluate.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"updated", "throughput", "turn_time"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("summary.json has no %q: the test's idea of the format is out of date", k)
		}
		delete(m, k)
	}
	out, _ := json.MarshalIndent(m, "", " ")
	return string(out)
}

// TestFaultsEvalStaleTemp puts in an eval dir the temporary files that a kill while the derived
// files are being written leaves (createAtomic's ".NAME.tmp-*", half-written): the rerun must
// remove them and give the uninterrupted run's files. The kill loop above lands in that
// window only by chance (it lasts a few milliseconds), so this case is set up directly.
func TestFaultsEvalStaleTemp(t *testing.T) {
	dev := writeBIRD(t, evalEntries)
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := killEval(t, dev, ref); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "eval")
	if _, err := killEval(t, dev, dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{evaluate.ResultsFile, evaluate.PredictFile, evaluate.SummaryFile, evaluate.TrajectoriesFile} {
		stale := filepath.Join(dir, "."+name+".tmp-2718281828")
		if err := os.WriteFile(stale, []byte(`{"half": "writ`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := killEval(t, dev, dir); err != nil {
		t.Fatal(err)
	}
	sameEval(t, "rerun over stale temporary files", dir, ref)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("stale temporary file %s not removed by the rerun", e.Name())
		}
	}
}
