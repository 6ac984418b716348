package rundir

import (
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Turn records one assistant turn exactly as the policy returned it, and what came of it. It is
// the only copy of the turn in a run dir: the conversation is rebuilt from the turns
// (Trajectory.Conversation).
type Turn struct {
	Index int `json:"index"`
	// Content is the reply's content exactly as received (an inline <think> block included).
	Content string `json:"content"`
	// Reasoning is the reply's separate reasoning text exactly as received, "" when the reply
	// had none; ReasoningSource names its field (chat.Source*). Inline reasoning is not copied
	// here: ParseReply(Content) finds it.
	Reasoning       string `json:"reasoning,omitempty"`
	ReasoningSource string `json:"reasoning_source,omitempty"`
	// FinishReason is the reply's finish reason (chat vocabulary); ProviderFinishReason the
	// provider's own value when it differs.
	FinishReason         string `json:"finish_reason,omitempty"`
	ProviderFinishReason string `json:"provider_finish_reason,omitempty"`
	// SQL is the parsed statement that was executed; empty on a format violation or truncation.
	SQL string `json:"sql,omitempty"`
	// FormatViolation marks a complete reply without a usable <sql> block.
	FormatViolation bool `json:"format_violation,omitempty"`
	// Truncated marks a reply cut before its SQL was complete (see Truncated): the teacher got
	// the truncation notice; it is not a format violation.
	Truncated bool `json:"truncated,omitempty"`
	// Exec is the outcome of executing SQL; nil when nothing ran.
	Exec        *ExecRecord   `json:"exec,omitempty"`
	Observation string        `json:"observation"`
	Latency     time.Duration `json:"latency_ns"`
	Usage       chat.Usage    `json:"usage"`
	// Attempts is how many requests the reply took (1 without retries; 0 when unknown).
	Attempts int `json:"attempts,omitempty"`
	// ThinkOpened records chat.Reply.ThinkOpened: the teacher's chat template opened the
	// <think> block in the prompt, so the content began inside the reasoning.
	ThinkOpened bool `json:"think_opened,omitempty"`
	// Form is the protocol form of a reply whose Content or Reasoning was kept cut (textcap:
	// the RL environment keeps 64 KiB of each), FormWellFormed or FormMalformed, judged on the
	// whole reply when it was played (WellFormed), since the texts kept no longer
	// tell it; "" when the texts were kept whole and tell it themselves.
	Form string `json:"form,omitempty"`
}

// The values of Turn.Form.
const (
	FormWellFormed = "well_formed"
	FormMalformed  = "malformed"
)

// Reply is the turn's reply as the policy returned it.
func (t Turn) Reply() chat.Reply {
	return chat.Reply{Content: t.Content, Reasoning: t.Reasoning, ReasoningSource: t.ReasoningSource, FinishReason: t.FinishReason,
		ProviderFinishReason: t.ProviderFinishReason, Usage: t.Usage, Latency: t.Latency, Attempts: t.Attempts, ThinkOpened: t.ThinkOpened}
}

// ExecRecord is the part of a sandbox.Result kept in a trajectory (no rows beyond the
// observation, which already shows them).
type ExecRecord struct {
	Outcome   sandbox.Outcome `json:"outcome"`
	Columns   []string        `json:"columns,omitempty"`
	Total     int             `json:"total"`
	Truncated bool            `json:"truncated,omitempty"`
	Error     string          `json:"error,omitempty"`
	Duration  time.Duration   `json:"duration_ns"`
}

// Trajectory is one complete episode: one line of a shard.
type Trajectory struct {
	Protocol   string           `json:"protocol"`
	Key        string           `json:"key"`
	TaskID     string           `json:"task_id"`
	TaskIndex  int              `json:"task_index"`
	Source     string           `json:"source"`
	DBID       string           `json:"db_id"`
	Question   string           `json:"question"`
	Evidence   string           `json:"evidence,omitempty"`
	Difficulty string           `json:"difficulty,omitempty"`
	Dialect    datasets.Dialect `json:"dialect"`
	Teacher    string           `json:"teacher"`
	Model      string           `json:"model,omitempty"`
	// WeightsPath and WeightsVersion name the checkpoint of a policy whose weights a trainer
	// reloads (student rollout: the weights directory and its version, 1 for the weights the
	// process started with); empty for other policies.
	WeightsPath    string `json:"weights_path,omitempty"`
	WeightsVersion int64  `json:"weights_version,omitempty"`
	Sample         int    `json:"sample"`
	// System and Prompt are the conversation's first two turns: the system prompt and the user
	// turn with the question.
	System string `json:"system"`
	Prompt string `json:"prompt"`
	// Turns are the assistant turns in order.
	Turns    []Turn `json:"turns"`
	FinalSQL string `json:"final_sql,omitempty"`
	// Repeated says the episode ended because the same SQL came on two consecutive turns,
	// whether or not it ran (the stop rule; kept under its old JSON name "converged"). The
	// convergence metric is Outcome().Converged.
	Repeated  bool   `json:"converged"`
	ExecOK    bool   `json:"exec_ok"`
	Correct   bool   `json:"correct"`
	GoldSQL   string `json:"gold_sql,omitempty"`
	GoldError string `json:"gold_error,omitempty"`
	// GoldDialect is the engine whose result of the gold SQL the episode was judged against when
	// it is not Dialect: the task's SQLite file, after the gold failed on Dialect
	// (datasets.Task.GoldReference); empty when it is Dialect.
	GoldDialect      datasets.Dialect `json:"gold_dialect,omitempty"`
	FormatViolations int              `json:"format_violations"`
	TruncatedTurns   int              `json:"truncated_turns,omitempty"`
	Usage            chat.Usage       `json:"usage"`
	Started          time.Time        `json:"started"`
	Duration         time.Duration    `json:"duration_ns"`
}

// Conversation is the conversation the policy saw, ending with its last reply: system, user
// question, then each turn's content and, between turns, its observation as a user turn. The
// last turn's observation is not included (nothing answered it). Assistant messages carry the
// content as received; rendering them for training (think blocks) is curate's job.
func (t *Trajectory) Conversation() []chat.Message {
	msgs := make([]chat.Message, 0, 2+2*len(t.Turns))
	msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: t.System}, chat.Message{Role: chat.RoleUser, Content: t.Prompt})
	for i, tu := range t.Turns {
		if i > 0 {
			msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: t.Turns[i-1].Observation})
		}
		msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, Content: tu.Content})
	}
	return msgs
}

// Outcome returns what the episode came to (Outcome): the one definition of converged,
// exec-ok, correct, format violations, truncated turns, malformed turns and unjudged that
// every count uses.
func (t *Trajectory) Outcome() Outcome {
	return NewOutcome(t.Repeated, t.ExecOK, t.Correct, len(t.Turns), t.FormatViolations, t.TruncatedTurns, MalformedTurns(t.Turns), t.GoldError)
}
