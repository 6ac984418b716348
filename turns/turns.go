// Package turns cuts a multi-turn conversation, as the student's chat template renders it
// (inference/chattmpl, curate's rendering), into the pieces an RL trainer appends one after
// another: the prompt up to the assistant's first generation, each observation wrapped between
// two assistant replies, and the closing after the last reply. Each piece comes as text and,
// given a tokenizer, as token ids with the loss mask curate computes (1 on the tokens of
// chattmpl's trainable spans), so that the prompt, the generated ids of each reply and these
// pieces concatenate to the tokenizer's encoding of the whole conversation, and a trainer never
// re-tokenises. Only the ChatML markers the template writes are control ids: the text of a
// special token inside a message's content (a database value, an error, a question, a reply) is
// encoded as plain text, as Hugging Face's split_special_tokens=True encodes it, so content
// cannot open or close a turn; content without such text gets the ids of the whole rendering.
package turns

import (
	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// Encoder encodes text to token ids (an *inference/tokenizer.Tokenizer).
type Encoder interface {
	// Encode encodes text, the ChatML markers in it recognised as their special tokens.
	Encode(text string) []int
	// EncodeSplitSpecial encodes text with every special token's text as plain text.
	EncodeSplitSpecial(text string) []int
}

// Piece is one stretch of the rendered conversation.
type Piece struct {
	// Text is the stretch as the chat template renders it.
	Text string `json:"text"`
	// IDs are its token ids and Mask their loss mask (1: trainable, as curate counts it); both
	// nil without a tokenizer.
	IDs  []int  `json:"ids,omitempty"`
	Mask []int8 `json:"mask,omitempty"`
	// spans are the trainable byte ranges of Text; markers those of the ChatML markers the
	// template writes, the only stretches encoded as special tokens.
	spans   []chattmpl.Span
	markers []chattmpl.Span
}

// Prompt is the rendering of the conversation's opening messages (system, user) with the
// generation prompt: everything before the first assistant reply.
func Prompt(msgs []chat.Message) Piece {
	text, spans, markers := chattmpl.RenderMarked(msgs, true)
	// The first reply's span starts with the newline that ends the generation prompt.
	return Piece{Text: text, spans: append(spans, chattmpl.Span{Start: len(text) - 1, End: len(text)}), markers: markers}
}

// Observation is what follows an assistant reply that the environment answers: the reply's
// <|im_end|> and newline, the observation as a user turn, and the generation prompt of the next
// reply.
func Observation(obs string) Piece {
	end := Closing()
	head := end.Text + chattmpl.ImStart + chat.RoleUser + "\n"
	text := head + obs + chattmpl.ImEnd + "\n" + chattmpl.GenerationPrompt
	after := len(head) + len(obs)
	markers := append(end.markers, marker(len(end.Text), chattmpl.ImStart), marker(after, chattmpl.ImEnd),
		marker(after+len(chattmpl.ImEnd)+1, chattmpl.ImStart))
	// The next reply's span starts with the newline that ends its header.
	return Piece{Text: text, spans: append(end.spans, chattmpl.Span{Start: len(text) - 1, End: len(text)}), markers: markers}
}

// Closing is what follows the last assistant reply: its <|im_end|> and newline.
func Closing() Piece {
	text := chattmpl.ImEnd + "\n"
	return Piece{Text: text, spans: []chattmpl.Span{{Start: 0, End: len(text)}}, markers: []chattmpl.Span{marker(0, chattmpl.ImEnd)}}
}

// marker is the span of the marker m written at byte at.
func marker(at int, m string) chattmpl.Span { return chattmpl.Span{Start: at, End: at + len(m)} }

// Reply is an assistant reply's content as a piece: all of it trainable, none of it a marker.
func Reply(content string) Piece {
	return Piece{Text: content, spans: []chattmpl.Span{{Start: 0, End: len(content)}}}
}

// Encode fills p's IDs and Mask with enc. The text is encoded in stretches cut at the span
// edges, which fall on pre-tokenizer boundaries of the Qwen2 tokenizer (a ChatML marker, or a
// newline next to a letter or a marker), and at the template's markers, which the tokenizer
// splits out first; each marker is its special token (enc.Encode), each stretch between them
// plain text (enc.EncodeSplitSpecial). So the ids are those of the whole text, except that a
// special token's text inside a message's content is plain text, never a control id.
func (p Piece) Encode(enc Encoder) Piece {
	p.IDs, p.Mask = p.IDs[:0], p.Mask[:0]
	pos, next := 0, 0 // next: the first marker not yet encoded
	emit := func(ids []int, m int8) {
		p.IDs = append(p.IDs, ids...)
		for range ids {
			p.Mask = append(p.Mask, m)
		}
	}
	add := func(end int, m int8) {
		for pos < end {
			stop := end
			if next < len(p.markers) && p.markers[next].Start < end {
				stop = p.markers[next].Start
			}
			if stop > pos {
				emit(enc.EncodeSplitSpecial(p.Text[pos:stop]), m)
				pos = stop
			}
			if next < len(p.markers) && p.markers[next].Start == pos && pos < end {
				mk := p.markers[next]
				emit(enc.Encode(p.Text[mk.Start:mk.End]), m)
				pos = mk.End
				next++
			}
		}
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
