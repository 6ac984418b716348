package evaluate_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/evaluate"
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
