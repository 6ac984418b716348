package student_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestStopStringPrefix: through the Qwen2.5 tokenizer, a reply that a stop string ("</sql>")
// ends inside a token (">\n" completes it) keeps its tokens whole in LogProbs and usage, through
// the completing one. Its text is cut before the stop string by default, as OpenAI and vLLM cut
// it, so the next turn's prompt, rendered from that text, does not hold the tokens generated
// (the prefix property breaks at the cut). With KeepStopText (include_stop_str_in_output) the
// text is the decoding of those tokens, and the next prompt starts with this turn's prompt, the
// tokens generated and <|im_end|>, which the prefix cache serves. Before, include_stop_str_in_output
// true was refused and the property could not be kept with a stop string.
func TestStopStringPrefix(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID(chattmpl.ImEnd)
	const stop, head = "</sql>", "<think>one row</think>\n<sql>SELECT 1"
	script := tok.Encode(head + stop + "\nmore after the stop")
	s, err := student.New(gentest.ScriptedIDs(tok.VocabSize(), tok.Encode(chattmpl.GenerationPrompt), script, imEnd), tok, student.Config{ModelID: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	convo := []chat.Message{{Role: chat.RoleSystem, Content: "Answer in SQL."}, {Role: chat.RoleUser, Content: "How many?"}}
	opts := chat.Options{Temperature: chat.Float(0), MaxTokens: 64, Stop: []string{stop}}
	p1, err := s.Prompt(convo)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		choices, err := s.Complete(context.Background(), convo, opts, student.Sample{LogProbs: true, KeepStopText: keep}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := choices[0]
		var generated []int
		for _, lp := range r.LogProbs {
			generated = append(generated, int(lp.ID))
		}
		whole := tok.Decode(generated)
		if !strings.HasPrefix(whole, head+stop) || whole == head+stop || !slices.Equal(generated, script[:len(generated)]) {
			t.Fatalf("keep %v: the tokens %v (%q) do not run through the one completing %q, inside it", keep, generated, whole, stop)
		}
		if r.FinishReason != chat.FinishStop || r.Usage.CompletionTokens != len(generated) {
			t.Errorf("keep %v: %s, %d completion tokens, want stop and the %d entries", keep, r.FinishReason, r.Usage.CompletionTokens, len(generated))
		}
		want := head
		if keep {
			want = whole
		}
		if r.Content != want {
			t.Errorf("keep %v: reply %q, want %q", keep, r.Content, want)
		}
		next := append(slices.Clone(convo), chat.Message{Role: chat.RoleAssistant, Content: r.Content},
			chat.Message{Role: chat.RoleUser, Content: "<observation>one row</observation>"})
		p2, err := s.Prompt(next)
		if err != nil {
			t.Fatal(err)
		}
		prefix := slices.Concat(p1, generated, []int{imEnd})
		if holds := len(p2) >= len(prefix) && slices.Equal(p2[:len(prefix)], prefix); holds != keep {
			t.Errorf("keep %v: the next prompt starts with the prompt, the tokens generated and <|im_end|>: %v", keep, holds)
		}
		if !keep {
			continue
		}
		r2, err := s.Chat(context.Background(), next, chat.Options{Temperature: chat.Float(0), MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if min := len(p1) + len(generated) - 1; r2.Usage.CachedTokens < min {
			t.Errorf("the second turn reused %d prompt tokens, want at least %d", r2.Usage.CachedTokens, min)
		}
	}
}
