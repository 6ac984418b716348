package evaluate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/evaluate/evalrun"
	"github.com/chainedsql/chainedsql/rundir"
)

// recorder answers with the gold SQL and records the order of the questions' first turns.
type recorder struct {
	*scripted
	mu    sync.Mutex
	order []string
}

func (r *recorder) Chat(ctx context.Context, msgs []chat.Message, o chat.Options) (chat.Reply, error) {
	if len(msgs) == 2 {
		r.mu.Lock()
		r.order = append(r.order, question(msgs))
		r.mu.Unlock()
	}
	return r.scripted.Chat(ctx, msgs, o)
}

// TestEpisodesGroupedByDatabase: with tasks of two databases interleaved, the episodes run one
// database's tasks after the other's (each in task order), so a student keeps one schema prompt
// in its KV cache at a time, while results.jsonl keeps the task order.
func TestEpisodesGroupedByDatabase(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	rec := &recorder{scripted: newScripted(evalEntries, nil)}
	dir := t.TempDir()
	if _, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("rec", rec), func(c *evaluate.Config) { c.Batch = 1 }); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, db := range []string{"shop", "school"} {
		for _, e := range evalEntries {
			if e.DBID == db {
				want = append(want, e.Question)
			}
		}
	}
	if !slices.Equal(rec.order, want) {
		t.Fatalf("episode order\n got %q\nwant %q", rec.order, want)
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Index != evalEntries[i].QuestionID {
			t.Fatalf("results.jsonl line %d is task %d: not in task order", i, r.Index)
		}
	}
}

// orderedDigest is manifest.tasks.digest as run dirs made before it ignored the task order hold
// it: the first 16 hex digits of SHA-256 over the task ids in order, each followed by a 0 byte.
func orderedDigest(tasks []datasets.Task) string {
	h := sha256.New()
	for _, t := range tasks {
		h.Write([]byte(t.ID))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// setDigest rewrites dir's manifest.tasks.digest.
func setDigest(t *testing.T, dir, digest string) {
	t.Helper()
	path := filepath.Join(dir, rundir.ManifestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["tasks"].(map[string]any)["digest"] = digest
	data, _ = json.Marshal(m)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResumeWhateverTheTaskOrder: an eval dir resumes on the same tasks whatever their order in
// the task file, including eval dirs whose manifest holds the digest of the ids in order that
// earlier versions wrote (over the task file's order, or, for a few days, over the order grouped
// by database) on a task file whose databases are interleaved; another task set is still refused.
func TestResumeWhateverTheTaskOrder(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	grouped := slices.Clone(tasks)
	slices.SortStableFunc(grouped, func(a, b datasets.Task) int { return strings.Compare(b.DBID, a.DBID) }) // shop, then school
	reversed := slices.Clone(tasks)
	slices.Reverse(reversed)
	for name, c := range map[string]struct {
		digest string // "" keeps what the run wrote
		tasks  []datasets.Task
	}{
		"task file order": {orderedDigest(tasks), tasks},
		"grouped order":   {orderedDigest(grouped), tasks},
		"reordered file":  {"", reversed},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			p := newScripted(evalEntries, nil)
			p.before = func(n int) {
				if n == 4 {
					cancel()
				}
			}
			if _, err := runEval(t, ctx, dir, "bird:"+path, tasks, handle("scripted", p), func(c *evaluate.Config) { c.Batch = 1 }); !errors.Is(err, evalrun.ErrInterrupted) {
				t.Fatalf("first run: %v, want ErrInterrupted", err)
			}
			if c.digest != "" {
				setDigest(t, dir, c.digest)
			}
			s, err := runEval(t, context.Background(), dir, "bird:"+path, c.tasks, handle("scripted", newScripted(evalEntries, nil)), nil)
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if !s.Complete || s.Eval.N != len(tasks) || s.Throughput.Trajectories >= len(tasks) {
				t.Fatalf("resume: complete %v, %d results, %d trajectories this time", s.Complete, s.Eval.N, s.Throughput.Trajectories)
			}
			if _, err := runEval(t, context.Background(), dir, "bird:"+path, tasks[1:], handle("scripted", newScripted(evalEntries, nil)), nil); err == nil || !strings.Contains(err.Error(), "different run") {
				t.Fatalf("resume on another task set: %v", err)
			}
		})
	}
}
