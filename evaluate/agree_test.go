package evaluate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/stats"
	"github.com/chainedsql/chainedsql/view"
)

// splitter answers evalEntries so that the raw stop rule and the outcome part ways: task 1 repeats
// a failing statement (the episode stops, it has not converged), task 2 starts with a truncated
// turn, task 3 with a tag-less reply (a format violation); every other task gives its gold twice.
type splitter struct{ gold map[string]string }

func (s splitter) Chat(_ context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
	q := question(msgs)
	turn := 0
	for _, m := range msgs {
		if m.Role == chat.RoleAssistant {
			turn++
		}
	}
	r := chat.Reply{Content: sqlReply(s.gold[q]), FinishReason: chat.FinishStop, Usage: chat.Usage{PromptTokens: 10, CompletionTokens: 5}}
	switch {
	case q == evalEntries[1].Question:
		r.Content = sqlReply("SELECT name FROM no_such_table")
	case q == evalEntries[2].Question && turn == 0:
		r.Content, r.FinishReason = "<think>counting the students one by one", chat.FinishLength
	case q == evalEntries[3].Question && turn == 0:
		r.Content = "SELECT name FROM students WHERE class = 'A'"
	}
	return r, nil
}

// TestOutcomeAgrees: every count of the same fact agrees across the eval summary, the distill
// summary, the rewards, the dataset's stats.json and card, curate stats, and the viewer, on an
// eval dir crafted so that the raw repeat, exec-ok and convergence differ.
func TestOutcomeAgrees(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	gold := map[string]string{}
	for _, e := range evalEntries {
		gold[e.Question] = e.SQL
	}
	dir := filepath.Join(t.TempDir(), "eval")
	sum, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, handle("split", splitter{gold}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(evalEntries)

	// The trajectories: the crafted cases are there, and the raw repeat counts one more than
	// convergence.
	var repeated, converged, rw, truncated, violations int
	for tr, err := range rundir.Trajectories(dir) {
		if err != nil {
			t.Fatal(err)
		}
		o := tr.Outcome()
		repeated += b2i(tr.Repeated)
		converged += b2i(o.Converged)
		rw += rewards.Of(tr).Converged
		truncated += o.TruncatedTurns
		violations += o.FormatViolations
	}
	if want := n - 1; converged != want || repeated != n || rw != want || truncated != 1 || violations != 1 {
		t.Fatalf("repeated %d converged %d rewards %d truncated turns %d violations %d; want %d, %d, %d, 1, 1",
			repeated, converged, rw, truncated, violations, n, want, want)
	}
	if got := int(math.Round(sum.Eval.Convergence * float64(sum.Eval.N))); got != converged || sum.Eval.N != n {
		t.Errorf("summary.json: convergence %g of %d, want %d", sum.Eval.Convergence, sum.Eval.N, converged)
	}
	rows, _, err := distill.Summarize(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Converged != converged {
		t.Errorf("distill summary: %+v", rows)
	}

	// The dataset built from the eval dir: stats.json, the card, curate stats.
	tok := agreeTokenizer(t)
	out := filepath.Join(t.TempDir(), "ds")
	rep, err := curate.Build(context.Background(), []string{dir}, curate.BuildOptions{Tokenizer: tok, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Teachers) != 1 || rep.Teachers[0].Converged != converged || rep.Rows != n || rep.TruncatedRows != 1 {
		t.Errorf("stats.json: rows %d truncated rows %d teachers %+v", rep.Rows, rep.TruncatedRows, rep.Teachers)
	}
	card, err := os.ReadFile(filepath.Join(out, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cell := fmt.Sprintf("| %.1f%% |", 100*float64(converged)/float64(n))
	if !strings.Contains(string(card), cell) || !strings.Contains(string(card), "a failing statement given twice ends the episode but has not converged") {
		t.Errorf("card lacks the convergence %s or the column's meaning:\n%s", cell, card)
	}
	ds, err := stats.Dataset(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Overall.Converged != converged || ds.Overall.RowsTruncated != 1 || ds.Overall.FormatViolations != 1 {
		t.Errorf("curate stats: converged %d truncated rows %d violations %d", ds.Overall.Converged, ds.Overall.RowsTruncated, ds.Overall.FormatViolations)
	}

	// The viewer of the eval dir: its converged filter and its stats page.
	srv, err := view.Open(context.Background(), view.Options{Paths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	yes := true
	page, err := srv.Query(view.Query{Converged: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != converged {
		t.Errorf("viewer: converged filter keeps %d rows, want %d", page.Total, converged)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/stats", nil))
	want := fmt.Sprintf("%.1f%%", 100*float64(converged)/float64(n))
	if got := statsCell(t, rec.Body.Bytes(), "convergence"); got != want {
		t.Errorf("viewer stats: convergence %q, want %q", got, want)
	}
}

// statsCell finds the first table of an /api/stats answer with a column named col and returns
// that column of its first row.
func statsCell(t *testing.T, body []byte, col string) string {
	t.Helper()
	var page struct {
		Sections []struct {
			Tables []struct {
				Header []string   `json:"header"`
				Rows   [][]string `json:"rows"`
			} `json:"tables"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("stats page: %v: %s", err, body)
	}
	for _, s := range page.Sections {
		for _, tb := range s.Tables {
			if i := slices.Index(tb.Header, col); i >= 0 && len(tb.Rows) > 0 {
				return tb.Rows[0][i]
			}
		}
	}
	t.Fatalf("stats page has no %q column: %s", col, body)
	return ""
}

func agreeTokenizer(t *testing.T) curate.Tokenizer {
	t.Helper()
	tk, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return curate.Adapt(tk)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
