package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// pgReaderLock serialises reader set-ups on one PostgreSQL cluster (role names are cluster-wide).
const pgReaderLock = "SELECT pg_advisory_xact_lock(hashtext('chainedsql-reader'))"

// pgReaderTempLimit caps the temporary files one reader session may write (sorts and hashes
// spilling to disk), so a hostile cross join cannot fill the server's disk before its timeout.
const pgReaderTempLimit = "4GB"

// pgRoleAttrs are the attributes of a role that matter to least privilege.
type pgRoleAttrs struct {
	super, replication, bypassRLS, createRole, createDB, login, inherit bool
}

// pgTaskRole is the NOLOGIN role holding reader's grants on one loaded schema: "reader/schema",
// or, past PostgreSQL's 63-byte names, that cut short with a hash of schema. A reader's names
// never hold "/", so the prefix "reader/" is its own. Every execution in schema runs under
// SET LOCAL ROLE of it: a statement of one task can read no other task's schema, and no
// session of the reader's login (another execution's statement text, its backend) is its.
func pgTaskRole(reader, schema string) string {
	r := reader + "/" + schema
	if len(r) <= 63 {
		return r
	}
	h := sha256.Sum256([]byte(schema))
	return r[:63-9] + "~" + hex.EncodeToString(h[:4])
}

// pgTaskRolePrefix is what the names of reader's task roles start with.
func pgTaskRolePrefix(reader string) string { return reader + "/" }

// extras names the attributes beyond a plain login.
func (a pgRoleAttrs) extras() []string {
	var out []string
	for _, x := range []struct {
		on   bool
		name string
	}{{a.super, "SUPERUSER"}, {a.replication, "REPLICATION"}, {a.bypassRLS, "BYPASSRLS"}, {a.createRole, "CREATEROLE"}, {a.createDB, "CREATEDB"}} {
		if x.on {
			out = append(out, x.name)
		}
	}
	return out
}

