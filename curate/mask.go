package curate

import (
	"fmt"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// renderTraining is the training text of a conversation whose assistant messages are already
// rendered (Render's, or a dataset row's messages): the messages cut after the last assistant
// turn, rendered by the chat template without a generation prompt, with the trainable spans.
// err is set when the template cannot render it. Render and Mask both call it, so the mask
// shown is the one Build counted.
func renderTraining(all []chat.Message) (msgs []chat.Message, text string, spans []chattmpl.Span, err error) {
	if err := chattmpl.Check(all); err != nil {
		return nil, "", nil, err
	}
	msgs = trainingMessages(all)
	text, spans = chattmpl.Render(msgs, false)
	return msgs, text, spans, nil
}

// MaskToken is one token of a rendered conversation: its byte range [Start, End) in
// Masked.Text and Span, the index of the assistant span it overlaps (-1: no loss on it).
type MaskToken struct {
	Start int `json:"start"`
	End   int `json:"end"`
	Span  int `json:"span"`
}

// Masked is a conversation as Build tokenises it, every token marked trainable or not.
type Masked struct {
	// Text is the training text (Build's rendering); Spans its assistant spans.
	Text   string          `json:"text"`
	Spans  []chattmpl.Span `json:"spans"`
	Tokens []MaskToken     `json:"tokens"`
	// Trainable counts the tokens with Span >= 0; it equals the row's num_trainable_tokens,
	// and len(Tokens) its num_tokens, when the dataset was built with the same tokenizer.
	Trainable int `json:"trainable"`
}

// Mask renders msgs (assistant messages already rendered, as Render or a dataset row has
// them) as Build does and marks each token of the rendering with the span it
// overlaps, by the same code that computes num_tokens and num_trainable_tokens. It fails on
// a conversation the template cannot render and on one Build excludes for a special token's
// text in a message (ChatML markers or another special token of tok).
func Mask(tok Tokenizer, msgs []chat.Message) (*Masked, error) {
	c, err := newCounter(tok)
	if err != nil {
		return nil, err
	}
	if reason, token := specialInContent(c.specials, trainingMessages(msgs)); reason != "" {
		return nil, fmt.Errorf("curate build excludes this conversation (%s): a message holds the text of the special token %s", reason, token)
	}
	_, text, spans, err := renderTraining(msgs)
	if err != nil {
		return nil, err
	}
	m := &Masked{Text: text, Spans: spans}
	c.walk(text, spans, func(start, end, span int) {
		m.Tokens = append(m.Tokens, MaskToken{Start: start, End: end, Span: span})
		if span >= 0 {
			m.Trainable++
		}
	})
	return m, nil
}
