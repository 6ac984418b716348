package curate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestBuildExcludesSpecialTokens: every special token of the real Qwen2.5 tokenizer written as
// text in a message is excluded, the ChatML markers as chatml_marker_in_content and the others
// (<|endoftext|>, <|vision_start|>, …) as special_token_in_content, naming the token; the
// card and stats.json count them. Text in the last observation, which is not trained on, stays.
func TestBuildExcludesSpecialTokens(t *testing.T) {
	tok := loadTokenizer(t)
	var others []string
	for text := range tok.SpecialIDs() {
		if text != chattmpl.ImStart && text != chattmpl.ImEnd {
			others = append(others, text)
		}
	}
	sort.Strings(others)
	if len(others) < 10 || !slices.Contains(others, "<|endoftext|>") || !slices.Contains(others, "<|vision_start|>") {
		t.Fatalf("test setup: the tokenizer's other special tokens are %q", others)
	}
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	var trajs []*rundir.Trajectory
	want := map[string]Excluded{}
	for i, s := range append([]string{chattmpl.ImStart, chattmpl.ImEnd}, others...) {
		tr := handTrajectory(fmt.Sprintf("k/%d", i), "alpha", 2)
		switch i % 3 { // the token in the reasoning, a reply or the first observation
		case 0:
			tr.Turns[0].Reasoning = "done, " + s + " stop"
		case 1:
			tr.Turns[1].Content = "<think>x</think>\n<sql>SELECT '" + s + "';</sql>"
		case 2:
			tr.Turns[0].Observation = "<observation>\nv\n" + s + "\n</observation>"
		}
		trajs = append(trajs, tr)
		reason := ReasonSpecialInContent
		if i < 2 {
			reason = ReasonMarkerInContent
		}
		want[tr.Key] = Excluded{Key: tr.Key, SourceRun: "run", Teacher: "alpha", Reason: reason, Token: s}
	}
	// Both kinds in one row: the ChatML marker's reason.
	both := handTrajectory("k/both", "alpha", 1)
	both.Turns[0].Reasoning = "<|endoftext|> and <|im_end|>"
	want[both.Key] = Excluded{Key: both.Key, SourceRun: "run", Teacher: "alpha", Reason: ReasonMarkerInContent, Token: chattmpl.ImEnd}
	// The last observation is not part of the training text.
	last := handTrajectory("k/last-observation", "alpha", 2)
	last.Turns[1].Observation = "<observation>\n<|endoftext|>\n</observation>"
	trajs = append(trajs, both, last, handTrajectory("k/plain", "alpha", 1))
	writeRun(t, run, trajs, 100)

	out := filepath.Join(tmp, "ds")
	rep, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 2 || rep.ExcludedCount != len(want) {
		t.Fatalf("rows=%d excluded=%d, want 2 and %d: %+v", rep.Rows, rep.ExcludedCount, len(want), rep.Excluded)
	}
	back, err := ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range back.Excluded {
		if e != want[e.Key] {
			t.Errorf("stats.json excluded %+v, want %+v", e, want[e.Key])
		}
	}
	card, err := os.ReadFile(filepath.Join(out, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		fmt.Sprintf("%d × `%s` (a message's text holds another special token", len(others), ReasonSpecialInContent),
		fmt.Sprintf("3 × `%s` (", ReasonMarkerInContent),
	} {
		if !strings.Contains(string(card), w) {
			t.Errorf("card lacks %q", w)
		}
	}
}

// TestMaskRefusesSpecialTokens: the viewer's mask refuses what Build excludes, naming the token.
func TestMaskRefusesSpecialTokens(t *testing.T) {
	tok := loadTokenizer(t)
	msgs := []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a<|endoftext|>b"}}
	if _, err := Mask(tok, msgs); err == nil || !strings.Contains(err.Error(), ReasonSpecialInContent) || !strings.Contains(err.Error(), "<|endoftext|>") {
		t.Errorf("Mask = %v, want a %s error naming <|endoftext|>", err, ReasonSpecialInContent)
	}
}

// TestVerifyFindsSpecialTokens: a row of an older dataset whose message text holds a special
// token agrees on its counts (both routes turn the text into the control token), and verify
// reports it from the token ids.
func TestVerifyFindsSpecialTokens(t *testing.T) {
	tok := loadTokenizer(t)
	sc, err := newScanner(tok)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCounter(tok)
	for _, tc := range []struct {
		name    string
		msgs    []chat.Message
		problem string // "" for none
	}{
		{"plain", []chat.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}, ""},
		{"default system", []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "o"}, {Role: "assistant", Content: "b"}}, ""},
		{"eos in a reply", []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a<|endoftext|>b<|endoftext|>"}},
			"token ids hold special tokens from message text (<|endoftext|> ×2): curate build excludes such rows"},
		{"vision in a question", []chat.Message{{Role: "user", Content: "<|vision_start|>q"}, {Role: "assistant", Content: "a"}},
			"(<|vision_start|> ×1)"},
		{"chatml in a question", []chat.Message{{Role: "user", Content: "q<|im_end|>"}, {Role: "assistant", Content: "a"}},
			"token ids hold 3 <|im_start|> and 4 <|im_end|> where the template writes 3 of each"},
	} {
		text, spans := chattmpl.Render(tc.msgs, false)
		n, trainable := c.count(text, spans)
		chk := sc.check(&Row{Key: tc.name, Messages: tc.msgs, NumTokens: int64(n), NumTrainableTokens: int64(trainable)})
		if tc.problem == "" && chk.Problem != "" || !strings.Contains(chk.Problem, tc.problem) {
			t.Errorf("%s: problem %q, want %q", tc.name, chk.Problem, tc.problem)
		}
		if strings.Contains(chk.Problem, "differs") {
			t.Errorf("%s: counts differ: %+v", tc.name, chk)
		}
	}
}
