package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/sandbox"
)

// pgDB executes in one schema of a PostgreSQL database. Several pgDBs of one Connector share
// a server handle (its pool and statement slots): each execution sets its own search_path.
type pgDB struct {
	srv     *pgServer
	owned   bool // Close closes srv
	schema  string
	role    string // the task role each execution takes (pgTaskRole); "" as the DSN's user
	version string
	// usable are the schemas the executions' role may use (USAGE), read at Open: the names an
	// error may show as missing (hideSchemas).
	usable map[string]bool
	// runaways counts this pgDB's runaway backends still running (pgRunawaysPerDB).
	runaways atomic.Int64
}

// Open opens schema (which must exist) in the PostgreSQL database of dsn (a pgx URL or
// keyword/value string), executing as acc says: by default logged in as the reader made by
// EnsureReader, whose password is looked up with the DSN's user. Each Exec runs in a READ ONLY
// transaction with SET LOCAL statement_timeout, idle_in_transaction_session_timeout,
// search_path = schema, jit = off and, as the reader, ROLE = the schema's task role; at most
// pgMaxStatements run at once (see pgServer).
func Open(ctx context.Context, dsn, schema string, acc sandbox.Access) (sandbox.DB, error) {
	srv, err := openPostgresServer(ctx, dsn, acc, 0)
	if err != nil {
		return nil, err
	}
	db, err := newPostgresDB(ctx, srv, dsn, schema, acc)
	if err != nil {
		srv.closeAll()
		return nil, err
	}
	db.owned = true
	return db, nil
}

// openPostgresServer opens the server handle statements run through (see pgExecConfig and
// pgServer; at most slots statements when slots > 0) and, for a reader, checks that it logs in
// and holds nothing beyond a plain login.
func openPostgresServer(ctx context.Context, dsn string, acc sandbox.Access, slots int) (*pgServer, error) {
	cfg, err := pgExecConfig(ctx, dsn, acc)
	if err != nil {
		return nil, err
	}
	if !acc.AsDSNUser {
		// Backstops for any statement outside Exec's own transaction.
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	}
	srv, err := newPGServer(ctx, cfg, pgTarget(dsn), slots)
	if err != nil {
		return nil, err
	}
	if !acc.AsDSNUser {
		if err := checkPGReader(ctx, srv.pool, pgTarget(dsn), acc.ReaderName()); err != nil {
			srv.closeAll()
			return nil, err
		}
	}
	return srv, nil
}

// openPostgresPool opens a pool logged in as the DSN's own user (loading, administration).
func openPostgresPool(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN: %w", err)
	}
	return pgPool(cfg), nil
}

// pgPool opens a database/sql pool over pgx. Queries use the extended protocol without a
// named prepared statement (QueryExecModeExec): one round trip, and the server refuses a text
// holding several statements.
func pgPool(cfg *pgx.ConnConfig) *sql.DB {
	pgConfigure(cfg)
	pool := stdlib.OpenDB(*cfg)
	// Idle connections are kept up to the open limit: bursts (an RL trainer's batch steps)
	// would otherwise log in again each time (46 against 1,187 steps/s at 16 episodes in play,
	// docs/BENCHMARKS.md); a minute's idleness still closes them. A pgServer narrows both.
	pool.SetMaxOpenConns(32)
	pool.SetMaxIdleConns(32)
	pool.SetConnMaxIdleTime(time.Minute)
	return pool
}

// pgConfigure sets what every pool's connections share: the query mode and application_name.
func pgConfigure(cfg *pgx.ConnConfig) {
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "chainedsql"
}

// pgTarget names the server and database of dsn for error messages, without credentials.
func pgTarget(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "postgres"
	}
	return fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// newPostgresDB checks that schema exists and, unless acc.AsDSNUser, that the pool's reader
