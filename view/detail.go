package view

import (
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// Detail is the trajectory page of one row.
type Detail struct {
	ID         int    `json:"id"`
	Kind       Kind   `json:"kind"`
	Source     string `json:"source"`
	Key        string `json:"key"`
	Teacher    string `json:"teacher"`
	Model      string `json:"model"`
	Dialect    string `json:"dialect"`
	DBID       string `json:"db_id"`
	TaskID     string `json:"task_id"`
	Difficulty string `json:"difficulty"`
	Sample     int    `json:"sample"`
	Question   string `json:"question"`
	Evidence   string `json:"evidence"`
	System     string `json:"system"`
	User       string `json:"user"`
	GoldSQL    string `json:"gold_sql"`
	// GoldError is why the gold SQL gave no result (the row is unjudged); GoldDialect where
	// its result came from when that is not Dialect (a server task's SQLite file).
	GoldError   string `json:"gold_error,omitempty"`
	GoldDialect string `json:"gold_dialect,omitempty"`
	FinalSQL    string `json:"final_sql"`
	// FinalSQLFormatted and GoldSQLFormatted are the two laid out by formatSQL.
	FinalSQLFormatted string `json:"final_sql_formatted"`
	GoldSQLFormatted  string `json:"gold_sql_formatted"`
	Converged         bool   `json:"converged"`
	ExecOK            bool   `json:"exec_ok"`
	Correct           bool   `json:"correct"`
	Violations        int    `json:"format_violations"`
	// NumTokens and NumTrainable are the dataset's stored counts (0 for run dirs).
	NumTokens    int64 `json:"num_tokens"`
	NumTrainable int64 `json:"num_trainable_tokens"`
	// TeacherPrompt and TeacherCompletion are the teacher's own usage over the episode.
	TeacherPrompt     int        `json:"teacher_prompt_tokens"`
	TeacherCompletion int        `json:"teacher_completion_tokens"`
	Turns             []TurnView `json:"turns"`
	// Notes are remarks shown above the turns.
	Notes []string `json:"notes"`
	// MaskError says why the loss mask is not available (no tokenizer, excluded row).
	MaskError string `json:"mask_error,omitempty"`
	// Error is set when the row could not be read; the other fields are then mostly empty.
	Error string `json:"error,omitempty"`
	// Annotation is the row's note and labels (datasets only; Rev 0 when it has none yet).
	Annotation *Annotation `json:"annotation,omitempty"`
}

// TurnView is one assistant turn.
type TurnView struct {
	Index int `json:"index"`
	// Think is the turn's reasoning; ThinkSource says where it came from: "content" (a
	// <think> block in the message, trained on), "field" (the endpoint's separate reasoning
	// field, not in the training text) or "" (none).
	Think       string `json:"think"`
	ThinkSource string `json:"think_source"`
	SQL         string `json:"sql"`
	// Reply is the assistant message as stored (the training text of the turn).
	Reply           string       `json:"reply"`
	FormatViolation bool         `json:"format_violation"`
	Truncated       bool         `json:"truncated"`
	Observation     *Observation `json:"observation,omitempty"`
	// Outcome is the execution outcome (ok, error, timeout, refused) when recorded.
	Outcome string `json:"outcome,omitempty"`
	// Trainable is the number of loss-carrying student tokens of this turn (-1: unknown).
	Trainable         int     `json:"trainable"`
	PromptTokens      int     `json:"prompt_tokens"`
	CompletionTokens  int     `json:"completion_tokens"`
	ReasoningTokens   int     `json:"reasoning_tokens"`
	LatencyMS         float64 `json:"latency_ms"`
	FinishReason      string  `json:"finish_reason,omitempty"`
	ObservationAbsent string  `json:"observation_absent,omitempty"`
}

// assistantParts splits an assistant message into what the trajectory page shows: the
// reasoning with its source, and the SQL. It is the one place that knows how assistant text
// and the separate reasoning field relate. A dataset row's message is already rendered
// (curate.Render), so its think block is the training text's and source is the row's
// think_sources entry; a run-dir turn is rendered here as curate build --think auto would.
func assistantParts(content, source string) (think, src, sql string, ok bool) {
	p := protocol.ParseReply(content)
	if p.HasThink {
		think, src = p.Think, source
		if src == "" {
			src = curate.ThinkFromInline
		}
	}
	return think, src, p.SQL, p.OK
}

// detailOfRow builds the page of a dataset row.
func detailOfRow(r *curate.Row) *Detail {
	d := &Detail{
		Kind: KindDataset, Source: r.SourceRun, Key: r.Key, Teacher: r.Teacher, Model: r.Model, Dialect: r.Dialect, DBID: r.DBID,
		TaskID: r.TaskID, Difficulty: r.Difficulty, Sample: int(r.Sample), Question: r.Question, Evidence: r.Evidence,
		GoldSQL: r.GoldSQL, GoldError: r.GoldError, GoldDialect: r.GoldDialect, FinalSQL: r.FinalSQL, Converged: r.Outcome().Converged, ExecOK: r.ExecOK, Correct: r.Correct,
		Violations: int(r.FormatViolations), NumTokens: r.NumTokens, NumTrainable: r.NumTrainableTokens,
		TeacherPrompt: int(r.PromptTokens), TeacherCompletion: int(r.CompletionTokens), Turns: []TurnView{}, Notes: []string{},
	}
	msgs := r.Messages
	d.System, d.User = head(msgs)
	for k := 0; ; k++ {
		a, ok := assistantMessage(msgs, k)
		if !ok {
			break
		}
		source := ""
		if k < len(r.ThinkSources) {
			source = r.ThinkSources[k]
		}
		tv := turnOf(k, a.Content, source)
		if o, ok := observationMessage(msgs, k); ok {
			tv.Observation = parseObservation(o.Content)
			tv.Truncated = strings.Contains(o.Content, protocol.TruncatedReplyText)
		} else {
			tv.ObservationAbsent = "the observation after the last reply is not part of the training text, so the dataset does not keep it"
		}
		d.Turns = append(d.Turns, tv)
	}
	return d
}

// detailOfTrajectory builds the page of a run-dir trajectory.
func detailOfTrajectory(t *rundir.Trajectory) *Detail {
	d := &Detail{
		Kind: KindRun, Key: t.Key, Teacher: t.Teacher, Model: t.Model, Dialect: string(t.Dialect), DBID: t.DBID,
		TaskID: t.TaskID, Difficulty: t.Difficulty, Sample: t.Sample, Question: t.Question, Evidence: t.Evidence,
		GoldSQL: t.GoldSQL, GoldError: t.GoldError, GoldDialect: string(t.GoldDialect), FinalSQL: t.FinalSQL, Converged: t.Outcome().Converged, ExecOK: t.ExecOK, Correct: t.Correct,
		Violations: t.FormatViolations, TeacherPrompt: t.Usage.PromptTokens, TeacherCompletion: t.Usage.CompletionTokens,
		Turns: []TurnView{}, Notes: []string{},
	}
	d.System, d.User = t.System, t.Prompt
	for k, tu := range t.Turns {
		rt := curate.RenderTurn(tu, curate.ThinkAuto)
		tv := TurnView{Index: k + 1, Think: rt.Think, ThinkSource: rt.Source, Reply: tu.Content, Trainable: -1}
		if rt.Source == curate.ThinkFromNone {
			tv.Think, tv.ThinkSource = "", ""
		}
		// The recorded parse wins over a re-parse: it is what the episode acted on.
		tv.SQL, tv.FormatViolation, tv.Truncated = tu.SQL, tu.FormatViolation, tu.Truncated
		tv.Observation = parseObservation(tu.Observation)
		if tu.Exec != nil {
			tv.Outcome = string(tu.Exec.Outcome)
		}
		tv.PromptTokens, tv.CompletionTokens, tv.ReasoningTokens = tu.Usage.PromptTokens, tu.Usage.CompletionTokens, tu.Usage.ReasoningTokens
		tv.LatencyMS = float64(tu.Latency.Microseconds()) / 1000
		tv.FinishReason = tu.FinishReason
		d.Turns = append(d.Turns, tv)
	}
	return d
}

func turnOf(k int, content, source string) TurnView {
	think, source, sql, ok := assistantParts(content, source)
	return TurnView{Index: k + 1, Think: think, ThinkSource: source, SQL: sql, Reply: content, FormatViolation: !ok, Trainable: -1}
}

// head returns the system and first user messages.
func head(msgs []chat.Message) (system, user string) {
	for _, m := range msgs[:min(2, len(msgs))] {
		switch m.Role {
		case chat.RoleSystem:
			system = m.Content
		case chat.RoleUser:
			user = m.Content
		}
	}
	return system, user
}
