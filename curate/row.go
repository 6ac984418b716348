// Package curate turns distill run directories into a training dataset: Parquet shards with one
// row per trajectory (the conversation in TRL's SFT "messages" format plus metadata), exact token
// counts under the student's tokenizer and chat template, max-length exclusion, a Hugging Face
// dataset card and stats.json. It also reads datasets back and verifies their token counts.
package curate

import (
	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill"
)

// Message is one element of the messages column: list<struct<role: string, content: string>>,
// the conversational format TRL's SFTTrainer reads.
type Message struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
}

// Row is one dataset row; its field tags define the Parquet schema. Integers are int64, flags are
// booleans, everything else is a UTF-8 string (empty when unknown).
type Row struct {
	// Messages is the training text: system, user question, then assistant replies
	// (<think>…</think>\n<sql>…</sql> as recorded) and observation turns.
	Messages []Message `parquet:"messages,list" json:"messages"`
	// Reasoning holds each assistant turn's separate reasoning text (reasoning_content), in turn
	// order, empty where the endpoint gave none. It is not part of Messages.
	Reasoning        []string `parquet:"reasoning,list" json:"reasoning"`
	Teacher          string   `parquet:"teacher,dict" json:"teacher"`
	Model            string   `parquet:"model,dict" json:"model"`
	Dialect          string   `parquet:"dialect,dict" json:"dialect"`
	DBID             string   `parquet:"db_id,dict" json:"db_id"`
	TaskID           string   `parquet:"task_id" json:"task_id"`
	TaskIndex        int64    `parquet:"task_index" json:"task_index"`
	Sample           int64    `parquet:"sample" json:"sample"`
	Source           string   `parquet:"source,dict" json:"source"`
	Difficulty       string   `parquet:"difficulty,dict" json:"difficulty"`
	Question         string   `parquet:"question" json:"question"`
	Evidence         string   `parquet:"evidence" json:"evidence"`
	Turns            int64    `parquet:"turns" json:"turns"`
	Converged        bool     `parquet:"converged" json:"converged"`
	ExecOK           bool     `parquet:"exec_ok" json:"exec_ok"`
	Correct          bool     `parquet:"correct" json:"correct"`
	FormatViolations int64    `parquet:"format_violations" json:"format_violations"`
	// NumTokens is the length of the tokenized rendering (chat template, no generation prompt).
	NumTokens int64 `parquet:"num_tokens" json:"num_tokens"`
	// NumTrainableTokens counts the tokens in assistant spans (content plus <|im_end|>).
	NumTrainableTokens int64  `parquet:"num_trainable_tokens" json:"num_trainable_tokens"`
	FinalSQL           string `parquet:"final_sql" json:"final_sql"`
	GoldSQL            string `parquet:"gold_sql" json:"gold_sql"`
	PromptTokens       int64  `parquet:"teacher_prompt_tokens" json:"teacher_prompt_tokens"`
	CompletionTokens   int64  `parquet:"teacher_completion_tokens" json:"teacher_completion_tokens"`
	Protocol           string `parquet:"protocol,dict" json:"protocol"`
	// SourceRun is the run directory's base name; Key is the trajectory's unique key in it.
	SourceRun string `parquet:"source_run,dict" json:"source_run"`
	Key       string `parquet:"key" json:"key"`
}

// Features lists the columns in schema order with their Hugging Face `datasets` feature types,
// for the dataset card. messages is a list of {role, content} structs.
var Features = []Feature{
	{"messages", "list<struct<role:string,content:string>>"},
	{"reasoning", "list<string>"},
	{"teacher", "string"}, {"model", "string"}, {"dialect", "string"}, {"db_id", "string"},
	{"task_id", "string"}, {"task_index", "int64"}, {"sample", "int64"}, {"source", "string"},
	{"difficulty", "string"}, {"question", "string"}, {"evidence", "string"}, {"turns", "int64"},
	{"converged", "bool"}, {"exec_ok", "bool"}, {"correct", "bool"},
	{"format_violations", "int64"}, {"num_tokens", "int64"}, {"num_trainable_tokens", "int64"},
	{"final_sql", "string"}, {"gold_sql", "string"},
	{"teacher_prompt_tokens", "int64"}, {"teacher_completion_tokens", "int64"},
	{"protocol", "string"}, {"source_run", "string"}, {"key", "string"},
}

// Feature is one column name and its type.
type Feature struct {
	Name string
	Type string
}

// ChatMessages returns the row's messages as chat messages.
func (r *Row) ChatMessages() []chat.Message {
	out := make([]chat.Message, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// rowOf fills the metadata of a row from a trajectory (token counts are set by the caller).
func rowOf(t *distill.Trajectory, run string) Row {
	r := Row{
		Messages:         make([]Message, len(t.Messages)),
		Reasoning:        make([]string, 0, len(t.Turns)),
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
		Converged:        t.Converged,
		ExecOK:           t.ExecOK,
		Correct:          t.Correct,
		FormatViolations: int64(t.FormatViolations),
		FinalSQL:         t.FinalSQL,
		GoldSQL:          t.GoldSQL,
		PromptTokens:     int64(t.Usage.PromptTokens),
		CompletionTokens: int64(t.Usage.CompletionTokens),
		Protocol:         t.Protocol,
		SourceRun:        run,
		Key:              t.Key,
	}
	for i, m := range t.Messages {
		r.Messages[i] = Message{Role: m.Role, Content: m.Content}
	}
	for _, turn := range t.Turns {
		r.Reasoning = append(r.Reasoning, turn.Reasoning)
	}
	return r
}
