package curate

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// ThinkMode chooses where the <think> block of each rendered assistant message comes from
// (curate build --think).
type ThinkMode string

// Think modes.
const (
	// ThinkAuto takes the separate reasoning field when the turn has one, else the inline
	// <think> block the model wrote in its content. With both, the field's text is kept and the
	// inline copy dropped (counted in InlineDropped).
	ThinkAuto ThinkMode = "auto"
	// ThinkField takes only the reasoning field; a turn without one gets no think block, and an
	// inline block is dropped.
	ThinkField ThinkMode = "field"
	// ThinkInline takes only the inline block; the reasoning field is ignored.
	ThinkInline ThinkMode = "inline"
	// ThinkNone renders no think block at all (an inline block is dropped).
	ThinkNone ThinkMode = "none"
)

// ThinkModes lists the modes in documentation order.
var ThinkModes = []ThinkMode{ThinkAuto, ThinkField, ThinkInline, ThinkNone}

// ParseThinkMode parses a --think value; "" is ThinkAuto.
func ParseThinkMode(s string) (ThinkMode, error) {
	if s == "" {
		return ThinkAuto, nil
	}
	for _, m := range ThinkModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("think mode %q: want auto, field, inline or none", s)
}

// Where a rendered turn's think block came from (TurnRender.Source, the think_sources column).
const (
	ThinkFromField  = "field"
	ThinkFromInline = "inline"
	ThinkFromNone   = "none"
)

// TurnRender is one assistant turn rendered for training.
type TurnRender struct {
	// Text is the assistant message: "<think>REASONING</think>\n" then the answer, or the answer
	// alone without a think block ("<think>REASONING</think>" when there is no answer). A reply
	// cut inside its reasoning keeps the block open: "<think>REASONING", as the model was cut.
	Text string
	// Source is ThinkFromField, ThinkFromInline or ThinkFromNone.
	Source string
	// Think is the reasoning text in the block (trimmed), "" without one.
	Think string
	// InlineDropped reports that the content's own think block was left out (the field's text
	// was used instead, or the mode takes no inline reasoning).
	InlineDropped bool
}

// RenderTurn renders one turn's assistant message under mode. The answer is the content without
// its inline think block (protocol.ParsedReply.Answer); the reasoning text is used exactly as
// received, trimmed of surrounding whitespace. A reply cut inside reasoning its chat template
// opened in the prompt (protocol.CutInOpenedThink) is read with that <think> in front: its whole
// content is an inline block left open.
func RenderTurn(t rundir.Turn, mode ThinkMode) TurnRender {
	content := protocol.ReplyContent(t.Reply())
	p := protocol.ParseReply(content)
	field := strings.TrimSpace(t.Reasoning)
	r := TurnRender{Source: ThinkFromNone}
	switch {
	case field != "" && (mode == ThinkAuto || mode == ThinkField):
		r.Source, r.Think = ThinkFromField, field
	case p.HasThink && (mode == ThinkAuto || mode == ThinkInline):
		r.Source, r.Think = ThinkFromInline, p.Think
	}
	r.InlineDropped = p.HasThink && r.Source != ThinkFromInline
	answer := p.Answer(content)
	if r.Source == ThinkFromNone {
		if p.HasThink {
			r.Text = answer
		} else {
			r.Text = strings.TrimSpace(content)
		}
		return r
	}
	r.Text = protocol.TagThinkOpen + r.Think
	// A reply cut inside its reasoning keeps the block open, as the model left it: the field's
	// text of a truncated turn with nothing after it, or an inline block without </think>.
	if answer == "" && ((r.Source == ThinkFromField && t.Truncated) || (r.Source == ThinkFromInline && !p.ThinkClosed)) {
		return r
	}
	r.Text += protocol.TagThinkClose
	if answer != "" {
		r.Text += "\n" + answer
	}
	return r
}

// Rendered is a trajectory rendered for training: what a dataset row's messages hold, and the
// chat-template text with its loss spans.
type Rendered struct {
	// Messages are system, user question, then assistant turns (TurnRender.Text) and
	// observations alternating, ending with the last assistant turn.
	Messages []chat.Message
	// Turns are the assistant turns' renderings, in order.
	Turns []TurnRender
	// Text is Messages through the student's chat template (chattmpl.Render, no generation
	// prompt); Spans are its trainable spans (chattmpl.Render): per assistant message the
	// header's "\n", the content, <|im_end|> and the "\n" after it, the region TRL's
	// assistant_only_loss trains on.
	Text  string
	Spans []chattmpl.Span
}

// Render renders t for training under mode. It is the single rendering of a trajectory:
// curate build writes its Messages and counts tokens over its Text and Spans; viewers call it to
// show the <think> blocks and the loss mask exactly as the dataset has them. It fails when the
// conversation does not pass chattmpl.Check.
func Render(t *rundir.Trajectory, mode ThinkMode) (*Rendered, error) {
	conv := t.Conversation()
	r := &Rendered{Messages: conv, Turns: make([]TurnRender, len(t.Turns))}
	k := 0
	for i := range conv {
		if conv[i].Role == chat.RoleAssistant {
			r.Turns[k] = RenderTurn(t.Turns[k], mode)
			conv[i].Content = r.Turns[k].Text
			k++
		}
	}
	var err error
	if r.Messages, r.Text, r.Spans, err = renderTraining(conv); err != nil {
		return nil, err
	}
	return r, nil
}
