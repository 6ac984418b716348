package turns

import (
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// qwen loads ../shared/tokenizer/qwen2.5.
func qwen(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Check concatenates an episode's pieces (the prompt, each reply, the observation after every
// reply but the last, the closing) and compares them with the whole conversation as curate
// renders, tokenises and masks it.
func check(t *testing.T, tok *tokenizer.Tokenizer, msgs []chat.Message) {
	t.Helper()
	var pieces []Piece
	pieces = append(pieces, Prompt(msgs[:2]))
	for i := 2; i < len(msgs); i++ {
		switch msgs[i].Role {
		case chat.RoleAssistant:
			pieces = append(pieces, Reply(msgs[i].Content))
		case chat.RoleUser:
			pieces = append(pieces, Observation(msgs[i].Content))
		}
	}
	pieces = append(pieces, Closing())
	var text string
	var ids []int
	var mask []int8
	for _, p := range pieces {
		p = p.Encode(tok)
		if len(p.IDs) != len(p.Mask) {
			t.Fatalf("piece %q: %d ids, %d mask", p.Text, len(p.IDs), len(p.Mask))
		}
		text += p.Text
		ids = append(ids, p.IDs...)
		mask = append(mask, p.Mask...)
	}
	want, _ := chattmpl.Render(msgs, false)
	if text != want {
		t.Fatalf("pieces render\n%q\nthe template\n%q", text, want)
	}
	if wantIDs := tok.Encode(want); !slices.Equal(ids, wantIDs) {
		t.Fatalf("concatenated ids differ from the encoding of the conversation:\n%v\n%v", ids, wantIDs)
	}
	m, err := curate.Mask(curate.Adapt(tok), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tokens) != len(mask) {
		t.Fatalf("%d tokens, curate masks %d", len(mask), len(m.Tokens))
	}
	trainable := 0
	for i, mt := range m.Tokens {
		if want := mt.Span >= 0; want != (mask[i] == 1) {
			t.Fatalf("token %d (%q): mask %d, curate's span %d", i, m.Text[mt.Start:mt.End], mask[i], mt.Span)
		}
		trainable += int(mask[i])
	}
	if trainable != m.Trainable {
		t.Fatalf("trainable %d, curate %d", trainable, m.Trainable)
	}
}

// TestPiecesAreTheConversation: token for token and mask bit for mask bit, the pieces of an
// episode are curate's rendering of it, for replies and observations with the texts that
// merge across a boundary if anything does (newlines, spaces, unicode, an empty observation
// body).
func TestPiecesAreTheConversation(t *testing.T) {
	tok := qwen(t)
	sys := chat.Message{Role: chat.RoleSystem, Content: "You are an expert data analyst.\n\nCREATE TABLE book (id INTEGER, genre TEXT); -- 'Poetry'\n"}
	user := chat.Message{Role: chat.RoleUser, Content: "Question: How many poetry books?\nEvidence: genre = 'Poetry'"}
	for name, turns := range map[string][]string{
		"one reply": {"<think>Count them.</think>\n<sql>SELECT COUNT(*) FROM book WHERE genre = 'Poetry'</sql>"},
		"three replies": {
			"<think>Count.</think>\n<sql>SELECT COUNT(*) FROM book</sql>",
			"<observation>\nCOUNT(*)\n5\n(1 row)\n</observation>",
			"<think>Only poetry: façade, 数据.</think>\n<sql>SELECT COUNT(*) FROM book WHERE genre = 'Poetry'</sql>",
			"<observation>\nCOUNT(*)\n2\n(1 row)\n</observation>",
			"<think>Same again.</think>\n<sql>SELECT COUNT(*) FROM book WHERE genre = 'Poetry'</sql>",
		},
		"malformed": {"I would count them.", "<observation>\n\n</observation>", "  spaced  ", "<observation>\nError: no such table: x\n</observation>", "\t<sql>SELECT 1</sql>"},
	} {
		t.Run(name, func(t *testing.T) {
			msgs := []chat.Message{sys, user}
			for i, c := range turns {
				role := chat.RoleAssistant
				if i%2 == 1 {
					role = chat.RoleUser
				}
				msgs = append(msgs, chat.Message{Role: role, Content: c})
			}
			check(t, tok, msgs)
		})
	}
}

func TestWithoutTokenizer(t *testing.T) {
	p := Observation("<observation>\nx\n</observation>")
	want := "<|im_end|>\n<|im_start|>user\n<observation>\nx\n</observation><|im_end|>\n<|im_start|>assistant\n"
	if p.Text != want || p.IDs != nil || p.Mask != nil {
		t.Fatalf("%+v", p)
	}
}
