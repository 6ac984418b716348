package curate

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

func TestRenderTurn(t *testing.T) {
	field := rundir.Turn{Content: "\n<sql>SELECT 1</sql>", Reasoning: "\n  The field's\nreasoning.\n", ReasoningSource: chat.SourceReasoningContent}
	inline := rundir.Turn{Content: "<think>\nInline thoughts.\n</think>\n\n<sql>SELECT 2</sql>\n"}
	both := rundir.Turn{Content: "<think>copy</think>\n<sql>SELECT 3</sql>", Reasoning: "original", ReasoningSource: chat.SourceReasoning}
	bare := rundir.Turn{Content: "<sql>SELECT 4</sql>"}
	prefilled := rundir.Turn{Content: "opened by the template</think>\n<sql>SELECT 5</sql>"}
	cutField := rundir.Turn{Content: "", Reasoning: "ran out of", FinishReason: chat.FinishLength, Truncated: true}
	cutInline := rundir.Turn{Content: "<think>ran out of", FinishReason: chat.FinishLength, Truncated: true}
	closedInline := rundir.Turn{Content: "<think>thought it through</think>\n", FinishReason: chat.FinishLength, Truncated: true}
	// Cut inside reasoning the template opened in the prompt: the content has no tag at all.
	cutOpened := rundir.Turn{Content: "opened by the template, ran out of", FinishReason: chat.FinishLength, Truncated: true, ThinkOpened: true}
	rambling := rundir.Turn{Content: "no tags, ran to the limit", FinishReason: chat.FinishLength, FormatViolation: true}
	cases := []struct {
		name    string
		turn    rundir.Turn
		mode    ThinkMode
		text    string
		source  string
		dropped bool
	}{
		{"field auto", field, ThinkAuto, "<think>The field's\nreasoning.</think>\n<sql>SELECT 1</sql>", ThinkFromField, false},
		{"field field", field, ThinkField, "<think>The field's\nreasoning.</think>\n<sql>SELECT 1</sql>", ThinkFromField, false},
		{"field inline", field, ThinkInline, "<sql>SELECT 1</sql>", ThinkFromNone, false},
		{"field none", field, ThinkNone, "<sql>SELECT 1</sql>", ThinkFromNone, false},
		{"inline auto", inline, ThinkAuto, "<think>Inline thoughts.</think>\n<sql>SELECT 2</sql>", ThinkFromInline, false},
		{"inline field", inline, ThinkField, "<sql>SELECT 2</sql>", ThinkFromNone, true},
		{"inline none", inline, ThinkNone, "<sql>SELECT 2</sql>", ThinkFromNone, true},
		{"both auto keeps the field", both, ThinkAuto, "<think>original</think>\n<sql>SELECT 3</sql>", ThinkFromField, true},
		{"both inline", both, ThinkInline, "<think>copy</think>\n<sql>SELECT 3</sql>", ThinkFromInline, false},
		{"bare auto", bare, ThinkAuto, "<sql>SELECT 4</sql>", ThinkFromNone, false},
		{"prefilled auto", prefilled, ThinkAuto, "<think>opened by the template</think>\n<sql>SELECT 5</sql>", ThinkFromInline, false},
		{"truncated in the field", cutField, ThinkAuto, "<think>ran out of", ThinkFromField, false},
		{"truncated inline", cutInline, ThinkAuto, "<think>ran out of", ThinkFromInline, false},
		{"truncated none", cutField, ThinkNone, "", ThinkFromNone, false},
		{"truncated after its think", closedInline, ThinkAuto, "<think>thought it through</think>", ThinkFromInline, false},
		{"truncated in opened think auto", cutOpened, ThinkAuto, "<think>opened by the template, ran out of", ThinkFromInline, false},
		{"truncated in opened think inline", cutOpened, ThinkInline, "<think>opened by the template, ran out of", ThinkFromInline, false},
		{"truncated in opened think field", cutOpened, ThinkField, "", ThinkFromNone, true},
		{"truncated in opened think none", cutOpened, ThinkNone, "", ThinkFromNone, true},
		{"tagless violation", rambling, ThinkAuto, "no tags, ran to the limit", ThinkFromNone, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RenderTurn(c.turn, c.mode)
			if r.Text != c.text || r.Source != c.source || r.InlineDropped != c.dropped {
				t.Errorf("RenderTurn = {%q %s dropped=%v}, want {%q %s dropped=%v}", r.Text, r.Source, r.InlineDropped, c.text, c.source, c.dropped)
			}
			if c.source != ThinkFromNone && !strings.HasPrefix(r.Text, "<think>"+r.Think) {
				t.Errorf("text %q does not begin with its think %q", r.Text, r.Think)
			}
		})
	}
}

