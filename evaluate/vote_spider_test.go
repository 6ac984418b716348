package evaluate_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/judge"
)

// variants answers the n-th conversation of a question with its n-th variant and then repeats
// itself, so every sample converges on its own SQL.
type variants struct {
	mu   sync.Mutex
	seen map[string]int
	sqls map[string][]string
}

func (v *variants) Chat(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chat.RoleAssistant {
			return chat.Reply{Content: msgs[i].Content, FinishReason: chat.FinishStop}, nil
		}
	}
	q := question(msgs)
	v.mu.Lock()
	n := v.seen[q]
	v.seen[q]++
	v.mu.Unlock()
	return chat.Reply{Content: sqlReply(v.sqls[q][n%len(v.sqls[q])]), FinishReason: chat.FinishStop}, nil
}

func TestVoteOverExecutedResults(t *testing.T) {
	entries := []birdEntry{evalEntries[1], evalEntries[7]}
	entries[0].QuestionID, entries[1].QuestionID = 0, 1
	path := writeBIRD(t, entries)
	tasks := loadBIRD(t, path)
	sqls := map[string][]string{
		// Samples 1 and 2 agree with the gold (different SQL, same rows): the vote is right.
		entries[0].Question: {"SELECT name FROM items", "SELECT name FROM items WHERE cat = 'fruit' ORDER BY id", entries[0].SQL},
		// Samples 0 and 1 agree on a wrong answer: the vote is wrong, though sample 2 is right.
		entries[1].Question: {"SELECT name FROM items", "SELECT name FROM items ORDER BY id DESC", entries[1].SQL},
	}
	for _, vote := range []bool{false, true} {
		p := &variants{seen: map[string]int{}, sqls: sqls}
		dir := t.TempDir()
		s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("variants", p), func(c *evaluate.Config) {
			c.Samples, c.Vote, c.Batch = 3, vote, 1
			c.Episode.Chat.Temperature = chat.Float(0.7)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !vote {
			if s.Eval.N != 6 || !near(s.Eval.EX, 0.5) {
				t.Errorf("every sample scored: %d results, EX %g, want 6 and 0.5", s.Eval.N, s.Eval.EX)
			}
			continue
		}
		res, err := evaluate.ReadResults(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 2 || !res[0].Correct || res[0].Votes != 2 || res[0].Samples != 3 || res[0].Sample != 1 ||
			res[1].Correct || res[1].Votes != 2 || res[1].Sample != 0 || !near(s.Eval.EX, 0.5) || !s.Vote {
			t.Errorf("vote: EX %g, results %+v", s.Eval.EX, res)
		}
	}
}

func TestSpiderDevOracle(t *testing.T) {
	dev := shared.Path(t, "data/spider/dev.json")
	all, err := datasets.LoadTasks("spider:"+dev, "")
	if err != nil {
		t.Fatal(err)
	}
	var tasks []datasets.Task
	for i := 0; i < len(all); i += 26 {
		tasks = append(tasks, all[i])
	}
	h, _ := episode.ResolvePolicy("oracle", nil, nil)
	dir := filepath.Join(t.TempDir(), "spider")
	s, err := runEval(t, context.Background(), dir, "spider:"+dev, tasks, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Ordered || !s.Complete || s.Eval.N != len(tasks) {
		t.Fatalf("summary: ordered %v complete %v n %d of %d", s.Ordered, s.Complete, s.Eval.N, len(tasks))
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	goldOK := 0
	for _, r := range res {
		if r.GoldError != "" {
			continue // a rebuilt database the gold SQL does not run on
		}
		goldOK++
		if !r.Correct || !r.Converged || r.Turns != 2 {
			t.Errorf("task %s: %+v", r.ID, r)
		}
	}
	if goldOK < len(tasks)*9/10 || !near(s.Eval.EX, float64(goldOK)/float64(len(tasks))) {
		t.Errorf("EX %g with %d of %d gold queries running", s.Eval.EX, goldOK, len(tasks))
	}
	// Scored Spider style from predict_dev.json, the oracle gets the same figure.
	if rep := scoreDir(t, dir, tasks); rep.Style != judge.StyleSpider || !near(rep.EX.EX, s.Eval.EX) {
		t.Fatalf("score: %+v", rep)
	}
}
