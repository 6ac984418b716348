package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// Outcome classifies one execution.
type Outcome string

// Execution outcomes.
const (
	OutcomeOK      Outcome = "ok"
	OutcomeError   Outcome = "error"   // the engine rejected the statement; Result.Error has its text
	OutcomeTimeout Outcome = "timeout" // the deadline passed; the statement was stopped
	OutcomeRefused Outcome = "refused" // the toolkit refused it (writes, several statements, ATTACH, ...)
)

// ExecOptions bound one execution.
type ExecOptions struct {
	// Timeout stops the statement; zero means 30 s.
	Timeout time.Duration
	// MaxRows caps the rows kept in Result.Rows; zero means no cap. Counting continues past the
	// cap so Result.Total is exact (bounded by the timeout).
	MaxRows int
	// Filter, when not nil, decides for each row in turn whether it is kept, before MaxRows and
	// the size limit apply to it (see RowFilter).
	Filter RowFilter
	// Waiting, when not nil, is called with true when the execution starts waiting for one of
	// its engine's execution slots (a connection of a server's capped pool; SQLite's heap, held
	// by others, for a statement that ran out of it: see ErrBusy) and with false when that wait
	// ends, with a slot or without one; an execution that never waits does not call it. It lets
	// a caller that shares one execution among several deadlines (the env's gold) tell a
	// statement not started by a deadline (ErrBusy) from one running past it (its timeout).
	Waiting func(waiting bool)
	// MaxServerMemory bounds the anonymous memory (RssAnon) of a PostgreSQL statement's backend
	// while the statement runs, where the server is on this host and its backend provably the
	// statement's (docs/DESIGN.md, "Execution security"): past it the statement is cancelled,
	// its outcome an error saying so, and its connection closed. Zero means
	// DefaultMaxServerMemory; negative, no bound. Other engines ignore it.
	MaxServerMemory int64
}

// DefaultMaxServerMemory is ExecOptions.MaxServerMemory's default, 2 GiB: far above what a
// legitimate statement's backend holds (work_mem, 4 MB by default, bounds each sort and hash
// before it spills to disk; the per-backend caches a statement fills, 32 compiled regular
// expressions, time zones named by its text, take tens to a few hundred MB), yet 16 statement
// slots at once stay within 32 GiB, and a statement making up time zones (about 620 MB a
// second) is stopped within about 3 s, not at its deadline's tens of GB.
const DefaultMaxServerMemory = 2 << 30

// RowFilter is asked about each row of a result, in the order the engine returns them, with its
// values normalised (see Result); row is the filter's to read during the call only. RowKeep
// keeps the row (MaxRows and the size limit then apply as without a filter); RowSkip counts it in
// Result.Total and keeps nothing of it, so it costs no memory and no part of the size limit;
// RowStop does the same and ends the statement there, on its server too: no later row is read
// into the Result; a rest of the reply the driver reads off the connection within StopDrain is
// dropped, and a statement still producing rows then is stopped on its server (a cancel request,
// KILL QUERY; see Stopper), not left to run to its deadline. The Result of a stop is OutcomeOK on
// every engine, whatever ending the statement took (a cancel, a hang-up, its deadline passing
// meanwhile), with Truncated set, Total counting only the rows read, Duration the whole
// execution's, and Stopped true. A row skipped or stopped on sets Result.Truncated. Every
// engine's Exec applies it, in Collect. An Exec that fails, with ErrBusy too (SQLite's heap
// running out after some rows), may have asked the filter about rows: a caller that tries again
// gives a fresh filter (the judge does).
type RowFilter func(row []any) RowAction

// RowAction is a RowFilter's decision about one row.
type RowAction uint8

// Row actions.
const (
	RowKeep RowAction = iota // keep the row
	RowSkip                  // count it, keep nothing of it
	RowStop                  // count it, keep nothing of it, read no further
)

// Result is the outcome of one statement. Values are normalised Go values: nil, int64, float64,
// Decimal (a server's exact number), string, []byte, bool, or time.Time (MySQL's dates and
// times are the server's text, '0000-00-00' included).
type Result struct {
	Outcome Outcome  `json:"outcome"`
	Columns []string `json:"columns,omitempty"`
	Rows    [][]any  `json:"rows,omitempty"`
	Total   int      `json:"total"`
	// Truncated says Rows does not hold every row Total counts (MaxRows, a RowFilter).
	Truncated bool `json:"truncated,omitempty"`
	// Error is the engine's own error text (OutcomeError), or why the statement was refused.
	Error string `json:"error,omitempty"`
	// Duration is the time Exec took, from its call to its answer: screening, the wait for an
	// execution slot (ExecOptions.Waiting tells it), the statement and the session's reset. A
	// caller that compares a statement with a time limit after the fact takes the wait off
	// (the env's gold cache, env.goldRun).
	Duration time.Duration `json:"duration_ns"`

	stopped bool // a RowFilter stopped the statement (Collect); not serialised
}

// OK reports whether the statement ran.
func (r *Result) OK() bool { return r != nil && r.Outcome == OutcomeOK }

// Stopped reports whether a RowFilter stopped the statement (RowStop), as Collect returned the
// Result; a Result decoded from JSON or built anew does not say.
func (r *Result) Stopped() bool { return r != nil && r.stopped }

// DB is one task database in one dialect, executing statements read-only. Safe for concurrent use.
// Exec returns a non-nil error only when the database itself cannot be used (connection lost,
// context cancelled, no execution slot for the statement within its deadline: ErrBusy); SQL
// errors, refusals and the timeout of a statement that ran past its own deadline are Results.
type DB interface {
	Dialect() datasets.Dialect
	// Version is the engine and version, e.g. "SQLite 3.46.1" or "PostgreSQL 15.19".
	Version() string
	Exec(ctx context.Context, sql string, opts ExecOptions) (*Result, error)
	Close() error
}

// ErrBusy is wrapped by the error of an Exec whose statement got no execution slot of its engine
// within its deadline, or (SQLite) found them all held by statements running past their own
// deadlines (Runaways), or (SQLite) ran out of the process's SQLite heap (making its connection
// too) while other statements held most of it and they still held it through its time limit
// after (it then waits, one such statement of the process at a time, to run again: running out
// then is its own error unless others took most of the heap again meanwhile, when it waits for
// room again within that limit; one whose RowFilter was asked about rows is ErrBusy at once, not run
// again with that filter), or (SQLite) found no space left on its temporary files' disk, or no
// file descriptor left to open one (the system's, or the process's while others hold more than
// half of its limit: a statement whose own temporary files took them has its own error) or to
// make its connection: the
// statement never ran, or failed for what others held, so this is
// the database's failure, never the statement's timeout or error. It passes when those
// statements end; the caller tries again later (the env answers 503 with Retry-After, batch jobs
// wait through Patient). It is wrapped too by the error of a SQLite Open whose first connection
// finds no file descriptor left, which its openers try again (RetryBusy).
var ErrBusy = errors.New("no execution slot free for the statement")

// Runaways counts the statements of one dialect that outlived their deadline and everything
// meant to stop them at it (SQLite: the progress handler and the interrupt, then abandoned;
// PostgreSQL: cancel and terminate; MariaDB: KILL QUERY and KILL): work the engine could not
// interrupt. Each running one holds a slot of its engine's cap until it ends.
type Runaways struct {
	// Total is how many were counted since the Connector opened (SQLite: the process started).
	Total int64 `json:"total"`
	// Running is how many still run now.
	Running int64 `json:"running"`
}
