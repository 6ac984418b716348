package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// What every engine's Exec shares: screening and the deadline before a statement, the rows'
// collection with the shared limits after it.

// MaxStatement bounds the text of a statement any Exec sends: past a server's packet limit
// (MySQL's max_allowed_packet, 4 to 64 MiB) the text is a lost connection, the database's
// failure, on every try, so a longer one is refused unsent. It stands above a policy's own limit
// (textcap.SQL, 64 KiB): a gold, a scored prediction or the viewer's statement is not held to
// that one.
const MaxStatement = 1 << 20

// StartExec is the start of every engine's DB.Exec: it refuses a query longer than MaxStatement,
// screens it for dialect d (the rules of every engine, then d's own ScreenRules) and resolves
// opts.Timeout (zero means DefaultTimeout). A non-nil Result is the refusal Exec returns as it is. Otherwise Exec runs stmt, the screened statement,
// within timeout, and returns TimedOut past it, TooLarge for an error IsTooLarge reports, and
// the rows gathered by Collect.
func StartExec(query string, d datasets.Dialect, opts ExecOptions) (string, time.Duration, *Result) {
	start := time.Now()
	if len(query) > MaxStatement {
		return "", 0, &Result{Outcome: OutcomeRefused, Error: fmt.Sprintf("refused: the statement is %d bytes long; at most %d are run", len(query), MaxStatement)}
	}
	stmt, reason := Screen(query, d)
	if reason != "" {
		return "", 0, &Result{Outcome: OutcomeRefused, Error: reason, Duration: time.Since(start)}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return stmt, timeout, nil
}

// DefaultTimeout is a statement's time limit where ExecOptions.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// TimedOut is the Result of a statement stopped at its deadline.
func TimedOut(timeout, took time.Duration) *Result {
	return &Result{Outcome: OutcomeTimeout, Error: fmt.Sprintf("statement stopped after %s", timeout), Duration: took}
}

// Queryer is what Collect runs a query on: *sql.DB, *sql.Conn or *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ColumnNormaliser returns, for the result columns, one function per column mapping a driver
// value onto a normalised value (see Result).
type ColumnNormaliser func(cols []*sql.ColumnType) []func(any) any

// Collect runs query on db and gathers columns, the rows opts keeps (opts.Filter, then
// opts.MaxRows; the other options are the caller's) and their total, into a Result of
// OutcomeOK; any error of the query or its rows is returned as it is, with what was gathered.
// norm maps driver values per column; nil means Normalise. Rows kept past MaxResultBytes (by
// rowSize) end it with errResultTooLarge; rows only counted or skipped are dropped as they come,
// and each row taken restarts the reply window of the connection db reads through (when db is a
// *sql.Conn of a pool opened with TrackReplies) at the bytes kept, so that they stream however
// many there are while what is kept and the row being read stay within MaxResultBytes together.
// A RowFilter's stop ends the statement (stopRows, through stop: see Stopper) and returns the
// rows read, OutcomeOK, with no error, whatever ending it did; Result.Stopped then reports it.
// Every engine's Exec, and any test engine, gathers its rows here.
func Collect(ctx context.Context, db Queryer, query string, opts ExecOptions, norm ColumnNormaliser, stop Stopper) (*Result, error) {
	res := &Result{}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return res, err
	}
	res.Columns = cols
	conv := make([]func(any) any, len(cols))
	for i := range conv {
		conv[i] = Normalise
	}
	if norm != nil {
		types, err := rows.ColumnTypes()
		if err != nil {
			return res, err
		}
		conv = norm(types)
	}
	maxRows, kept := opts.MaxRows, 0
	win := replyWindow(db)
	for rows.Next() {
		win.rowTaken(kept)
		res.Total++
		if maxRows > 0 && len(res.Rows) >= maxRows && opts.Filter == nil {
			res.Truncated = true
			continue
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return res, err
		}
		for i, v := range vals {
			vals[i] = conv[i](v)
		}
		if act := keep(opts, vals, len(res.Rows)); act != RowKeep {
			res.Truncated = true
			if act == RowStop {
				stopRows(rows, stop)
				res.Outcome, res.stopped = OutcomeOK, true
				return res, nil
			}
			continue
		}
		kept += rowSize(vals)
		if kept > MaxResultBytes {
			return res, errResultTooLarge
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.Outcome = OutcomeOK
	return res, nil
}

// StopDrain is how long, after a RowFilter's stop, the driver may read the rest of the reply off
// the connection and drop it (what closing rows does on the servers) before the statement is
// ended on its server: a rest already sent, or nearly, is read in far less, and the connection
// stays in its pool; a statement still producing rows is stopped instead of drained to its end.
const StopDrain = 50 * time.Millisecond

// A Stopper ends on its server the statement whose rows Collect stopped reading (a RowFilter's
// stop) and whose rest the driver is still draining StopDrain later (PostgreSQL: a cancel
// request; MySQL: KILL QUERY), escalating as the engine's deadline does if that is not enough
// (a hang-up, KILL CONNECTION). It returns once done is closed (the drain ended) or once the
// drain is bound to end at once (the connection is closed), and Collect then waits for done. The
// statement's slot stays the engine's to account for: a server statement that may outlive the
// stop is the engine's runaway, as at its deadline. nil drains the rest however long it takes
// (SQLite needs none: closing its rows resets the statement without running it further).
type Stopper func(done <-chan struct{})

// stopRows closes rows after a RowFilter's stop: the driver drains what is left of the reply
// for up to StopDrain, then stop ends the statement on its server (see Stopper).
func stopRows(rows *sql.Rows, stop Stopper) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rows.Close()
	}()
	if stop != nil {
		t := time.NewTimer(StopDrain)
		select {
		case <-done:
		case <-t.C:
			stop(done)
		}
		t.Stop()
	}
	<-done
}

// keep is what opts decides about row, with n rows kept before it: opts.Filter's answer, then
// RowSkip past opts.MaxRows.
func keep(opts ExecOptions, row []any, n int) RowAction {
	act := RowKeep
	if opts.Filter != nil {
		act = opts.Filter(row)
	}
	if act == RowKeep && opts.MaxRows > 0 && n >= opts.MaxRows {
		act = RowSkip
	}
	return act
}

// Normalise maps driver values onto nil, int64, float64, string, []byte, bool or time.Time. A
// []byte is kept as it is, not copied: Collect's values come from Scan into *any, which already
// copied the driver's bytes (a third copy of every blob was a third of a big result's memory).
func Normalise(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	}
	return v
}
