package sandbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/chainedsql/chainedsql/datasets"
)

// DefaultReader is the PostgreSQL role and MySQL user that statements run as, unless told
// otherwise (Access.Reader, distill --reader).
const DefaultReader = "chainedsql_reader"

// DefaultReaderHosts are the hosts the MySQL reader user is created for: a client on the
// server's own machine connects as one of them.
var DefaultReaderHosts = []string{"localhost", "127.0.0.1"}

// ErrReader marks the errors that say the reader is missing, lacks a grant on a task's
// database, or holds more than reads. distill load (EnsureReader) fixes each of them.
var ErrReader = errors.New("reader not set up")

// ReaderMeta is where the reader's generated password is kept, readable only by the server's
// administrators: a schema (PostgreSQL) or database (MySQL, where it also holds the copy
// markers) the reader is never granted.
const ReaderMeta = "chainedsql_meta"

// Access says whom statements run as on PostgreSQL and MySQL. The zero value runs them as
// DefaultReader.
type Access struct {
	// Reader is the role/user made by EnsureReader that statements run as; "" means
	// DefaultReader. The DSN handed to the Connector is used only to look up its password.
	Reader string
	// AsDSNUser runs statements as the DSN's own user instead of a reader, guarded only by the
	// read-only transaction and the screen: for users who manage their own read-only accounts.
	AsDSNUser bool
}

// ReaderName returns the name of the reader statements run as (Reader, or DefaultReader).
func (a Access) ReaderName() string {
	if a.Reader == "" {
		return DefaultReader
	}
	return a.Reader
}

// ReaderSetup describes the reader EnsureReader creates or updates.
type ReaderSetup struct {
	// Name is the role/user; "" means DefaultReader.
	Name string
	// Hosts are the MySQL hosts the user is created for; nil means DefaultReaderHosts.
	// PostgreSQL ignores it.
	Hosts []string
}

// ReaderReport says what EnsureReader did.
type ReaderReport struct {
	Name string `json:"name"`
	// Created is true when the role/user did not exist before.
	Created bool `json:"created,omitempty"`
	// Changes name what was reset on an existing reader (attributes, memberships, privileges
	// beyond SELECT, its password).
	Changes []string `json:"changes,omitempty"`
	// Granted are the schemas/databases the reader may now read.
	Granted []string `json:"granted"`
	// Warnings name bounds the DSN's user could not set on the reader (PostgreSQL's superuser-only
	// settings), with what they leave open.
	Warnings []string `json:"warnings,omitempty"`
}

