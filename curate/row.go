// Package curate turns distill run directories into a training dataset: Parquet shards with one
// row per trajectory (the conversation in TRL's SFT "messages" format plus metadata), exact token
// counts under the student's tokenizer and chat template, max-length exclusion, a Hugging Face
// dataset card and stats.json. It also reads datasets back and verifies their token counts.
package curate

import (
	"slices"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// Row is one dataset row; its field tags define the Parquet schema. Integers are int64, flags are
// booleans, everything else is a UTF-8 string (empty when unknown).
type Row struct {
	// Messages is the training text: system, user question, then assistant replies rendered by
	// Render under ThinkMode (<think>…</think>\n<sql>…</sql>) and observation turns.
	Messages []chat.Message `parquet:"messages,list" json:"messages"`
	// Reasoning holds each assistant turn's separate reasoning text exactly as received
	// (reasoning_content, reasoning or reasoning_details), in turn order, empty where the
	// endpoint gave none.
	Reasoning []string `parquet:"reasoning,list" json:"reasoning"`
	// ThinkMode is the --think mode the row was rendered with; ThinkSources says, per assistant
	// turn, where its think block came from (field, inline, none); InlineThinkDropped counts
	// turns whose inline <think> was left out.
	ThinkSources       []string `parquet:"think_sources,list" json:"think_sources"`
	ThinkMode          string   `parquet:"think_mode,dict" json:"think_mode"`
	InlineThinkDropped int64    `parquet:"inline_think_dropped" json:"inline_think_dropped"`
	Teacher            string   `parquet:"teacher,dict" json:"teacher"`
	Model              string   `parquet:"model,dict" json:"model"`
	Dialect            string   `parquet:"dialect,dict" json:"dialect"`
	DBID               string   `parquet:"db_id,dict" json:"db_id"`
	TaskID             string   `parquet:"task_id" json:"task_id"`
	TaskIndex          int64    `parquet:"task_index" json:"task_index"`
	Sample             int64    `parquet:"sample" json:"sample"`
	Source             string   `parquet:"source,dict" json:"source"`
	Difficulty         string   `parquet:"difficulty,dict" json:"difficulty"`
	Question           string   `parquet:"question" json:"question"`
	Evidence           string   `parquet:"evidence" json:"evidence"`
	Turns              int64    `parquet:"turns" json:"turns"`
	// Converged, ExecOK and Correct are the trajectory's rundir.Outcome. Converged is the same
	// SQL twice in a row and that SQL ran; datasets before chainedsql-sft/v4 hold the raw repeat
	// (a failing statement given twice included), which Outcome reads as converged AND exec_ok.
	Converged        bool  `parquet:"converged" json:"converged"`
	ExecOK           bool  `parquet:"exec_ok" json:"exec_ok"`
	Correct          bool  `parquet:"correct" json:"correct"`
	FormatViolations int64 `parquet:"format_violations" json:"format_violations"`
	// TruncatedTurns counts turns cut by the token limit (or another non-stop finish) before
	// their SQL was complete; they are not format violations.
	TruncatedTurns int64 `parquet:"truncated_turns" json:"truncated_turns"`
	// MalformedTurns counts the replies that were not well-formed under the format reward's
	// rule (rundir.Turn.WellFormed: exactly one <think>…</think> then one <sql>…</sql>); the
	// row's format reward is 1 when it is 0. Datasets built before the column read 0.
	MalformedTurns int64 `parquet:"malformed_turns" json:"malformed_turns"`
	// NumTokens is the length of the tokenized rendering (chat template, no generation prompt).
	NumTokens int64 `parquet:"num_tokens" json:"num_tokens"`
	// NumTrainableTokens counts the tokens in assistant spans ("\n", content, <|im_end|>, "\n").
	NumTrainableTokens int64  `parquet:"num_trainable_tokens" json:"num_trainable_tokens"`
	FinalSQL           string `parquet:"final_sql" json:"final_sql"`
	GoldSQL            string `parquet:"gold_sql" json:"gold_sql"`
	// GoldError is why the gold SQL gave no result (the run dir's gold_error, at most
	// textcap.Error bytes): the row is unjudged (Outcome().Unjudged) and correct is false
	// whatever the final SQL. Empty when the gold ran, and in datasets before chainedsql-sft/v5
	// (whose unjudged rows cannot be told apart).
	GoldError string `parquet:"gold_error" json:"gold_error"`
	// GoldDialect is the engine whose result of the gold SQL the final SQL was compared with:
	// the row's dialect, or sqlite where the gold failed on a server and ran on the task's
	// SQLite file (rundir.Trajectory.GoldDialect). Empty when the gold gave no result
	// (GoldError) and in datasets before chainedsql-sft/v5.
	GoldDialect      string `parquet:"gold_dialect,dict" json:"gold_dialect"`
	PromptTokens     int64  `parquet:"teacher_prompt_tokens" json:"teacher_prompt_tokens"`
	CompletionTokens int64  `parquet:"teacher_completion_tokens" json:"teacher_completion_tokens"`
	CachedTokens     int64  `parquet:"teacher_cached_prompt_tokens" json:"teacher_cached_prompt_tokens"`
	// ReasoningTokens are the teacher's reasoning tokens: as the provider reported them, and
	// for turns whose provider reported none but which have reasoning text, that text counted
	// with the student tokenizer (ReasoningTokensEstimated is then true).
	ReasoningTokens          int64   `parquet:"teacher_reasoning_tokens" json:"teacher_reasoning_tokens"`
	ReasoningTokensEstimated bool    `parquet:"teacher_reasoning_tokens_estimated" json:"teacher_reasoning_tokens_estimated"`
	CostUSD                  float64 `parquet:"teacher_cost_usd" json:"teacher_cost_usd"`
	Protocol                 string  `parquet:"protocol,dict" json:"protocol"`
	// SourceRun is the run directory's base name; Key is the trajectory's unique key in it.
	SourceRun string `parquet:"source_run,dict" json:"source_run"`
	Key       string `parquet:"key" json:"key"`
}

// Features lists the columns in schema order with their Hugging Face `datasets` feature types,
// for the dataset card. messages is a list of {role, content} structs.
var Features = []Feature{
	{"messages", "list<struct<role:string,content:string>>"},
	{"reasoning", "list<string>"},
	{"think_sources", "list<string>"}, {"think_mode", "string"}, {"inline_think_dropped", "int64"},
	{"teacher", "string"}, {"model", "string"}, {"dialect", "string"}, {"db_id", "string"},
	{"task_id", "string"}, {"task_index", "int64"}, {"sample", "int64"}, {"source", "string"},
	{"difficulty", "string"}, {"question", "string"}, {"evidence", "string"}, {"turns", "int64"},
	{"converged", "bool"}, {"exec_ok", "bool"}, {"correct", "bool"},
	{"format_violations", "int64"}, {"truncated_turns", "int64"}, {"malformed_turns", "int64"}, {"num_tokens", "int64"}, {"num_trainable_tokens", "int64"},
	{"final_sql", "string"}, {"gold_sql", "string"}, {"gold_error", "string"}, {"gold_dialect", "string"},
	{"teacher_prompt_tokens", "int64"}, {"teacher_completion_tokens", "int64"}, {"teacher_cached_prompt_tokens", "int64"},
	{"teacher_reasoning_tokens", "int64"}, {"teacher_reasoning_tokens_estimated", "bool"}, {"teacher_cost_usd", "float64"},
	{"protocol", "string"}, {"source_run", "string"}, {"key", "string"},
}

// Feature is one column name and its type.
type Feature struct {
	Name string
	Type string
}

// Outcome returns the row's outcome as its columns record it, read alike from datasets of every
// format version (rundir.NewOutcome: converged counts only where exec_ok is set; unjudged where
// gold_error is set, so never in datasets before chainedsql-sft/v5).
func (r *Row) Outcome() rundir.Outcome {
	return rundir.NewOutcome(r.Converged, r.ExecOK, r.Correct, int(r.Turns), int(r.FormatViolations), int(r.TruncatedTurns), int(r.MalformedTurns), r.GoldError)
}

// goldDialect is the row's gold_dialect: where the gold SQL's result came from, "" when it
// gave none.
func goldDialect(t *rundir.Trajectory) string {
	switch {
	case t.GoldError != "":
		return ""
	case t.GoldDialect != "":
		return string(t.GoldDialect)
	}
	return string(t.Dialect)
}

// rowOf fills a row from a trajectory and its rendering (token counts are set by the caller).
func rowOf(t *rundir.Trajectory, r *Rendered, mode ThinkMode, run string) Row {
	o := t.Outcome()
	row := Row{
		Messages:         slices.Clone(r.Messages),
		Reasoning:        make([]string, 0, len(t.Turns)),
		ThinkMode:        string(mode),
		ThinkSources:     make([]string, 0, len(t.Turns)),
		Teacher:          t.Teacher,
		Model:            t.Model,
		Dialect:          string(t.Dialect),
		DBID:             t.DBID,
		TaskID:           t.TaskID,
		TaskIndex:        int64(t.TaskIndex),
		Sample:           int64(t.Sample),
		Source:           t.Source,
		Difficulty:       t.Difficulty,
		Question:         t.Question,
		Evidence:         t.Evidence,
		Turns:            int64(len(t.Turns)),
		Converged:        o.Converged,
		ExecOK:           o.ExecOK,
		Correct:          o.Correct,
		FormatViolations: int64(o.FormatViolations),
		TruncatedTurns:   int64(o.TruncatedTurns),
		MalformedTurns:   int64(o.MalformedTurns),
		FinalSQL:         t.FinalSQL,
		GoldSQL:          t.GoldSQL,
		GoldError:        textcap.Cut(t.GoldError, textcap.Error), // again: older run dirs kept it whole
		GoldDialect:      goldDialect(t),
		PromptTokens:     int64(t.Usage.PromptTokens),
		CompletionTokens: int64(t.Usage.CompletionTokens),
		CachedTokens:     int64(t.Usage.CachedTokens),
		CostUSD:          t.Usage.CostUSD,
		Protocol:         t.Protocol,
		SourceRun:        run,
		Key:              t.Key,
	}
	for i, turn := range t.Turns {
		row.Reasoning = append(row.Reasoning, turn.Reasoning)
		row.ThinkSources = append(row.ThinkSources, r.Turns[i].Source)
		if r.Turns[i].InlineDropped {
			row.InlineThinkDropped++
		}
	}
	return row
}

// reasoningTokens is the teacher's reasoning token count of t: per turn the provider's figure,
// or, when it reported none and the turn has reasoning text (its field, else its inline block),
// that text's length under the student tokenizer; estimated reports any such turn.
func reasoningTokens(t *rundir.Trajectory, tok Tokenizer) (n int64, estimated bool) {
	for _, tu := range t.Turns {
		if tu.Usage.ReasoningTokens > 0 {
			n += int64(tu.Usage.ReasoningTokens)
			continue
		}
		text := strings.TrimSpace(tu.Reasoning)
		if text == "" {
			text = protocol.ParseReply(protocol.ReplyContent(tu.Reply())).Think
		}
		if text != "" {
			n += int64(len(tok.Encode(text)))
			estimated = true
		}
	}
	return n, estimated
}
