package rollout

import (
	"context"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/student/studenttest"
	"github.com/chainedsql/chainedsql/turns"
)

// TestSpecialTokenRollout: through the Qwen2.5 tokenizer, a policy that samples <|im_start|>
// inside its reply stops there, so the row's token_ids are the prompt, each reply's ids before
// the special token, and the template's pieces (the <|im_end|> after the reply the template's:
// sampled_mask 0, log-prob 0): exactly the tokenizer's encoding of the row's messages, piece by
// piece as turns encodes them, which is what the next turn's prompt held. Before, the reply's
// ids kept the <|im_start|> id and went on, its messages held "<|im_start|>" as text, and the
// two disagreed.
func TestSpecialTokenRollout(t *testing.T) {
	s, tok, _ := studenttest.MidReplySpecial(t, "<think>one row</think>\n", chattmpl.ImStart, "<sql>SELECT 1</sql>")
	cfg := sampleConfig(t, s, 1, 1)
	cfg.MaxTokens, cfg.Temperature = 64, 0
	rows, _, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.Turns != 2 {
		t.Fatalf("%d turns, want 2", r.Turns)
	}
	var want []int
	var sampled []int8
	msgs := r.Messages
	add := func(p turns.Piece, mask int8) {
		p = p.Encode(tok)
		want = append(want, p.IDs...)
		for range p.IDs {
			sampled = append(sampled, mask)
		}
	}
	add(turns.Prompt([]chat.Message{{Role: msgs[0].Role, Content: msgs[0].Content}, {Role: msgs[1].Role, Content: msgs[1].Content}}), 0)
	for _, m := range msgs[2:] {
		if m.Role == chat.RoleAssistant {
			add(turns.Reply(m.Content), 1)
		} else {
			add(turns.Observation(m.Content), 0)
		}
	}
	add(turns.Closing(), 0)
	got := make([]int, len(r.TokenIDs))
	for i, id := range r.TokenIDs {
		got[i] = int(id)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("token_ids\n%v\nare not the encoding of the messages %q\n%v", got, msgs, want)
	}
	if !slices.Equal(r.SampledMask, sampled) {
		t.Errorf("sampled_mask\n%v\nwant 1 on the replies only (the <|im_end|> after an <|im_start|> stop is the template's)\n%v", r.SampledMask, sampled)
	}
}
