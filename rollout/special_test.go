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

// TestSpecialTokenRollout: through the Qwen2.5 tokenizer, a policy that samples a special token
// other than <|im_end|> (<|im_start|> inside its reply, or <|endoftext|>) stops there, and the
// row records what it sampled: the prompt, each reply's ids before the special token, the
// special token itself (sampled_mask 1, its log-prob), then the template's pieces (the
// <|im_end|> closing the turn is the template's: sampled_mask 0, log-prob 0). So the row is the
// tokenizer's encoding of its messages, piece by piece as turns encodes them, with the sampled
// stop id before each reply's closing <|im_end|>, and the next turn's prompt held those ids
// (its request's prompt ends where the second reply starts). Before, the special id was left
// out of the row (nothing trained against sampling it) and out of the next prompt; before
// that, the reply's ids kept the <|im_start|> id and went on, its messages held "<|im_start|>"
// as text, and the two disagreed.
func TestSpecialTokenRollout(t *testing.T) {
	for _, special := range []string{chattmpl.ImStart, "<|endoftext|>"} {
		t.Run(special, func(t *testing.T) {
			s, tok, _ := studenttest.MidReplySpecial(t, "<think>one row</think>\n", special, "<sql>SELECT 1</sql>")
			sp, _ := tok.TokenID(special)
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
			var replies []int // where each reply starts
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
					replies = append(replies, len(want))
					add(turns.Reply(m.Content), 1)
					want, sampled = append(want, sp), append(sampled, 1)
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
				t.Fatalf("token_ids\n%v\nare not the encoding of the messages %q with the sampled %s before each closing %s\n%v", got, msgs, special, chattmpl.ImEnd, want)
			}
			if !slices.Equal(r.SampledMask, sampled) {
				t.Errorf("sampled_mask\n%v\nwant 1 on the replies and the %s each stopped on (the %s after it is the template's)\n%v", r.SampledMask, special, chattmpl.ImEnd, sampled)
			}
			for k, id := range got {
				if id == sp && sampled[k] == 1 && (r.LogProbs[k] > 0 || r.LogProbs[k] < -1e3 || r.AssistantMask[k] != 1) {
					t.Errorf("token %d (%s): log-prob %v, assistant mask %d: want its sampled log-prob, mask 1", k, special, r.LogProbs[k], r.AssistantMask[k])
				}
			}
			checkMask(t, tok, r)
			if n := int64(countOnes(r.SampledMask)); n != r.GeneratedTokens {
				t.Errorf("%d tokens sampled_mask 1, %d generated: want every token generated recorded, the stop too", n, r.GeneratedTokens)
			}
			if p := r.PromptTokens + int64(replies[1]); r.RequestPromptTokens != p {
				t.Errorf("the two turns' prompts are %d tokens, want %d: the second is the row's ids before its reply", r.RequestPromptTokens, p)
			}
		})
	}
}

// countOnes counts the 1s of a mask.
func countOnes(m []int8) int {
	n := 0
	for _, x := range m {
		if x == 1 {
			n++
		}
	}
	return n
}
