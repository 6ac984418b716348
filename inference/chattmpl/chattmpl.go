// Package chattmpl renders conversations exactly as the Qwen2.5 chat template
// (../shared/tokenizer/qwen2.5/chat_template.jinja, ChatML) does without tools, and reports the
// byte spans that carry the training loss: the {% generation %} regions.
//
// The template is hand-written in Go rather than interpreted by a Jinja engine: it is a dozen
// lines, Go has no Jinja implementation in the module's dependencies, and a direct rendering is
// both faster and the only way to know exact spans. Its output is checked byte for byte against
// the real template rendered by Jinja2 (testdata/golden.jsonl, made by
// scripts/gen_chattmpl_golden.py).
package chattmpl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
)

// ChatML markers and the template's fixed text.
const (
	ImStart = "<|im_start|>"
	ImEnd   = "<|im_end|>"
	// DefaultSystem is the system message the template inserts when the first message is not
	// a system message.
	DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
	// RoleTool is the role the template renders as a <tool_response> inside a user turn.
	RoleTool = "tool"
	// GenerationPrompt is what add_generation_prompt appends.
	GenerationPrompt = ImStart + chat.RoleAssistant + "\n"
)

// Span is a half-open byte range [Start, End) of rendered text.
type Span struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Len is End - Start.
func (s Span) Len() int { return s.End - s.Start }

// ErrEmpty is returned by Check for a conversation without messages; the Jinja template fails
// on it (messages[0] is undefined).
var ErrEmpty = errors.New("chattmpl: empty conversation (the template needs at least one message)")

// Check reports what the Jinja template would reject or silently drop: an empty conversation
// (the template raises) and messages whose role is not system, user, assistant or tool (the
// template renders nothing for them). Render itself never fails; call Check first where such
// input must be refused.
func Check(msgs []chat.Message) error {
	if len(msgs) == 0 {
		return ErrEmpty
	}
	for i, m := range msgs {
		switch m.Role {
		case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant, RoleTool:
		default:
			return fmt.Errorf("chattmpl: message %d has role %q, which the chat template drops (want system, user, assistant or tool)", i, m.Role)
		}
	}
	return nil
}

// Render renders msgs as the Qwen2.5 template does with no tools and returns the text and the
// trainable spans, one per assistant message, in order.
//
// A span is the {% generation %} region of TRL's Qwen2.5 training template
// (trl/chat_templates/qwen2_5_training.jinja, which SFTTrainer swaps in for assistant_only_loss
// when the tokenizer's template has no generation blocks, as Qwen2.5's has not): the "\n" that
// ends the "<|im_start|>assistant" header, the content, "<|im_end|>" and the "\n" after it. The
// text is the shipped template's; only the spans come from the training variant. The generation
// prompt added by addGenerationPrompt is not a span (nothing has been generated yet).
//
// Messages with roles the template does not know are skipped, as the template skips them. An
// empty conversation, on which the template fails, renders as the default system turn alone
// (see Check). Content containing ChatML marker text is rendered verbatim, as the template does;
// RenderMarked tells the template's own markers from it.
func Render(msgs []chat.Message, addGenerationPrompt bool) (text string, spans []Span) {
	var b strings.Builder
	b.Grow(renderSize(msgs))
	spans = AppendRender(&b, msgs, addGenerationPrompt, nil)
	return b.String(), spans
}

// renderSize is the exact rendered size of msgs for the common roles, to size the buffer once.
func renderSize(msgs []chat.Message) int {
	n := len(ImStart) + len("system\n") + len(DefaultSystem) + len(ImEnd) + 1 + len(GenerationPrompt)
	for _, m := range msgs {
		n += len(ImStart) + len(m.Role) + 1 + len(m.Content) + len(ImEnd) + 1 + len("\n<tool_response>\n\n</tool_response>")
	}
	return n
}

// RenderMarked is Render that also returns the span of every ChatML marker (<|im_start|>,
// <|im_end|>) the template itself writes, in order. Those are the only control tokens of the
// rendering: marker text inside a message's content is not among them (Piece.Encode in package
// turns encodes it as plain text).
func RenderMarked(msgs []chat.Message, addGenerationPrompt bool) (text string, spans, markers []Span) {
	var b strings.Builder
	b.Grow(renderSize(msgs))
	markers = []Span{}
	spans = appendRender(&b, msgs, addGenerationPrompt, nil, &markers)
	return b.String(), spans, markers
}

// AppendRender writes the rendering of msgs to b (which may already hold text; spans are
// offsets into b's whole contents) and appends the spans to spans.
func AppendRender(b *strings.Builder, msgs []chat.Message, addGenerationPrompt bool, spans []Span) []Span {
	return appendRender(b, msgs, addGenerationPrompt, spans, nil)
}

// appendRender is AppendRender that, when markers is not nil, appends the span of each marker
// the template writes to *markers.
func appendRender(b *strings.Builder, msgs []chat.Message, addGenerationPrompt bool, spans []Span, markers *[]Span) []Span {
	mark := func(m string) {
		if markers != nil {
			*markers = append(*markers, Span{Start: b.Len(), End: b.Len() + len(m)})
		}
		b.WriteString(m)
	}
	mark(ImStart)
	b.WriteString("system\n")
	if len(msgs) > 0 && msgs[0].Role == chat.RoleSystem {
		b.WriteString(msgs[0].Content)
	} else {
		b.WriteString(DefaultSystem)
	}
	mark(ImEnd)
	b.WriteString("\n")
	for i, m := range msgs {
		switch {
		case m.Role == chat.RoleUser || (m.Role == chat.RoleSystem && i > 0):
			mark(ImStart)
			b.WriteString(m.Role)
			b.WriteString("\n")
			b.WriteString(m.Content)
			mark(ImEnd)
			b.WriteString("\n")
		case m.Role == chat.RoleAssistant:
			// chat.Message has no tool calls, so only the template's first assistant branch applies.
			mark(ImStart)
			b.WriteString(m.Role)
			start := b.Len()
			b.WriteString("\n")
			b.WriteString(m.Content)
			mark(ImEnd)
			b.WriteString("\n")
			spans = append(spans, Span{Start: start, End: b.Len()})
		case m.Role == RoleTool:
			if i == 0 || msgs[i-1].Role != RoleTool {
				mark(ImStart)
				b.WriteString(chat.RoleUser)
			}
			b.WriteString("\n<tool_response>\n")
			b.WriteString(m.Content)
			b.WriteString("\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != RoleTool {
				mark(ImEnd)
				b.WriteString("\n")
			}
		}
	}
	if addGenerationPrompt {
		mark(ImStart)
		b.WriteString(GenerationPrompt[len(ImStart):])
	}
	return spans
}
