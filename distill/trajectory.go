// Package distill runs the chained-sql/v1 protocol: the prompt, the reply parser, observations,
// convergence, the Episode loop for any chat.Policy, and the concurrent resumable runner that
// writes run directories.
package distill

import (
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
)

// ProtocolVersion names the protocol this package speaks.
const ProtocolVersion = "chained-sql/v1"

// Turn records one assistant turn and what came of it.
type Turn struct {
	Index     int    `json:"index"`
	Raw       string `json:"raw"`
	Reasoning string `json:"reasoning,omitempty"`
	// SQL is the parsed statement; empty on a format violation.
	SQL             string `json:"sql,omitempty"`
	FormatViolation bool   `json:"format_violation,omitempty"`
	// Outcome of executing SQL; nil on a format violation.
	Exec         *ExecRecord   `json:"exec,omitempty"`
	Observation  string        `json:"observation"`
	Latency      time.Duration `json:"latency_ns"`
	Usage        chat.Usage    `json:"usage"`
	FinishReason string        `json:"finish_reason,omitempty"`
	// Attempts is how many requests the reply took (1 without retries; 0 when unknown).
	Attempts int `json:"attempts,omitempty"`
}

// ExecRecord is the part of a datasets.Result kept in a trajectory (no rows beyond the
// observation, which already shows them).
type ExecRecord struct {
	Outcome   datasets.Outcome `json:"outcome"`
	Columns   []string         `json:"columns,omitempty"`
	Total     int              `json:"total"`
	Truncated bool             `json:"truncated,omitempty"`
	Error     string           `json:"error,omitempty"`
	Duration  time.Duration    `json:"duration_ns"`
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
	Sample     int              `json:"sample"`
	// Messages is the whole conversation: system, user question, then assistant and
	// observation turns alternating, as a trainer would see it.
	Messages         []chat.Message `json:"messages"`
	Turns            []Turn         `json:"turns"`
	FinalSQL         string         `json:"final_sql,omitempty"`
	Converged        bool           `json:"converged"`
	ExecOK           bool           `json:"exec_ok"`
	Correct          bool           `json:"correct"`
	GoldSQL          string         `json:"gold_sql,omitempty"`
	GoldError        string         `json:"gold_error,omitempty"`
	FormatViolations int            `json:"format_violations"`
	Usage            chat.Usage     `json:"usage"`
	Started          time.Time      `json:"started"`
	Duration         time.Duration  `json:"duration_ns"`
}
