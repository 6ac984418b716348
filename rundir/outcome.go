package rundir

// Outcome is what one episode came to, defined once: the dataset's Parquet columns and card,
// curate stats, the eval summary, the viewer, the distill summary and the rewards all count
// these fields and nothing else.
type Outcome struct {
	// Converged is the seed's metric: the episode ended on the same SQL twice in a row and that
	// SQL ran. Repeating a failing statement ends the episode but does not converge.
	Converged bool `json:"converged"`
	// ExecOK says the final SQL (the last statement executed) ran: no error, timeout or refusal.
	ExecOK bool `json:"exec_ok"`
	// Correct says the final SQL's result matched the gold's (false when not judged).
	Correct bool `json:"correct"`
	// Turns counts the assistant turns; FormatViolations those that were complete replies
	// without a usable <sql> block; TruncatedTurns those cut before their SQL was complete;
	// MalformedTurns those failing the format reward's stricter rule (Turn.WellFormed: exactly
	// one <think>…</think> then one <sql>…</sql>), which counts every format violation and
	// truncated turn and also replies with a usable statement in a looser form (no think block,
	// text outside the blocks, a tag repeated).
	Turns            int `json:"turns"`
	FormatViolations int `json:"format_violations"`
	TruncatedTurns   int `json:"truncated_turns"`
	MalformedTurns   int `json:"malformed_turns"`
	// Unjudged says the final SQL could not be judged: the task's gold SQL gave no result
	// (it failed on the dialect, and on the task's reference where it has one, or the task
	// has no gold for the dialect). Correct is then false, whatever the final SQL.
	Unjudged bool `json:"unjudged"`
}

// NewOutcome returns the outcome of an episode from its recorded flags. repeated is the
// episode's stop reason as a run dir records it (Trajectory.Converged: the same SQL twice in a
// row, whether or not it ran); a converged flag that already means Outcome.Converged (a dataset
// column or an eval result written since) gives the same outcome, so records of either age read
// alike. goldError is the recorded reason the gold SQL gave no result (Trajectory.GoldError, a
// dataset's gold_error column, an eval result's gold_error): the episode is Unjudged when it
// is not empty. malformedTurns is MalformedTurns(turns) as recorded (a dataset's
// malformed_turns column, an eval result's malformed_turns; 0 in records written before them).
func NewOutcome(repeated, execOK, correct bool, turns, formatViolations, truncatedTurns, malformedTurns int, goldError string) Outcome {
	return Outcome{Converged: repeated && execOK, ExecOK: execOK, Correct: correct, Turns: turns,
		FormatViolations: formatViolations, TruncatedTurns: truncatedTurns, MalformedTurns: malformedTurns, Unjudged: goldError != ""}
}

// Truncated reports whether any turn was truncated.
func (o Outcome) Truncated() bool { return o.TruncatedTurns > 0 }

// Tally counts outcomes: the one place a group of episodes is summed.
type Tally struct {
	// N counts the outcomes added; Converged, ExecOK and Correct those with the flag.
	N, Converged, ExecOK, Correct int
	// Turns sums the turns.
	Turns int
	// RowsWithViolation counts outcomes with a format violation; FormatViolations sums them.
	RowsWithViolation, FormatViolations int
	// RowsTruncated counts outcomes with a truncated turn; TruncatedTurns sums them.
	RowsTruncated, TruncatedTurns int
	// MalformedTurns sums the outcomes' malformed turns (the format reward's count).
	MalformedTurns int
	// Unjudged counts the outcomes that are Unjudged (counted as not correct).
	Unjudged int
}

// Add counts o.
func (t *Tally) Add(o Outcome) {
	t.N++
	t.Converged += b2i(o.Converged)
	t.ExecOK += b2i(o.ExecOK)
	t.Correct += b2i(o.Correct)
	t.Turns += o.Turns
	t.FormatViolations += o.FormatViolations
	t.RowsWithViolation += b2i(o.FormatViolations > 0)
	t.TruncatedTurns += o.TruncatedTurns
	t.RowsTruncated += b2i(o.Truncated())
	t.MalformedTurns += o.MalformedTurns
	t.Unjudged += b2i(o.Unjudged)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