// may use it and read each of its tables, on a connection of the pool taken as an execution
// takes one (pgServer.conn), since other DBs of the server handle may be executing. A ctx that
// ends before it gets the connection is its error (ctx.Err, wrapped), not sandbox.ErrBusy.
func newPostgresDB(ctx context.Context, srv *pgServer, dsn, schema string, acc sandbox.Access) (*pgDB, error) {
	where := pgTarget(dsn)
	if schema == "" {
		return nil, fmt.Errorf("%s: empty schema name", where)
	}
	conn, done, err := srv.conn(ctx, nil)
	if err != nil {
		if ctx.Err() != nil { // the caller gave up, or its deadline passed: not the server's failure
			return nil, fmt.Errorf("%s: open schema %q: %w", where, schema, ctx.Err())
		}
		return nil, err
	}
	defer done()
	var v string
	if err := conn.QueryRowContext(ctx, "SHOW server_version").Scan(&v); err != nil {
		return nil, fmt.Errorf("%s: connect: %w", where, err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		return nil, fmt.Errorf("%s: look up schema %q: %w", where, schema, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: schema %q does not exist (copy the SQLite database first: distill load --dialect postgres)", where, schema)
	}
	role := ""
	if !acc.AsDSNUser {
		role = pgTaskRole(acc.ReaderName(), schema)
		var member, usable bool
		var unreadable int
		err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
				JOIN pg_catalog.pg_roles u ON u.oid = m.member WHERE g.rolname = $1 AND u.rolname = current_user)`, role).Scan(&member)
		if err == nil && member {
			err = conn.QueryRowContext(ctx, `SELECT has_schema_privilege($2::text, $1::text, 'USAGE'),
				(SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname::text = $1::text AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT has_table_privilege($2::text, c.oid, 'SELECT'))`,
				schema, role).Scan(&usable, &unreadable)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: check the reader's grants on schema %q: %w", where, schema, err)
		}
		if !member || !usable || unreadable > 0 {
			return nil, sandbox.ReaderUngranted(where, acc.ReaderName(), "schema", schema)
		}
	}
	usable, err := sandbox.QueryStrings(ctx, conn, `SELECT nspname::text FROM pg_catalog.pg_namespace
		WHERE has_schema_privilege(coalesce(nullif($1::text, ''), current_user::text), oid, 'USAGE')`, role)
	if err != nil {
		return nil, fmt.Errorf("%s: list the schemas the executions of %q may use: %w", where, schema, err)
	}
	if f := strings.Fields(v); len(f) > 0 {
		v = f[0]
	}
	db := &pgDB{srv: srv, schema: schema, role: role, version: "PostgreSQL " + v, usable: map[string]bool{}}
	for _, u := range usable {
		db.usable[u] = true
	}
	return db, nil
}

func (p *pgDB) Dialect() datasets.Dialect { return datasets.Postgres }
func (p *pgDB) Version() string           { return p.version }

func (p *pgDB) Close() error {
	if p.owned {
		return p.srv.closeAll()
	}
	return nil
}

func (p *pgDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	start := time.Now()
	stmt, timeout, refused := sandbox.StartExec(query, datasets.Postgres, opts)
	if refused != nil {
		return refused, nil
	}
	return p.run(ctx, start, stmt, timeout, opts)
}

// pgResetSession is what ends each execution: the rollback, then everything DISCARD ALL does
// (which cannot share a message with the ROLLBACK), so that nothing of one execution's session
// state (settings, advisory locks, prepared statements, cursors, LISTEN, temporary objects,
// sequence state) reaches the next execution on the pooled connection, whatever its task; and
// a new seed for random() from the server's strong random source (gen_random_uuid), since
// DISCARD ALL keeps the seed a setseed left (which the screen refuses too).
const pgResetSession = "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; " +
	"SELECT pg_catalog.pg_advisory_unlock_all(); UNLISTEN *; DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES; " +
	"SELECT pg_catalog.setseed(('x' || pg_catalog.left(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 8))::bit(32)::int / 2147483648.0)"

// pgKeepsBackendMemory reports whether stmt may leave its backend holding memory that no
// ROLLBACK, DISCARD ALL or reset frees, by its tokens (pgLex), so that run closes its connection
// instead of pooling it, and no later statement, another task's included, runs on a backend
// holding it:
//   - a regular expression: an operator holding ~ but LIKE's (~~, ~~*, !~~, !~~*), SIMILAR, a
//     name holding regex (regexp_replace, textregexeq, …), substring but with integer constants
//     after its text (substring(x from 1 for 3), substring(x, 2)). PostgreSQL 15 keeps the last
//     32 a backend compiled, malloc'ed, for its life, and a pattern of 2 KB compiles to up to
//     tens of MB (32 of them left an idle backend holding 220 MB);
//   - a time zone: TIME ZONE (AT TIME ZONE, WITH TIME ZONE), timezone(…), make_timestamptz(…),
//     date_trunc with a third argument, and a text read as a date or time (pgDatetimeTypes,
//     cast to one with :: or CAST, or typed as one: date '…', timestamp(x)), whose input names a
//     zone too ('2020-01-01 QAB1'::date). Each name the server parses (a POSIX zone such as
//     '<X1>1' or QAB1, of which a statement makes as many as it likes) is cached for the
//     backend's life, about 23 KB each: 20,000 in 0.7 s made 458 MB, and 10,000 dates cast
//     from built texts 235 MB in 0.9 s; and json_populate_record, json_to_record and their kin,
//     which read texts as a table's or a column list's types, dates among them.
//
// A column or other identifier named zone, timezone, substring or date is no reason.
func pgKeepsBackendMemory(stmt string) bool {
	s := newPGStmt(stmt)
	for i, t := range s.toks {
		switch {
		case t.kind == pgOp && strings.Contains(t.text, "~"):
			switch t.text {
			case "~~", "~~*", "!~~", "!~~*":
			default:
				return true
			}
		case !t.name():
		case t.text == "similar", strings.Contains(t.text, "regex"), strings.Contains(t.text, "populate_record"), strings.Contains(t.text, "to_record"):
			return true
		case t.text == "substring" && s.at(i+1).is("("):
			if !s.substringByPosition(i + 1) {
				return true
			}
		case t.text == "zone" && s.at(i-1).word("time"):
			return true
		case (t.text == "timezone" || t.text == "make_timestamptz") && s.at(i+1).is("("):
			return true
		case t.text == "date_trunc" && s.at(i+1).is("("):
			if len(s.args(pgSpan{i + 2, s.close[i+1]})) > 2 {
				return true
			}
		case pgDatetimeTypes[t.text]:
			if s.datetimeInput(i) {
				return true
			}
		}
	}
	return false
}

// pgDatetimeTypes are the types whose input from a text may name a time zone, which the server
// then parses and keeps (pgKeepsBackendMemory).
var pgDatetimeTypes = map[string]bool{
	"date": true, "timestamp": true, "timestamptz": true, "time": true, "timetz": true,
	"daterange": true, "tsrange": true, "tstzrange": true,
	"datemultirange": true, "tsmultirange": true, "tstzmultirange": true,
}

// datetimeInput reports whether the date or time type named by toks[i] (pgDatetimeTypes),
// plain or qualified by a schema (pg_catalog.date), may read a text naming a time zone: a cast
// to it (::, CAST … AS, date(x) with one argument, an array of it too) of anything but a string constant without a
// letter or a call that returns no text (date_trunc, generate_series, now), or a typed string
// constant (DATE '…') with a letter in it. A column named date, or '2023-01-01'::date, names none.
func (s *pgStmt) datetimeInput(i int) bool {
	k := i // the type name's first token
	if s.at(i-1).is(".") && s.at(i-2).name() {
		k = i - 2
	}
	prev, next := s.at(k-1), s.at(i+1)
	switch {
	case next.kind == pgString && !prev.is("::"):
		return pgHasLetter(next)
	case prev.is("::"):
		switch operand := s.at(k - 2); {
		case operand.kind == pgString:
			return pgHasLetter(operand)
		case operand.is(")") && s.open[k-2] > 0:
			return !pgNoTextCalls[s.at(s.open[k-2]-1).text]
		}
		return true
	case prev.word("as") && (next.is(")") || next.is("[") || next.word("array")):
		return true
	case next.is("("):
		// date(…) is a cast only with one argument: PostgreSQL 15 has no other date function,
		// so date('now', '-7 days') (SQLite's form, often written for PostgreSQL too) fails
		// looking up its function before reading any argument as a date; a cast inside an
		// argument is its own token's reason. The other types' calls take a second argument
		// (timestamp(d, t), time(x, 3)) and may read a text as a date or time.
		if s.toks[i].text == "date" && len(s.args(pgSpan{i + 2, s.close[i+1]})) != 1 {
			return false
		}
		return true
	}
	return false
}

// pgNoTextCalls return no text, so that a cast of theirs to a date or time type reads none
// (datetimeInput).
var pgNoTextCalls = map[string]bool{"date_trunc": true, "generate_series": true, "now": true, "to_timestamp": true, "to_date": true, "make_date": true, "make_timestamp": true}

// pgHasLetter reports whether the string constant tok may hold an ASCII letter, which any time
// zone's name needs: a plain one ('…') by its value, any other (E'…', U&'…', $$…$$, whose
// escapes may spell one) always.
func pgHasLetter(tok pgToken) bool {
	return !tok.plain || strings.ContainsFunc(tok.text, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' })
}

// substringByPosition reports whether the substring call whose "(" is toks[open] takes, after
// its text, only integer constants (substring(x from 1 for 3), substring(x, 2, 4)): that form
// compiles no regular expression, which one with a text there (substring(x from 'a.'),
// substring(x, y)) may.
func (s *pgStmt) substringByPosition(open int) bool {
	end := s.close[open]
	first := true
	for j := open + 1; j < end; j = s.skip(j) {
		t := s.toks[j]
		if t.is(",") || t.word("from") || t.word("for") {
			if first = false; s.at(j+1).kind != pgNumber || !(s.at(j+2).is(",") || s.at(j+2).word("for") || j+2 == end) {
				return false
			}
		}
	}
	return !first
}

// errHungUp is why a connection hung up on (hangUp) is not used again.
var errHungUp = errors.New("hung up")

// overRunaways is sandbox.ErrBusy naming them while the pgDB has pgRunawaysPerDB runaways,
// else nil. Not the statement's outcome: it never ran.
func (p *pgDB) overRunaways() error {
	if n := p.runaways.Load(); n >= pgRunawaysPerDB {
		return fmt.Errorf("postgres exec in schema %s: %w: %d of its statements' backends still run past their deadline (runaways, at most %d per schema; %d on this server handle); try again once they end",
			p.schema, sandbox.ErrBusy, n, pgRunawaysPerDB, p.srv.running.Load())
	}
	return nil
}

// run executes stmt, already screened, in a read-only transaction of its own on one of the
// server's capped connections. A statement that gets none by its deadline fails with
// sandbox.ErrBusy (pgServer.conn), and ExecOptions.Waiting is told of that wait only when one
// happens (sandbox.WaitTeller); one that gets one has its whole timeout from then on, on the
// server (statement_timeout) and here. A statement still running pgCancelAfter past its deadline
// (statement_timeout did not stop it) loses its connection, whose backend is then cancelled,
// terminated and, if it survives, counted, keeping its slot until it ends (pgServer.stop). A
// statement a RowFilter stopped is cancelled, and hung up on as at its deadline if its reply
// still streams after that (pgServer.stopper); its Result is ok whatever that took. While the
// pgDB has pgRunawaysPerDB runaways, a statement does not run and fails with sandbox.ErrBusy
// at once, and so does one that got its connection after they came (it waited meanwhile); those
// already running may each still add theirs: no per-schema bound below the handle's slots holds
// those (pgMaxStatements: one schema's 16 unstoppable statements running at once may all
// become runaways).
func (p *pgDB) run(ctx context.Context, start time.Time, stmt string, timeout time.Duration, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if err := p.overRunaways(); err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithDeadline(ctx, start.Add(timeout).Add(pgCancelAfter))
	w := sandbox.NewWaitTeller(opts.Waiting)
	conn, done, err := p.srv.conn(wctx, w)
	w.Close()
	wcancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("postgres exec: %w", ctx.Err())
		}
		return nil, fmt.Errorf("postgres exec in schema %s: %w", p.schema, err)
	}
	defer done()
	if err := p.overRunaways(); err != nil {
		// Runaways came while it waited: it does not run either (TestPostgresRunawaysAfterWait).
		return nil, err
	}
	// The statement's time starts once it has its connection, as statement_timeout's does on
	// the server and the MySQL engine's deadline: a wait for a slot is the load's, bounded
	// above (ErrBusy), and not taken off the statement's own time.
	qctx, cancel := context.WithTimeout(ctx, timeout+pgCancelAfter)
	defer cancel()
	ms := max(timeout.Milliseconds(), 1)
	idle := (timeout + sandbox.ServerGrace + sandbox.CleanupTimeout).Milliseconds() // the client is gone by then
	// standard_conforming_strings as the screen lexes strings (pgLex: a backslash in '…' is
	// itself), whatever a role or database default says. jit off: LLVM compiles and optimises a
	// plan's expressions without checking for interrupts, in time superlinear in their size
	// (a 60 KB sum of CASE terms compiled for 20 s past a 1 s statement_timeout). No parallel
	// workers: they are other processes, whose memory the memory watch does not read (and a
	// parallel hash's is shared memory, not a backend's RssAnon), so a statement's work handed
	// to them would escape its bound (TestPostgresMemoryWatchParallel).
	begin := fmt.Sprintf("BEGIN READ ONLY; SET LOCAL statement_timeout = %d; SET LOCAL idle_in_transaction_session_timeout = %d; SET LOCAL search_path = %s; SET LOCAL standard_conforming_strings = on; SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0",
		ms, idle, sandbox.QuoteIdent(datasets.Postgres, p.schema))
	if p.role != "" {
		// The task's own role: no other task's schema, no session of the login's.
		begin += "; SET LOCAL ROLE " + sandbox.QuoteIdent(datasets.Postgres, p.role)
	}
	if _, err := conn.ExecContext(qctx, begin); err != nil {
		sandbox.Discard(conn)
		if ctx.Err() == nil && qctx.Err() != nil {
			return sandbox.TimedOut(timeout, time.Since(start)), nil
		}
		return nil, fmt.Errorf("postgres exec in schema %s: begin: %w", p.schema, err)
	}
	spent := false // the backend has served its share (slotConn.serve)
	if _, sc := pgConnOf(conn); sc != nil {
		sc.owner.Store(&p.runaways) // should its backend outlive the connection (pgServer.stop)
		spent = sc.serve(len(stmt))
	}
	var hungUp atomic.Bool
	bound := opts.MaxServerMemory
	if bound == 0 {
		bound = sandbox.DefaultMaxServerMemory
	}
	watch := p.srv.watchMemory(ctx, conn, bound)
	res, qerr := sandbox.Collect(qctx, conn, stmt, opts, pgNormaliser, p.srv.stopper(ctx, conn, &hungUp))
	if watch.end() {
		// Cancelled over its memory bound: its backend keeps what it made (time zones are
		// cached for its life), so the connection is closed and the backend exits.
		hangUp(conn)
		sandbox.Discard(conn)
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: fmt.Sprintf("the statement used more than %d MiB of server memory and was stopped", bound>>20), Duration: time.Since(start)}, nil
	}
	var rerr error
	if qctx.Err() != nil || hungUp.Load() {
		// pgx broke the connection at the deadline, or a stopped statement's rest still streamed
		// after its cancel: the backend may still be at work.
		hangUp(conn)
		rerr = errors.Join(qctx.Err(), errHungUp)
	} else {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.CleanupTimeout)
		_, rerr = conn.ExecContext(rctx, pgResetSession)
		rcancel()
	}
	if rerr != nil || spent || pgKeepsBackendMemory(stmt) || watch.pooledOver() {
		sandbox.Discard(conn)
	}
	res.Duration = time.Since(start)
	if qerr == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("postgres exec: %w", ctx.Err())
	}
	if sandbox.IsTooLarge(qerr) || errors.As(qerr, new(*pgproto3.ExceededMaxBodyLenErr)) {
		sandbox.Discard(conn) // the rest of the reply is still on the wire
		return sandbox.TooLarge(res), nil
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(qerr, &pe) && pe.Code == "57014", qctx.Err() != nil:
		return sandbox.TimedOut(timeout, res.Duration), nil
	case errors.As(qerr, &pe) && serverFailure(pe.Code) && rerr != nil:
		sandbox.Discard(conn)
		return nil, fmt.Errorf("postgres exec in schema %s: the server ended the session: %w", p.schema, qerr)
	case errors.As(qerr, &pe):
		// The message may echo a value as large as the reply limit (a failed cast's input): kept
		// within textcap.Error here, where it is stored first.
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: textcap.Cut(p.hideSchemas(qerr, pe, stmt), textcap.Error), Duration: res.Duration}, nil
	}
	if rerr != nil {
		// The connection itself failed: the database cannot be used right now.
		return nil, fmt.Errorf("postgres exec in schema %s: %w", p.schema, errors.Join(qerr, rerr))
	}
	// The connection survived: client-side failures (decoding a value) are the statement's.
	return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: textcap.Cut(qerr.Error(), textcap.Error), Duration: res.Duration}, nil
}

// serverFailure reports whether SQLSTATE code may be the server's or its operator's doing, not
// the statement's: a connection exception (class 08) or an operator intervention (class 57P: the
// backend terminated, the server shutting down or starting, the database dropped). run takes it
// so only when the session is gone too (its reset failed): a statement can draw an 08P01
// (protocol violation) on a session that still works. The statement's own limits (57014
// query_canceled, 53xxx resources) stay its outcome.
func serverFailure(code string) bool {
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P")
}

// pgNormaliser maps pgx's database/sql values: numeric (text) through sandbox.NumericValue
// (int64 or the server's exact text); float4 through its shortest decimal form; json to text; the rest as Normalise does.
func pgNormaliser(cols []*sql.ColumnType) []func(any) any {
	out := make([]func(any) any, len(cols))
	for i, c := range cols {
		switch c.DatabaseTypeName() {
		case "NUMERIC":
			out[i] = sandbox.NumericValue
		case "FLOAT4":
			out[i] = func(v any) any {
				if f, ok := v.(float64); ok {
					return sandbox.Float32Value(float32(f))
				}
				return sandbox.Normalise(v)
			}
		case "JSON", "JSONB", "XML":
			out[i] = textValue
		default:
			out[i] = sandbox.Normalise
		}
	}
	return out
}

// textValue turns []byte into string.
func textValue(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return sandbox.Normalise(v)
}