func TestRenderConversation(t *testing.T) {
	tr := &rundir.Trajectory{System: "sys", Prompt: "Question: q", Turns: []rundir.Turn{
		{Content: "<sql>SELECT 1</sql>", Reasoning: "first", Observation: "<observation>\n1\n</observation>"},
		{Content: "<think>second</think><sql>SELECT 1</sql>", Observation: "<observation>\nlast, not shown\n</observation>"},
	}}
	r, err := Render(tr, ThinkAuto)
	if err != nil {
		t.Fatal(err)
	}
	want := []chat.Message{
		{Role: "system", Content: "sys"}, {Role: "user", Content: "Question: q"},
		{Role: "assistant", Content: "<think>first</think>\n<sql>SELECT 1</sql>"},
		{Role: "user", Content: "<observation>\n1\n</observation>"},
		{Role: "assistant", Content: "<think>second</think>\n<sql>SELECT 1</sql>"},
	}
	if len(r.Messages) != len(want) {
		t.Fatalf("%d messages: %+v", len(r.Messages), r.Messages)
	}
	for i := range want {
		if r.Messages[i] != want[i] {
			t.Errorf("message %d = %+v, want %+v", i, r.Messages[i], want[i])
		}
	}
	if len(r.Spans) != 2 || r.Text[r.Spans[0].Start:r.Spans[0].End] != "\n"+want[2].Content+"<|im_end|>\n" {
		t.Errorf("spans %+v over %q", r.Spans, r.Text)
	}
	// The trajectory is not changed by rendering.
	if tr.Turns[0].Content != "<sql>SELECT 1</sql>" {
		t.Errorf("Render changed the turn: %q", tr.Turns[0].Content)
	}
}

func TestParseThinkMode(t *testing.T) {
	for _, m := range ThinkModes {
		if got, err := ParseThinkMode(string(m)); err != nil || got != m {
			t.Errorf("ParseThinkMode(%q) = %q, %v", m, got, err)
		}
	}
	if m, err := ParseThinkMode(""); err != nil || m != ThinkAuto {
		t.Errorf("empty: %q %v", m, err)
	}
	if _, err := ParseThinkMode("Field"); err == nil || !strings.Contains(err.Error(), "auto, field, inline or none") {
		t.Errorf("bad mode: %v", err)
	}
}

// FuzzRenderTurn: every rendering with a think block starts with it and holds the reasoning
// byte for byte; the answer's SQL survives every mode.
func FuzzRenderTurn(f *testing.F) {
	f.Add("<think>a</think>\n<sql>SELECT 1</sql>", "field text", true)
	f.Add("x</think><sql>s", "", false)
	f.Add("<think>only", "r", true)
	f.Fuzz(func(t *testing.T, content, reasoning string, truncated bool) {
		tu := rundir.Turn{Content: content, Reasoning: reasoning, Truncated: truncated}
		sql := protocol.ParseReply(content).SQL
		for _, m := range ThinkModes {
			r := RenderTurn(tu, m)
			if r.Source != ThinkFromNone {
				if !strings.HasPrefix(r.Text, "<think>"+r.Think) {
					t.Fatalf("%s: %q does not begin with <think>%q", m, r.Text, r.Think)
				}
				if r.Source == ThinkFromField && r.Think != strings.TrimSpace(reasoning) {
					t.Fatalf("%s: field think %q, reasoning %q", m, r.Think, reasoning)
				}
			}
			if m == ThinkNone && r.Source != ThinkFromNone {
				t.Fatalf("none rendered a %s think", r.Source)
			}
			if sql != "" && !strings.Contains(r.Text, sql) && !strings.Contains(strings.ReplaceAll(content, "```", ""), sql) {
				t.Fatalf("%s: SQL %q lost from %q", m, sql, r.Text)
			}
		}
	})
}
