package rundir

import (
	"encoding/json"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/protocol"
)

// v1Trajectory is a shard line of a run dir of format v1 (RunFormatV1): the conversation in
// messages (assistant messages with the reasoning the client extracted) and the turns again.
type v1Trajectory struct {
	Trajectory
	Messages []struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Reasoning string `json:"reasoning"`
	} `json:"messages"`
	Turns []struct {
		Turn
		Raw string `json:"raw"`
	} `json:"turns"`
}

// decodeV1 reads a v1 shard line into the current Trajectory. System and Prompt come from the
// first two messages; each turn's content is its raw reply. Version 1 recorded as a turn's
// reasoning the separate reasoning field when there was one, else a copy of the inline <think>
// block, and not which: a reasoning equal to the content's own think block is dropped as that
// copy, any other is kept as a field's text of unknown name (ReasoningSource ""). Flags and
// observations stay as recorded (v1 counted a reply cut inside <sql> as a format violation).
func decodeV1(line []byte, tr *Trajectory) error {
	var v v1Trajectory
	if err := json.Unmarshal(line, &v); err != nil {
		return err
	}
	*tr = v.Trajectory
	if len(v.Messages) > 0 && v.Messages[0].Role == chat.RoleSystem {
		tr.System = v.Messages[0].Content
	}
	if len(v.Messages) > 1 && v.Messages[1].Role == chat.RoleUser {
		tr.Prompt = v.Messages[1].Content
	}
	tr.Turns = make([]Turn, len(v.Turns))
	for i, vt := range v.Turns {
		t := vt.Turn
		t.Content = vt.Raw
		if r := strings.TrimSpace(t.Reasoning); r != "" {
			p := protocol.ParseReply(t.Content)
			if p.HasThink && (r == p.Think || strings.Contains(t.Content, r)) {
				t.Reasoning = ""
			}
		}
		tr.Turns[i] = t
	}
	return nil
}
