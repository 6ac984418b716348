package student_test

import (
	"context"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/student/studenttest"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestSpecialTokenEndsReply: through the Qwen2.5 tokenizer, a student that samples a special
// token inside its reply (<|im_start|>, <|object_ref_start|>, <|endoftext|>) stops there, as
// student eval plays it turn by turn: the reply's text is the text before it, and the next
// turn's prompt, rendered from that text, starts with this turn's prompt, the ids generated
// before the stop and <|im_end|>, so the prefix cache serves all of them. Before, a special token
// other than <|endoftext|> was decoded into the text as "<|im_start|>" and encoded back as
// plain text: the next prompt left the generated ids at that token.
func TestSpecialTokenEndsReply(t *testing.T) {
	convo := []chat.Message{{Role: chat.RoleSystem, Content: "Answer in SQL."}, {Role: chat.RoleUser, Content: "How many?"}}
	for _, special := range []string{chattmpl.ImStart, "<|object_ref_start|>", "<|endoftext|>"} {
		t.Run(special, func(t *testing.T) {
			s, tok, before := studenttest.MidReplySpecial(t, "<think>count them</think>\n", special, "<sql>SELECT 1</sql>")
			imEnd, _ := tok.TokenID(chattmpl.ImEnd)
			sp, _ := tok.TokenID(special)
			ctx := context.Background()
			opts := chat.Options{Temperature: chat.Float(0), MaxTokens: 64}
			p1, r, generated := promptAndReply(t, s, convo, opts)
			next := append(slices.Clone(convo), chat.Message{Role: chat.RoleAssistant, Content: r.Content},
				chat.Message{Role: chat.RoleUser, Content: "<observation>no statement</observation>"})
			p2, err := s.Prompt(next)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Concat(p1, generated[:len(generated)-1], []int{imEnd})
			if len(p2) < len(want) || !slices.Equal(p2[:len(want)], want) {
				t.Fatalf("the next prompt does not start with the prompt, the generated ids and <|im_end|>:\n%v\nwant prefix\n%v", p2, want)
			}
			r2, err := s.Chat(ctx, next, opts)
			if err != nil {
				t.Fatal(err)
			}
			if min := len(p1) + len(generated) - 1; r2.Usage.CachedTokens < min {
				t.Errorf("the second turn reused %d prompt tokens, want at least the %d of the first turn's prompt and reply", r2.Usage.CachedTokens, min)
			}
			if want := append(slices.Clone(before), sp); !slices.Equal(generated, want) {
				t.Errorf("generated %v (%q), want the ids before %s and it as the stop", generated, tok.Decode(generated), special)
			}
			if r.FinishReason != chat.FinishStop || r.Content != tok.Decode(before) {
				t.Errorf("reply %q (%s), want %q (stop)", r.Content, r.FinishReason, tok.Decode(before))
			}
		})
	}
}

// TestNonSpecialAddedTokenIsText: an added token the tokenizer does not mark special
// (Qwen2.5's <tool_call>, <|fim_prefix|>) is text, not a stop: a reply samples on through it,
// its text spells it, and the next turn's prompt, rendered from that text, encodes it back to
// the same id, so the prompt and every generated id are its prefix. A stop rule widened to
// every added token, or an encoding of content that split them, would break this.
func TestNonSpecialAddedTokenIsText(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID(chattmpl.ImEnd)
	convo := []chat.Message{{Role: chat.RoleSystem, Content: "Answer in SQL."}, {Role: chat.RoleUser, Content: "How many?"}}
	for _, added := range []string{"<tool_call>", "<|fim_prefix|>"} {
		id, ok := tok.TokenID(added)
		if !ok || tok.IsSpecial(id) {
			t.Fatalf("%s: id %d, found %v, special %v; want a non-special added token", added, id, ok, tok.IsSpecial(id))
		}
		script := slices.Concat(tok.EncodeSplitSpecial("<think>count them</think>\n"), []int{id}, tok.EncodeSplitSpecial("<sql>SELECT 1</sql>"))
		s, err := student.New(gentest.ScriptedIDs(tok.VocabSize(), tok.Encode(chattmpl.GenerationPrompt), script, imEnd), tok, student.Config{ModelID: "scripted"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		p1, r, generated := promptAndReply(t, s, convo, chat.Options{Temperature: chat.Float(0), MaxTokens: 64})
		if want := append(slices.Clone(script), imEnd); !slices.Equal(generated, want) || r.Content != tok.Decode(script) {
			t.Errorf("%s: generated %v (%q), want the whole script through <|im_end|>", added, generated, r.Content)
		}
		p2, err := s.Prompt(append(slices.Clone(convo), chat.Message{Role: chat.RoleAssistant, Content: r.Content}, chat.Message{Role: chat.RoleUser, Content: "ok"}))
		if err != nil {
			t.Fatal(err)
		}
		if want := slices.Concat(p1, generated); len(p2) < len(want) || !slices.Equal(p2[:len(want)], want) {
			t.Errorf("%s: the next prompt does not start with the prompt and the generated ids:\n%v\nwant prefix\n%v", added, p2, want)
		}
	}
}

// promptAndReply is s's prompt for convo, its reply under opts, and the ids it generated (its
// log-probability entries' ids: the reply's and the stop token's).
func promptAndReply(t *testing.T, s *student.Student, convo []chat.Message, opts chat.Options) ([]int, student.Choice, []int) {
	t.Helper()
	prompt, err := s.Prompt(convo)
	if err != nil {
		t.Fatal(err)
	}
	choices, err := s.Complete(context.Background(), convo, opts, student.Sample{LogProbs: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var generated []int
	for _, lp := range choices[0].LogProbs {
		generated = append(generated, int(lp.ID))
	}
	return prompt, choices[0], generated
}
