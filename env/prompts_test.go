package env

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestSubsetsFractionRefused: New refuses a validation fraction outside [0, 1]
// (datasets.Subsets.Check; the assignment itself is tested in package datasets).
func TestSubsetsFractionRefused(t *testing.T) {
	for _, f := range []float64{-0.1, 1.5, math.NaN()} {
		if _, err := New(Config{Tasks: tasksOf(t), Dialects: []datasets.Dialect{datasets.SQLite}, Opener: &sandbox.Connector{}, Subsets: &datasets.Subsets{ValFraction: f}}); err == nil {
			t.Errorf("New with fraction %g: no error", f)
		}
	}
}

// TestTasksListingSubsets: each task of the listing carries its subset, ?subset= selects one,
// the two partition the tasks, and the listing names the fraction and seed.
func TestTasksListingSubsets(t *testing.T) {
	tasks := tasksOf(t)
	sub := datasets.Subsets{ValFraction: 0.3, Seed: 11}
	_, url := testServer(t, Config{Subsets: &sub})
	type listing struct {
		Total       int        `json:"total"`
		Tasks       []taskJSON `json:"tasks"`
		ValFraction float64    `json:"val_fraction"`
		Seed        int64      `json:"seed"`
	}
	var all listing
	if code := call(t, "GET", url+"/v1/tasks", nil, &all); code != 200 || all.ValFraction != 0.3 || all.Seed != 11 || len(all.Tasks) != len(tasks) {
		t.Fatalf("listing: %d %+v", code, all)
	}
	want := map[string][]string{}
	for i, tj := range all.Tasks {
		if tj.Subset != sub.Of(tasks[i].ID) {
			t.Fatalf("%s: subset %q, want %q", tj.TaskID, tj.Subset, sub.Of(tasks[i].ID))
		}
		want[tj.Subset] = append(want[tj.Subset], tj.TaskID)
	}
	if len(want[datasets.SubsetTrain]) == 0 || len(want[datasets.SubsetVal]) == 0 {
		t.Fatalf("fraction 0.3 of %d tasks: %d train, %d val", len(tasks), len(want[datasets.SubsetTrain]), len(want[datasets.SubsetVal]))
	}
	for _, name := range []string{datasets.SubsetTrain, datasets.SubsetVal} {
		var l listing
		if code := call(t, "GET", url+"/v1/tasks?split=sample&subset="+name, nil, &l); code != 200 || l.Total != len(want[name]) {
			t.Fatalf("subset %s: %d, total %d, want %d", name, code, l.Total, len(want[name]))
		}
		for i, tj := range l.Tasks {
			if tj.TaskID != want[name][i] || tj.Subset != name {
				t.Fatalf("subset %s, entry %d: %+v, want %s", name, i, tj, want[name][i])
			}
		}
	}
	var e wireErr
	if code := call(t, "GET", url+"/v1/tasks?subset=test", nil, &e); code != 400 || e.Error == nil || e.Error.Message != `subset="test": want train or val` {
		t.Errorf("subset=test: %d %+v", code, e.Error)
	}
}

// TestPromptsMatchEpisodes writes the prompt export of the sample, reads it back and checks
// every row against the episode POST /v1/episodes starts for its task: the same messages, the
// same chat-template text and, token for token, the same ids.
func TestPromptsMatchEpisodes(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	tasks := tasksOf(t)
	sub := datasets.Subsets{ValFraction: 0.25, Seed: 3}
	s, url := testServer(t, Config{Tokenizer: tok, Subsets: &sub})
	path := filepath.Join(t.TempDir(), "prompts.parquet")
	n, err := s.WritePrompts(context.Background(), path)
	if err != nil || n != len(tasks) {
		t.Fatalf("WritePrompts: %d rows, %v", n, err)
	}
	rows, err := ReadPrompts(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tasks) {
		t.Fatalf("%d rows read back, want %d", len(rows), len(tasks))
	}
	for i, row := range rows {
		task := tasks[i]
		if row.TaskID != task.ID || row.TaskIndex != int64(task.Index) || row.DBID != task.DBID || row.Difficulty != task.Difficulty ||
			row.Dialect != "sqlite" || row.Split != "sample" || row.Subset != sub.Of(task.ID) {
			t.Fatalf("row %d: %+v for task %s", i, row, task.ID)
		}
		var ep struct {
			Messages []chat.Message `json:"messages"`
			Tokens   wirePiece      `json:"tokens"`
		}
		if code := call(t, "POST", url+"/v1/episodes", map[string]string{"task_id": task.ID}, &ep); code != 200 {
			t.Fatalf("start %s: %d", task.ID, code)
		}
		if len(row.Prompt) != 2 || len(ep.Messages) != 2 {
			t.Fatalf("%s: %d prompt messages, the episode %d", task.ID, len(row.Prompt), len(ep.Messages))
		}
		for j, m := range ep.Messages {
			if row.Prompt[j].Role != m.Role || row.Prompt[j].Content != m.Content {
				t.Fatalf("%s: message %d differs from the episode's:\n%+v\n%+v", task.ID, j, row.Prompt[j], m)
			}
		}
		if row.PromptText != ep.Tokens.Text {
			t.Fatalf("%s: prompt text differs from the episode's tokens.text", task.ID)
		}
		if int(row.PromptTokens) != len(ep.Tokens.IDs) || len(row.PromptIDs) != len(ep.Tokens.IDs) {
			t.Fatalf("%s: %d prompt tokens (%d ids), the episode %d", task.ID, row.PromptTokens, len(row.PromptIDs), len(ep.Tokens.IDs))
		}
		for j, id := range ep.Tokens.IDs {
			if int(row.PromptIDs[j]) != id {
				t.Fatalf("%s: token %d is %d, the episode's %d", task.ID, j, row.PromptIDs[j], id)
			}
		}
	}
}

// TestPromptsRefused: without a tokenizer the export says why; a cancelled one leaves no file
// and the old one as it was; a file of another layout is not read as prompts.
func TestPromptsRefused(t *testing.T) {
	s := testEnv(t, Config{})
	dir := t.TempDir()
	path := filepath.Join(dir, "prompts.parquet")
	if _, err := s.WritePrompts(context.Background(), path); err == nil || err.Error() != "env: write "+path+": env: the prompt export needs the student's tokenizer for the prompts' token ids" {
		t.Errorf("no tokenizer: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed export left %s: %v", path, err)
	}
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	s = testEnv(t, Config{Tokenizer: tok})
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.WritePrompts(ctx, path); err == nil {
		t.Error("a cancelled export: no error")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old" {
		t.Errorf("a cancelled export changed the old file: %q %v", b, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("a cancelled export left %d files in its directory", len(entries))
	}
	if _, err := ReadPrompts(path); err == nil {
		t.Error("a file that is not Parquet read as prompts")
	}
}
