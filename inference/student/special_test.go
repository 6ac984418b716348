package student_test

import (
	"context"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/student/studenttest"
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
			p1, err := s.Prompt(convo)
			if err != nil {
				t.Fatal(err)
			}
			choices, err := s.Complete(ctx, convo, opts, student.Sample{LogProbs: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := choices[0]
			var generated []int
			for _, lp := range r.LogProbs {
				generated = append(generated, lp.ID)
			}
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
