package rundir

import (
	"strings"

	"github.com/chainedsql/chainedsql/protocol"
)

// WellFormed reports whether the turn's reply has the protocol's strict form, the format
// reward's rule (protocol.ParsedReply.WellFormed: optional whitespace, <think>reasoning</think>,
// optional whitespace, <sql>one non-blank statement</sql>, optional whitespace, each tag once,
// no tag inside either block, no other text), and was neither truncated nor a format violation.
// The reply is taken as the model produced it: reasoning that came in a separate field is put
// back as the think block in front of the content, and so is the <think> a chat template opened
// in the prompt (ThinkOpened). A turn whose texts were kept cut has the form recorded for its
// whole reply (Form).
func (t Turn) WellFormed() bool {
	if t.Truncated || t.FormatViolation {
		return false
	}
	switch t.Form {
	case FormWellFormed:
		return true
	case FormMalformed:
		return false
	}
	content := t.Content
	if strings.TrimSpace(t.Reasoning) != "" {
		content = protocol.TagThinkOpen + t.Reasoning + protocol.TagThinkClose + "\n" + content
	} else if t.ThinkOpened && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(content)), protocol.TagThinkOpen) {
		content = protocol.TagThinkOpen + content
	}
	return protocol.ParseReply(content).WellFormed
}

// MalformedTurns counts the turns that are not WellFormed: Outcome.MalformedTurns, the count
// the format reward and its penalty are charged on.
func MalformedTurns(turns []Turn) int {
	n := 0
	for _, t := range turns {
		if !t.WellFormed() {
			n++
		}
	}
	return n
}