// readerName is what a reader may be called: unquoted-safe in both servers, at most 32
// characters (MySQL's limit).
var readerName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`)

// CheckReaderName returns an error unless name may be a reader's: 1-32 lower-case letters,
// digits or '_', not starting with a digit (unquoted-safe on both servers).
func CheckReaderName(name string) error {
	if !readerName.MatchString(name) {
		return fmt.Errorf("reader name %q: want 1-32 lower-case letters, digits or '_', not starting with a digit", name)
	}
	return nil
}

// EnsureReader creates, or brings back to least privilege, the reader of dialect d on the
// server of dsn (a superuser's, or one allowed to create roles and grant on targets), and grants
// it read access to each of targets (schemas in the DSN's PostgreSQL database, or MySQL
// databases), keeping the grants it already has.
//
// The reader's login holds no grant itself: each target gets a task role (named by each
// engine) holding its reads, which executions in that target take, so that a statement
// of one task reads no other. PostgreSQL: a LOGIN NOINHERIT role with no superuser,
// replication, BYPASSRLS, CREATEDB or CREATEROLE, member of its task roles only (so none of
// pg_read_all_settings, pg_monitor, ...), defaulting to read-only transactions; each task role
// NOLOGIN with USAGE on its schema and SELECT on its tables; CONNECT on the database only when
// PUBLIC lacks it. MySQL: a user per host with no privilege, granted its task roles, each with
// SELECT on its database only (the name's _ and % escaped so they match no other database);
// every other privilege and role revoked, from the login and from the task roles. The password is generated on creation and kept in the chainedsql_meta schema or
// database, which only administrators can read; it never leaves the servers. Safe to run again
// and from several processes at once (a server-side lock serialises them).
func EnsureReader(ctx context.Context, d datasets.Dialect, dsn string, setup ReaderSetup, targets []string) (ReaderReport, error) {
	name := setup.Name
	if name == "" {
		name = DefaultReader
	}
	rep := ReaderReport{Name: name}
	if err := CheckReaderName(name); err != nil {
		return rep, err
	}
	for _, t := range targets {
		if !targetName.MatchString(t) {
			return rep, fmt.Errorf("reader %s: target %q: want 1-48 letters, digits or '_'", name, t)
		}
	}
	admin, err := readerAdmin(d)
	if err != nil {
		return rep, fmt.Errorf("reader %s: %w", name, err)
	}
	return admin.EnsureReader(ctx, dsn, name, setup, targets)
}

// readerAdmin returns dialect d's ReaderAdmin, or an error naming the dialects that have one.
func readerAdmin(d datasets.Dialect) (ReaderAdmin, error) { return optionalPart[ReaderAdmin](d) }

// DropReader removes the reader name of dialect d from the server of dsn, with its grants and
// its stored password. A reader that does not exist is not an error.
func DropReader(ctx context.Context, d datasets.Dialect, dsn, name string) error {
	if err := CheckReaderName(name); err != nil {
		return err
	}
	admin, err := readerAdmin(d)
	if err != nil {
		return fmt.Errorf("drop reader %s: %w", name, err)
	}
	return admin.DropReader(ctx, dsn, name)
}

// DescribeDSNUser names the user of dsn on its server and what it may do beyond reading, for
// the warning a command prints when statements run as the DSN's own user.
func DescribeDSNUser(ctx context.Context, d datasets.Dialect, dsn string) (string, error) {
	admin, err := readerAdmin(d)
	if err != nil {
		return "", fmt.Errorf("describe the DSN's user: %w", err)
	}
	return admin.DescribeDSNUser(ctx, dsn)
}

// asDSNUserWarning is the warning a command prints when statements run as the DSN's own user
// (Access.AsDSNUser): who that user is, what it may do, and what still guards the server.
func asDSNUserWarning(ctx context.Context, d datasets.Dialect, dsn string) string {
	who, err := DescribeDSNUser(ctx, d, dsn)
	if err != nil {
		who = fmt.Sprintf("the %s DSN's own user (%v)", d, err)
	}
	return fmt.Sprintf("--exec-as-dsn-user: every statement the policies write runs as %s, with only a read-only transaction and a text screen in its way; use this only with a user you made read-only yourself", who)
}

// NewPassword returns a random password of 48 hex digits.
func NewPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate the reader's password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Execer runs a statement: a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SetupExec returns the statement runner of a reader's setup on an administrator's connection
// or transaction: an error names the statement's first line, cut before secret (the keyword
// the engine's password follows: " IDENTIFIED BY ", " PASSWORD "), so the password is never
// echoed.
func SetupExec(ctx context.Context, ex Execer, secret string) func(q string, args ...any) error {
	return func(q string, args ...any) error {
		if _, err := ex.ExecContext(ctx, q, args...); err != nil {
			q, _, _ = strings.Cut(q, secret)
			return fmt.Errorf("%s: %w", FirstLine(q), err)
		}
		return nil
	}
}

// RowQueryer reads one row: a *sql.DB, *sql.Conn or *sql.Tx.
type RowQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// StoredPassword returns the reader's password kept in ReaderMeta, read by query (one column,
// the reader's name its one argument), and stored true; or, when no row holds one, a new
// password (NewPassword) and stored false.
func StoredPassword(ctx context.Context, q RowQueryer, query, name string) (password string, stored bool, err error) {
	var p sql.NullString
	if err := q.QueryRowContext(ctx, query, name).Scan(&p); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", false, fmt.Errorf("read the stored password: %w", err)
	}
	if p.Valid {
		return p.String, true, nil
	}
	password, err = NewPassword()
	return password, false, err
}

// SQLString quotes s as a standard SQL string literal.
func SQLString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ReaderMissing is the ErrReader error for a reader that is not there.
func ReaderMissing(where, what string) error {
	return fmt.Errorf("%s: %s: %w (distill load creates it and grants it what it loads; --exec-as-dsn-user runs as the DSN's own user instead)", where, what, ErrReader)
}

// ReaderUngranted is the ErrReader error for a task database the reader may not read.
func ReaderUngranted(where, reader, kind, target string) error {
	return fmt.Errorf("%s: reader %s may not read %s %q: %w (run distill load for these tasks; it grants the reader each database it loads)", where, reader, kind, target, ErrReader)
}

// readerPrivileged is the ErrReader error for a reader holding more than reads.
func readerPrivileged(where, reader string, extra []string) error {
	return fmt.Errorf("%s: reader %s holds more than read access (%s): %w (run distill load to reset it)", where, reader, strings.Join(extra, ", "), ErrReader)
}

// AddUnique appends s to list unless it is there.
func AddUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// ReaderProbe reads, on a connection of the reader itself, what CheckReader judges. Each server
// engine implements it once, on a connection logged in as the reader; the judgement is
// CheckReader's alone.
type ReaderProbe interface {
	// CurrentUser returns the user the connection logged in as, as the server shows it, and its
	// name without a host.
	CurrentUser(ctx context.Context) (shown, name string, err error)
	// LoginHint says what to do about err, a failed CurrentUser, when the server refused the
	// login itself (a wrong or missing password); "" for any other error.
	LoginHint(err error) string
	// Privileges lists what the login holds itself beyond logging in, and the roles granted to it.
	Privileges(ctx context.Context) (extra, roles []string, err error)
	// OtherRole is how a granted role that is none of the reader's task roles is listed.
	OtherRole(role string) string
	// TaskRole lists what task role holds beyond reading its one target.
	TaskRole(ctx context.Context, role string) ([]string, error)
}

// CheckReader checks, on a connection of reader name itself (p), that it logs in as name, holds
// no privilege of its own, and is granted no role but its task roles (named name/...), each
// holding reads of one target only. A refused login and a reader holding more are ErrReader
// errors; where starts every error.
func CheckReader(ctx context.Context, where, name string, p ReaderProbe) error {
	user, login, err := p.CurrentUser(ctx)
	if err != nil {
		if hint := p.LoginHint(err); hint != "" {
			return fmt.Errorf("%s: log in as reader %s: %v: %w (%s)", where, name, err, ErrReader, hint)
		}
		return fmt.Errorf("%s: log in as reader %s: %w", where, name, err)
	}
	if login != name {
		return fmt.Errorf("%s: logged in as %q, want reader %s", where, user, name)
	}
	extra, roles, err := p.Privileges(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	for _, r := range roles {
		if !strings.HasPrefix(r, name+"/") {
			extra = append(extra, p.OtherRole(r))
			continue
		}
		held, err := p.TaskRole(ctx, r)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		for _, h := range held {
			extra = append(extra, "role "+r+": "+h)
		}
	}
	if len(extra) > 0 {
		return readerPrivileged(where, name, extra)
	}
	return nil
}