// pgQueryer is what the role look-ups run on: *sql.DB, *sql.Conn or *sql.Tx.
type pgQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// pgRole reads the attributes and role memberships of role; ok is false when it does not exist.
func pgRole(ctx context.Context, q pgQueryer, role string) (a pgRoleAttrs, memberOf []string, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT rolsuper, rolreplication, rolbypassrls, rolcreaterole, rolcreatedb, rolcanlogin, rolinherit
		FROM pg_catalog.pg_roles WHERE rolname = $1`, role).Scan(&a.super, &a.replication, &a.bypassRLS, &a.createRole, &a.createDB, &a.login, &a.inherit)
	if errors.Is(err, sql.ErrNoRows) {
		return a, nil, false, nil
	}
	if err != nil {
		return a, nil, false, fmt.Errorf("look up role %s: %w", role, err)
	}
	rows, err := q.QueryContext(ctx, `SELECT g.rolname::text FROM pg_catalog.pg_auth_members m
		JOIN pg_catalog.pg_roles g ON g.oid = m.roleid JOIN pg_catalog.pg_roles u ON u.oid = m.member
		WHERE u.rolname = $1 ORDER BY 1`, role)
	if err != nil {
		return a, nil, true, fmt.Errorf("look up the memberships of role %s: %w", role, err)
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return a, nil, true, err
		}
		memberOf = append(memberOf, g)
	}
	return a, memberOf, true, rows.Err()
}

// pgReaderTx opens a transaction as the DSN's user holding the reader set-up lock; done rolls
// back what was not committed and closes the pool.
func pgReaderTx(ctx context.Context, dsn string) (tx *sql.Tx, done func(), err error) {
	pool, err := openPostgresPool(dsn)
	if err != nil {
		return nil, nil, err
	}
	if tx, err = pool.BeginTx(ctx, nil); err == nil {
		if _, err = tx.ExecContext(ctx, pgReaderLock); err == nil {
			return tx, func() { tx.Rollback(); pool.Close() }, nil
		}
		tx.Rollback()
	}
	pool.Close()
	return nil, nil, fmt.Errorf("connect and take the reader lock: %w", err)
}

func ensurePGReader(ctx context.Context, dsn, name string, targets []string) (sandbox.ReaderReport, error) {
	rep := sandbox.ReaderReport{Name: name}
	where := pgTarget(dsn)
	fail := func(err error) (sandbox.ReaderReport, error) {
		return rep, fmt.Errorf("%s: set up reader %s: %w", where, name, err)
	}
	tx, done, err := pgReaderTx(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer done()
	exec := sandbox.SetupExec(ctx, tx, " PASSWORD ")
	role := sandbox.QuoteIdent(datasets.Postgres, name)
	meta := sandbox.QuoteIdent(datasets.Postgres, sandbox.ReaderMeta)
	for _, q := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + meta,
		"REVOKE ALL ON SCHEMA " + meta + " FROM PUBLIC",
		"CREATE TABLE IF NOT EXISTS " + meta + ".readers (name text PRIMARY KEY, password text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())",
		"REVOKE ALL ON " + meta + ".readers FROM PUBLIC",
	} {
		if err := exec(q); err != nil {
			return fail(err)
		}
	}
	password, stored, err := sandbox.StoredPassword(ctx, tx, "SELECT password FROM "+meta+".readers WHERE name = $1", name)
	if err != nil {
		return fail(err)
	}
	attrs, memberOf, exists, err := pgRole(ctx, tx, name)
	if err != nil {
		return fail(err)
	}
	// NOINHERIT: the login itself holds none of its task roles' grants; an execution takes one
	// of them with SET LOCAL ROLE.
	const plain = " LOGIN NOSUPERUSER NOREPLICATION NOBYPASSRLS NOCREATEROLE NOCREATEDB NOINHERIT"
	taskRoles := map[string]bool{} // the reader's task roles it is a member of
	if !exists {
		if err := exec("CREATE ROLE " + role + plain + " PASSWORD " + sandbox.SQLString(password)); err != nil {
			return fail(err)
		}
		rep.Created = true
	} else {
		if x := attrs.extras(); len(x) > 0 || !attrs.login || attrs.inherit {
			rep.Changes = append(rep.Changes, fmt.Sprintf("attributes reset to LOGIN NOINHERIT only (had %s)", strings.Join(append(x, fmt.Sprintf("login=%v", attrs.login), fmt.Sprintf("inherit=%v", attrs.inherit)), ", ")))
		}
		if !stored {
			rep.Changes = append(rep.Changes, "password reset (none was stored in this database)")
		}
		// The stored password is set again every time: another database of this cluster may
		// have reset it.
		if err := exec("ALTER ROLE " + role + plain + " PASSWORD " + sandbox.SQLString(password)); err != nil {
			return fail(err)
		}
		for _, g := range memberOf {
			if strings.HasPrefix(g, pgTaskRolePrefix(name)) {
				taskRoles[g] = true
				continue
			}
			if err := exec("REVOKE " + sandbox.QuoteIdent(datasets.Postgres, g) + " FROM " + role); err != nil {
				return fail(err)
			}
			rep.Changes = append(rep.Changes, "removed from role "+g)
		}
		// Grants an earlier version (or a person) gave the login itself move to task roles.
		direct, err := sandbox.QueryStrings(ctx, tx, pgDirectGrants, name)
		if err != nil {
			return fail(fmt.Errorf("look up the grants held by %s itself: %w", name, err))
		}
		for _, sch := range direct {
			s := sandbox.QuoteIdent(datasets.Postgres, sch)
			if err := exec("REVOKE ALL ON ALL TABLES IN SCHEMA " + s + " FROM " + role + "; REVOKE ALL ON SCHEMA " + s + " FROM " + role); err != nil {
				return fail(err)
			}
			rep.Changes = append(rep.Changes, fmt.Sprintf("grants on schema %s revoked from the login itself", sch))
		}
	}
	var superuser bool
	if err := tx.QueryRowContext(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&superuser); err != nil {
		return fail(err)
	}
	settings, warning := pgReaderSettings(role, superuser)
	if warning != "" {
		rep.Warnings = append(rep.Warnings, warning)
	}
	for _, q := range settings {
		if err := exec(q); err != nil {
			return fail(err)
		}
	}
	var db string
	var canConnect bool
	if err := tx.QueryRowContext(ctx, "SELECT current_database(), has_database_privilege($1, current_database(), 'CONNECT')", name).Scan(&db, &canConnect); err != nil {
		return fail(err)
	}
	if !canConnect {
		if err := exec("GRANT CONNECT ON DATABASE " + sandbox.QuoteIdent(datasets.Postgres, db) + " TO " + role); err != nil {
			return fail(err)
		}
	}
	for _, t := range targets {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = $1", t).Scan(&n); err != nil {
			return fail(err)
		}
		if n == 0 {
			return fail(fmt.Errorf("schema %q does not exist (load it first)", t))
		}
		tr := pgTaskRole(name, t)
		if err := ensurePGTaskRole(ctx, tx, exec, tr, &rep); err != nil {
			return fail(err)
		}
		qtr := sandbox.QuoteIdent(datasets.Postgres, tr)
		if !taskRoles[tr] {
			if err := exec("GRANT " + qtr + " TO " + role); err != nil {
				return fail(err)
			}
			taskRoles[tr] = true
		}
		s := sandbox.QuoteIdent(datasets.Postgres, t)
		if err := exec("GRANT USAGE ON SCHEMA " + s + " TO " + qtr); err != nil {
			return fail(err)
		}
		if err := exec("GRANT SELECT ON ALL TABLES IN SCHEMA " + s + " TO " + qtr); err != nil {
			return fail(err)
		}
		rep.Granted = append(rep.Granted, t)
	}
	// Task roles of schemas not named this time are brought back to least privilege too.
	for tr := range taskRoles {
		if err := ensurePGTaskRole(ctx, tx, exec, tr, &rep); err != nil {
			return fail(err)
		}
	}
	if err := exec("INSERT INTO "+meta+".readers (name, password) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET password = EXCLUDED.password, updated_at = now()", name, password); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	return rep, nil
}

// pgReaderSettings returns the statements that set the reader role's defaults, and, where the
// DSN's user is no superuser, a warning naming the superuser-only ones left at the server's.
func pgReaderSettings(role string, superuser bool) (settings []string, warning string) {
	settings = []string{
		"ALTER ROLE " + role + " RESET ALL",
		"ALTER ROLE " + role + " SET default_transaction_read_only = on",
		"ALTER ROLE " + role + " SET idle_in_transaction_session_timeout = '1min'",
	}
	if !superuser {
		return settings, "temp_file_limit, log_min_messages and log_min_error_statement stay the server's: only a superuser may set them for the reader, so its sorts may fill the disk to the deadline and its errors (which quote their values whole) go to the server log; run distill load with a superuser DSN to set them"
	}
	return append(settings, "ALTER ROLE "+role+" SET temp_file_limit = '"+pgReaderTempLimit+"'",
		// The server log takes no error of the reader's, nor any statement: an error quotes
		// the value it failed on whole (repeat('x', 5000000)::int wrote 5 MB to the log), and
		// a backend terminated past its deadline logs one FATAL line, which at fatal was
		// followed by the statement's whole text (up to 64 KiB a runaway).
		"ALTER ROLE "+role+" SET log_min_messages = fatal",
		"ALTER ROLE "+role+" SET log_min_error_statement = panic"), ""
}

// pgDirectGrants lists the schemas of the current database on which role $1 itself (not
// through a role) holds a privilege, on the schema or on one of its relations.
const pgDirectGrants = `SELECT n.nspname::text FROM pg_catalog.pg_namespace n
	WHERE EXISTS (SELECT 1 FROM aclexplode(n.nspacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee WHERE r.rolname = $1)
	   OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c, aclexplode(c.relacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
			WHERE c.relnamespace = n.oid AND r.rolname = $1)
	ORDER BY 1`

// ensurePGTaskRole creates the task role tr, or brings it back to a plain NOLOGIN role that is
// a member of no role, noting what it reset in rep.
func ensurePGTaskRole(ctx context.Context, tx *sql.Tx, exec func(string, ...any) error, tr string, rep *sandbox.ReaderReport) error {
	q := sandbox.QuoteIdent(datasets.Postgres, tr)
	attrs, memberOf, exists, err := pgRole(ctx, tx, tr)
	if err != nil {
		return err
	}
	const plain = " NOLOGIN NOSUPERUSER NOREPLICATION NOBYPASSRLS NOCREATEROLE NOCREATEDB NOINHERIT"
	if !exists {
		return exec("CREATE ROLE " + q + plain)
	}
	if x := attrs.extras(); len(x) > 0 || attrs.login {
		rep.Changes = append(rep.Changes, fmt.Sprintf("role %s: attributes reset to NOLOGIN (had %s)", tr, strings.Join(append(x, fmt.Sprintf("login=%v", attrs.login)), ", ")))
	}
	if err := exec("ALTER ROLE " + q + plain + " PASSWORD NULL"); err != nil {
		return err
	}
	for _, g := range memberOf {
		if err := exec("REVOKE " + sandbox.QuoteIdent(datasets.Postgres, g) + " FROM " + q); err != nil {
			return err
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("role %s: removed from role %s", tr, g))
	}
	return nil
}

func dropPGReader(ctx context.Context, dsn, name string) error {
	fail := func(err error) error { return fmt.Errorf("%s: drop reader %s: %w", pgTarget(dsn), name, err) }
	tx, done, err := pgReaderTx(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer done()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = $1", name).Scan(&n); err != nil {
		return fail(err)
	}
	role := sandbox.QuoteIdent(datasets.Postgres, name)
	if n > 0 {
		if _, err := tx.ExecContext(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			return fail(err)
		}
	}
	taskRoles, err := sandbox.QueryStrings(ctx, tx, "SELECT rolname::text FROM pg_catalog.pg_roles WHERE starts_with(rolname, $1)", pgTaskRolePrefix(name))
	if err != nil {
		return fail(err)
	}
	for _, tr := range taskRoles {
		q := sandbox.QuoteIdent(datasets.Postgres, tr)
		if _, err := tx.ExecContext(ctx, "DROP OWNED BY "+q+"; DROP ROLE "+q); err != nil {
			return fail(err)
		}
	}
	var meta sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT to_regclass('"+sandbox.ReaderMeta+".readers')::text").Scan(&meta); err != nil {
		return fail(err)
	}
	if meta.Valid {
		schema := sandbox.QuoteIdent(datasets.Postgres, sandbox.ReaderMeta)
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+schema+".readers WHERE name = $1", name); err != nil {
			return fail(err)
		}
		// The last reader gone, the table and, when nothing else lives there, its schema go too.
		var left, others int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+schema+".readers").Scan(&left); err != nil {
			return fail(err)
		}
		if left == 0 {
			if _, err := tx.ExecContext(ctx, "DROP TABLE "+schema+".readers"); err != nil {
				return fail(err)
			}
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace", sandbox.ReaderMeta).Scan(&others); err != nil {
				return fail(err)
			}
			if others == 0 {
				if _, err := tx.ExecContext(ctx, "DROP SCHEMA "+schema); err != nil {
					return fail(err)
				}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// pgExecConfig returns the connection settings statements run under: the DSN's own when
// acc.AsDSNUser or when the DSN already names the reader, else the DSN's server and database
// logged in as the reader with its stored password. The DSN's user is used only for the look-up.
func pgExecConfig(ctx context.Context, dsn string, acc sandbox.Access) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN: %w", err)
	}
	if acc.AsDSNUser {
		return cfg, nil
	}
	name := acc.ReaderName()
	if err := sandbox.CheckReaderName(name); err != nil {
		return nil, err
	}
	if cfg.User == name {
		return cfg, nil
	}
	where := pgTarget(dsn)
	admin, err := openPostgresPool(dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	var exists bool
	if err := admin.QueryRowContext(ctx, "SELECT count(*) > 0 FROM pg_catalog.pg_roles WHERE rolname = $1", name).Scan(&exists); err != nil {
		return nil, fmt.Errorf("%s: connect: %w", where, err)
	}
	if !exists {
		return nil, sandbox.ReaderMissing(where, fmt.Sprintf("reader role %q does not exist", name))
	}
	var password string
	err = admin.QueryRowContext(ctx, "SELECT password FROM "+sandbox.QuoteIdent(datasets.Postgres, sandbox.ReaderMeta)+".readers WHERE name = $1", name).Scan(&password)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000"): // no row, table or schema
		return nil, sandbox.ReaderMissing(where, fmt.Sprintf("no password for reader role %q is stored in this database", name))
	case errors.As(err, &pe) && pe.Code == "42501":
		return nil, fmt.Errorf("%s: the DSN's user %q may not read the reader's password (%s.readers): pass the DSN distill load used, or a DSN of the reader itself: %w", where, cfg.User, sandbox.ReaderMeta, err)
	case err != nil:
		return nil, fmt.Errorf("%s: read the reader's password: %w", where, err)
	}
	rc := cfg.Copy()
	rc.User = name
	rc.Password = password
	return rc, nil
}

// checkPGReader checks, on a connection of the reader itself, that it is who it should be, a
// plain NOINHERIT login holding no grant on any schema itself, member only of its own task
// roles, each a plain NOLOGIN role member of no role (CheckReader).
func checkPGReader(ctx context.Context, pool *sql.DB, where, name string) error {
	return sandbox.CheckReader(ctx, where, name, pgProbe{pool: pool, name: name})
}

// pgProbe is CheckReader's view of a PostgreSQL reader, through a pool of its own connections.
type pgProbe struct {
	pool *sql.DB
	name string
}

func (p pgProbe) CurrentUser(ctx context.Context) (string, string, error) {
	var user string
	err := p.pool.QueryRowContext(ctx, "SELECT current_user::text").Scan(&user)
	return user, user, err
}

func (pgProbe) LoginHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000") {
		return "run distill load again to reset its stored password; pg_hba.conf must let it log in with a password"
	}
	return ""
}

// privileges: the login's attributes beyond a plain NOINHERIT login, the schemas it holds
// grants on itself, and its memberships.
func (p pgProbe) Privileges(ctx context.Context) ([]string, []string, error) {
	attrs, memberOf, _, err := pgRole(ctx, p.pool, p.name)
	if err != nil {
		return nil, nil, err
	}
	extra := attrs.extras()
	if attrs.inherit {
		extra = append(extra, "INHERIT")
	}
	direct, err := sandbox.QueryStrings(ctx, p.pool, pgDirectGrants, p.name)
	if err != nil {
		return nil, nil, fmt.Errorf("look up the grants held by reader %s itself: %w", p.name, err)
	}
	for _, sch := range direct {
		extra = append(extra, "grants on schema "+sch+" held by the login itself")
	}
	return extra, memberOf, nil
}

func (pgProbe) OtherRole(role string) string { return "member of " + role }

// taskRole: a task role's attributes beyond a plain NOLOGIN role, and its memberships.
func (p pgProbe) TaskRole(ctx context.Context, role string) ([]string, error) {
	ta, tm, _, err := pgRole(ctx, p.pool, role)
	if err != nil {
		return nil, err
	}
	x := ta.extras()
	if ta.login {
		x = append(x, "LOGIN")
	}
	for _, h := range tm {
		x = append(x, "member of "+h)
	}
	return x, nil
}

func describePGUser(ctx context.Context, dsn string) (string, error) {
	pool, err := openPostgresPool(dsn)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var user string
	if err := pool.QueryRowContext(ctx, "SELECT current_user::text").Scan(&user); err != nil {
		return "", fmt.Errorf("%s: connect: %w", pgTarget(dsn), err)
	}
	attrs, memberOf, _, err := pgRole(ctx, pool, user)
	if err != nil {
		return "", fmt.Errorf("%s: %w", pgTarget(dsn), err)
	}
	extra := attrs.extras()
	for _, g := range memberOf {
		extra = append(extra, "member of "+g)
	}
	what := "no attribute beyond login (check its grants yourself)"
	if len(extra) > 0 {
		what = strings.Join(extra, ", ")
	}
	return fmt.Sprintf("%s user %q: %s", pgTarget(dsn), user, what), nil
}
