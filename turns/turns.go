// Package turns cuts a multi-turn conversation, as the student's chat template renders it
// (inference/chattmpl, curate's rendering), into the pieces an RL trainer appends one after
// another: the prompt up to the assistant's first generation, each observation wrapped between
// two assistant replies, and the closing after the last reply. Each piece comes as text and,
// given a tokenizer, as token ids with the loss mask curate computes (1 on the tokens of
// chattmpl's trainable spans), so that the prompt, the generated ids of each reply and these
// pieces concatenate to the tokenizer's encoding of the whole conversation, and a trainer never
// re-tokenises.
package turns

import (
	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// Encoder encodes text to token ids, recognising the ChatML markers as special tokens (an
// *inference/tokenizer.Tokenizer).
type Encoder interface {
	Encode(text string) []int
}

// Piece is one stretch of the rendered conversation.
type Piece struct {
	// Text is the stretch as the chat template renders it.
	Text string `json:"text"`
	// IDs are its token ids and Mask their loss mask (1: trainable, as curate counts it); both
	// nil without a tokenizer.
	IDs  []int  `json:"ids,omitempty"`
	Mask []int8 `json:"mask,omitempty"`
	// spans are the trainable byte ranges of Text.
	spans []chattmpl.Span
}

// Prompt is the rendering of the conversation's opening messages (system, user) with the
// generation prompt: everything before the first assistant reply.
func Prompt(msgs []chat.Message) Piece {
	text, spans := chattmpl.Render(msgs, true)
	// The first reply's span starts with the newline that ends the generation prompt.
	return Piece{Text: text, spans: append(spans, chattmpl.Span{Start: len(text) - 1, End: len(text)})}
}

// Observation is what follows an assistant reply that the environment answers: the reply's
// <|im_end|> and newline, the observation as a user turn, and the generation prompt of the next
// reply.
func Observation(obs string) Piece {
	end := Closing()
	text := end.Text + chattmpl.ImStart + chat.RoleUser + "\n" + obs + chattmpl.ImEnd + "\n" + chattmpl.GenerationPrompt
	// The next reply's span starts with the newline that ends its header.
	return Piece{Text: text, spans: append(end.spans, chattmpl.Span{Start: len(text) - 1, End: len(text)})}
}

// Closing is what follows the last assistant reply: its <|im_end|> and newline.
func Closing() Piece {
	text := chattmpl.ImEnd + "\n"
	return Piece{Text: text, spans: []chattmpl.Span{{Start: 0, End: len(text)}}}
}

// Reply is an assistant reply's content as a piece: all of it trainable.
func Reply(content string) Piece {
	return Piece{Text: content, spans: []chattmpl.Span{{Start: 0, End: len(content)}}}
}

// Encode fills p's IDs and Mask with enc. The text is encoded in stretches cut at the span
// edges, which fall on pre-tokenizer boundaries of the Qwen2 tokenizer (a ChatML marker, or a
// newline next to a letter or a marker), so the ids are those of the whole text.
func (p Piece) Encode(enc Encoder) Piece {
	p.IDs, p.Mask = p.IDs[:0], p.Mask[:0]
	pos := 0
	add := func(end int, m int8) {
		if end <= pos {
			return
		}
		ids := enc.Encode(p.Text[pos:end])
		p.IDs = append(p.IDs, ids...)
		for range ids {
			p.Mask = append(p.Mask, m)
		}
		pos = end
	}
	for _, s := range p.spans {
		add(s.Start, 0)
		add(s.End, 1)
	}
	add(len(p.Text), 0)
	if p.IDs == nil {
		p.IDs, p.Mask = []int{}, []int8{}
	}
	return p
}
