package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlReaderLock is the named lock serialising reader set-ups on one MySQL server.
const mysqlReaderLock = "chainedsql-reader"

// mysqlAccount is the quoted 'user'@'host' of a reader account (names are checked plain).
func mysqlAccount(name, host string) string { return "'" + name + "'@'" + host + "'" }

// mysqlTaskRole is the role holding reader's SELECT on one loaded database: "reader/database",
// or, past the server's longest role name (MariaDB 128, MySQL 32), that cut short with a hash of
// database. Each connection of an execution pool enables its database's role (SET ROLE) and
// nothing else: the login itself holds no grant, so a statement of one task reads no other
// task's database. Reader names never hold "/", so the prefix "reader/" is its own.
func mysqlTaskRole(reader, database string, mariadb bool) string {
	r, limit := reader+"/"+database, 32
	if mariadb {
		limit = 128
	}
	if len(r) <= limit {
		return r
	}
	h := sha256.Sum256([]byte(database))
	return r[:limit-9] + "~" + hex.EncodeToString(h[:4])
}

// mysqlRoleHost is the host part a role's grants are listed under: MariaDB's roles have none,
// MySQL's are accounts at '%'.
func mysqlRoleHost(mariadb bool) string {
	if mariadb {
		return ""
	}
	return "%"
}

// isMariaDB reports whether the server of conn is MariaDB.
func isMariaDB(ctx context.Context, conn *sql.Conn) (bool, error) {
	var v string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false, err
	}
	return strings.Contains(v, "MariaDB"), nil
}

// mysqlGrantDB is database as a GRANT names it: backquoted with _ and % escaped, since GRANT
// reads them as wildcards (`a_b`.* would also cover a database called aXb).
func mysqlGrantDB(database string) string {
	esc := strings.NewReplacer(`\`, `\\`, "_", `\_`, "%", `\%`).Replace(database)
	return "`" + strings.ReplaceAll(esc, "`", "``") + "`"
}

// myErrNo returns the server's error number of err, 0 if it is not a server error.
func myErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// openMySQLAdmin opens a one-connection pool logged in as the DSN's own user, no database.
func openMySQLAdmin(ctx context.Context, dsn string) (*sql.Conn, func(), error) {
	cfg, err := mysqlConfig(dsn, "")
	if err != nil {
		return nil, nil, err
	}
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql: %w", err)
	}
	pool := sql.OpenDB(connector)
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("mysql %s: connect: %w", cfg.Addr, err)
	}
	return conn, func() { conn.Close(); pool.Close() }, nil
}

func ensureMySQLReader(ctx context.Context, dsn, name string, hosts, targets []string) (sandbox.ReaderReport, error) {
	rep := sandbox.ReaderReport{Name: name}
	where := "mysql"
	if cfg, err := mysqlConfig(dsn, ""); err == nil {
		where = "mysql " + cfg.Addr
	}
	fail := func(err error) (sandbox.ReaderReport, error) {
		return rep, fmt.Errorf("%s: set up reader %s: %w", where, name, err)
	}
	conn, closeConn, err := openMySQLAdmin(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer closeConn()
	exec := sandbox.SetupExec(ctx, conn, " IDENTIFIED BY ")
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", mysqlReaderLock).Scan(&got); err != nil || got.Int64 != 1 {
		return fail(fmt.Errorf("take the lock %s: %v (granted %v)", mysqlReaderLock, err, got.Int64 == 1))
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", mysqlReaderLock)
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS " + sandbox.ReaderMeta,
		"CREATE TABLE IF NOT EXISTS " + sandbox.ReaderMeta + ".readers (name VARCHAR(80) PRIMARY KEY, password VARCHAR(128) NOT NULL, updated_at DATETIME NOT NULL)",
	} {
		if err := exec(q); err != nil {
			return fail(err)
		}
	}
	password, stored, err := sandbox.StoredPassword(ctx, conn, "SELECT password FROM "+sandbox.ReaderMeta+".readers WHERE name = ?", name)
	if err != nil {
		return fail(err)
	}
	existing, err := sandbox.QueryStrings(ctx, conn, "SELECT Host FROM mysql.user WHERE User = ?", name)
	if err != nil {
		return fail(fmt.Errorf("look up user %s: %w", name, err))
	}
	if len(existing) > 0 && !stored {
		rep.Changes = append(rep.Changes, "password reset (none was stored)")
	}
	mariadb, err := isMariaDB(ctx, conn)
	if err != nil {
		return fail(err)
	}
	prefix := name + "/"
	// Every account of that name is brought back to least privilege, not only those of hosts:
	// no privilege of its own, no role but its task roles.
	all := slices.Clone(hosts)
	for _, h := range existing {
		all = sandbox.AddUnique(all, h)
	}
	taskRoles := map[string]bool{}
	for _, h := range all {
		acct := mysqlAccount(name, h)
		if !slices.Contains(existing, h) {
			if err := exec("CREATE USER " + acct + " IDENTIFIED BY " + sandbox.SQLString(password)); err != nil {
				return fail(err)
			}
			rep.Created = true
			continue
		}
		if err := exec("ALTER USER " + acct + " IDENTIFIED BY " + sandbox.SQLString(password)); err != nil {
			return fail(err)
		}
		extra, keep, roles, err := mysqlExtraPrivileges(ctx, conn, name, h)
		if err != nil {
			return fail(err)
		}
		for _, r := range roles {
			if strings.HasPrefix(r, prefix) {
				taskRoles[r] = true
				continue
			}
			if err := exec("REVOKE " + sandbox.SQLString(r) + " FROM " + acct); err != nil {
				return fail(err)
			}
			rep.Changes = append(rep.Changes, fmt.Sprintf("%s: removed role %s", acct, r))
		}
		if len(extra) > 0 || len(keep) > 0 {
			if err := exec("REVOKE ALL PRIVILEGES, GRANT OPTION FROM " + acct); err != nil {
				return fail(err)
			}
			for _, r := range roles { // MariaDB's REVOKE ALL takes the roles too
				if strings.HasPrefix(r, prefix) {
					if err := exec("GRANT " + sandbox.SQLString(r) + " TO " + acct); err != nil {
						return fail(err)
					}
				}
			}
			if len(extra) > 0 {
				rep.Changes = append(rep.Changes, fmt.Sprintf("%s: revoked %s", acct, strings.Join(extra, ", ")))
			}
			if len(keep) > 0 { // as an earlier version granted them: now its task roles' only
				rep.Changes = append(rep.Changes, fmt.Sprintf("%s: SELECT on %s revoked from the login itself", acct, strings.Join(keep, ", ")))
			}
		}
	}
	for _, t := range targets {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", t).Scan(&n); err != nil {
			return fail(err)
		}
		if n == 0 {
			return fail(fmt.Errorf("database %q does not exist (load it first)", t))
		}
		role := mysqlTaskRole(name, t, mariadb)
		if err := ensureMySQLTaskRole(ctx, conn, exec, role, mariadb, t, &rep); err != nil {
			return fail(err)
		}
		delete(taskRoles, role)
		if err := exec("GRANT SELECT ON " + mysqlGrantDB(t) + ".* TO " + sandbox.SQLString(role)); err != nil {
			return fail(err)
		}
		for _, h := range all {
			if err := exec("GRANT " + sandbox.SQLString(role) + " TO " + mysqlAccount(name, h)); err != nil {
				return fail(err)
			}
		}
		rep.Granted = append(rep.Granted, t)
	}
	// The task roles of databases not named this time are brought back to least privilege too.
	for role := range taskRoles {
		if err := ensureMySQLTaskRole(ctx, conn, exec, role, mariadb, "", &rep); err != nil {
			return fail(err)
		}
	}
	if err := exec("REPLACE INTO "+sandbox.ReaderMeta+".readers (name, password, updated_at) VALUES (?, ?, UTC_TIMESTAMP())", name, password); err != nil {
		return fail(err)
	}
	return rep, nil
}

// ensureMySQLTaskRole creates role, or brings it back to SELECT on database only (on its one
// database when database is "", the role of a database not named this time), noting what it
// reset in rep.
func ensureMySQLTaskRole(ctx context.Context, conn *sql.Conn, exec func(string, ...any) error, role string, mariadb bool, database string, rep *sandbox.ReaderReport) error {
	if err := exec("CREATE ROLE IF NOT EXISTS " + sandbox.SQLString(role)); err != nil {
		return err
	}
	extra, keep, roles, err := mysqlExtraPrivileges(ctx, conn, role, mysqlRoleHost(mariadb))
	if err != nil {
		return err
	}
	want := ""
	if database != "" {
		want = mysqlGrantDB(database)
		want = want[1 : len(want)-1] // as SCHEMA_PRIVILEGES shows it: escaped, unquoted
	} else if len(keep) == 1 {
		want = keep[0]
	}
	var revoked []string
	revoked = append(revoked, extra...)
	for _, k := range keep {
		if k != want {
			revoked = append(revoked, "SELECT ON "+k)
		}
	}
	if len(revoked) > 0 {
		if err := exec("REVOKE ALL PRIVILEGES, GRANT OPTION FROM " + sandbox.SQLString(role)); err != nil {
			return err
		}
		if want != "" {
			if err := exec("GRANT SELECT ON `" + strings.ReplaceAll(want, "`", "``") + "`.* TO " + sandbox.SQLString(role)); err != nil {
				return err
			}
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("role %s: revoked %s", role, strings.Join(revoked, ", ")))
	}
	for _, r := range roles {
		if err := exec("REVOKE " + sandbox.SQLString(r) + " FROM " + sandbox.SQLString(role)); err != nil {
			return err
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("role %s: removed role %s", role, r))
	}
	return nil
}

// mysqlExtraPrivileges lists what account name@host holds beyond SELECT on whole databases
// (global privileges, other database privileges, table and column privileges, grant options),
// the databases it may SELECT from, and the roles granted to it.
func mysqlExtraPrivileges(ctx context.Context, conn *sql.Conn, name, host string) (extra, keep, roles []string, err error) {
	grantee := mysqlAccount(name, host)
	for _, q := range []struct{ what, query string }{
		{"global", "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ? AND (PRIVILEGE_TYPE <> 'USAGE' OR IS_GRANTABLE = 'YES')"},
		{"on a database", "SELECT CONCAT(PRIVILEGE_TYPE, ' ON ', TABLE_SCHEMA) FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ? AND (PRIVILEGE_TYPE <> 'SELECT' OR IS_GRANTABLE = 'YES')"},
		{"on a table", "SELECT CONCAT(PRIVILEGE_TYPE, ' ON ', TABLE_SCHEMA, '.', TABLE_NAME) FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = ?"},
		{"on a column", "SELECT CONCAT(PRIVILEGE_TYPE, ' ON ', TABLE_SCHEMA, '.', TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMN_PRIVILEGES WHERE GRANTEE = ?"},
	} {
		got, err := sandbox.QueryStrings(ctx, conn, q.query, grantee)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read the privileges of %s %s: %w", grantee, q.what, err)
		}
		extra = append(extra, got...)
	}
	keep, err = sandbox.QueryStrings(ctx, conn, "SELECT TABLE_SCHEMA FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ? AND PRIVILEGE_TYPE = 'SELECT'", grantee)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the database grants of %s: %w", grantee, err)
	}
	// MariaDB keeps role grants in mysql.roles_mapping, MySQL 8 in mysql.role_edges.
	roles, err = sandbox.QueryStrings(ctx, conn, "SELECT Role FROM mysql.roles_mapping WHERE User = ? AND Host = ?", name, host)
	if myErrNo(err) == 1146 {
		roles, err = sandbox.QueryStrings(ctx, conn, "SELECT FROM_USER FROM mysql.role_edges WHERE TO_USER = ? AND TO_HOST = ?", name, host)
		if myErrNo(err) == 1146 {
			roles, err = nil, nil
		}
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the roles of %s: %w", grantee, err)
	}
	return extra, keep, roles, nil
}

func dropMySQLReader(ctx context.Context, dsn, name string) error {
	fail := func(err error) error { return fmt.Errorf("mysql: drop reader %s: %w", name, err) }
	conn, closeConn, err := openMySQLAdmin(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer closeConn()
	hosts, err := sandbox.QueryStrings(ctx, conn, "SELECT Host FROM mysql.user WHERE User = ?", name)
	if err != nil {
		return fail(err)
	}
	for _, h := range hosts {
		if _, err := conn.ExecContext(ctx, "DROP USER "+mysqlAccount(name, h)); err != nil {
			return fail(err)
		}
	}
	roles, err := sandbox.QueryStrings(ctx, conn, "SELECT DISTINCT User FROM mysql.user WHERE User LIKE ?", strings.ReplaceAll(name, "_", `\_`)+"/%")
	if err != nil {
		return fail(err)
	}
	for _, r := range roles {
		if _, err := conn.ExecContext(ctx, "DROP ROLE "+sandbox.SQLString(r)); err != nil {
			return fail(err)
		}
	}
	// Under the set-up lock, so that the last reader's table is not dropped under a new one.
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", mysqlReaderLock).Scan(&got); err != nil || got.Int64 != 1 {
		return fail(fmt.Errorf("take the lock %s: %v (granted %v)", mysqlReaderLock, err, got.Int64 == 1))
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", mysqlReaderLock)
	if _, err := conn.ExecContext(ctx, "DELETE FROM "+sandbox.ReaderMeta+".readers WHERE name = ?", name); err != nil {
		if n := myErrNo(err); n == 1146 || n == 1049 {
			return nil
		}
		return fail(err)
	}
	var left int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM "+sandbox.ReaderMeta+".readers").Scan(&left); err != nil {
		return fail(err)
	}
	if left == 0 { // the database itself also holds the copy markers: it stays
		if _, err := conn.ExecContext(ctx, "DROP TABLE "+sandbox.ReaderMeta+".readers"); err != nil {
			return fail(err)
		}
	}
	return nil
}

// mysqlExecConfig returns the connection settings statements run under (no database chosen):
// the DSN's own when acc.AsDSNUser or when the DSN already names the reader, else the DSN's
// server logged in as the reader with its stored password. A reader is checked to log in and to
// hold nothing beyond SELECT on whole databases.
func mysqlExecConfig(ctx context.Context, dsn string, acc sandbox.Access) (*mysql.Config, error) {
	cfg, err := mysqlConfig(dsn, "")
	if err != nil {
		return nil, err
	}
	if acc.AsDSNUser {
		return cfg, nil
	}
	name := acc.ReaderName()
	if err := sandbox.CheckReaderName(name); err != nil {
		return nil, err
	}
	where := "mysql " + cfg.Addr
	if cfg.User != name {
		conn, closeConn, err := openMySQLAdmin(ctx, dsn)
		if err != nil {
			return nil, err
		}
		var password string
		err = conn.QueryRowContext(ctx, "SELECT password FROM "+sandbox.ReaderMeta+".readers WHERE name = ?", name).Scan(&password)
		closeConn()
		switch n := myErrNo(err); {
		case errors.Is(err, sql.ErrNoRows), n == 1146, n == 1049:
			return nil, sandbox.ReaderMissing(where, fmt.Sprintf("reader user %q does not exist (no password stored in %s.readers)", name, sandbox.ReaderMeta))
		case n == 1142, n == 1044:
			return nil, fmt.Errorf("%s: the DSN's user %q may not read the reader's password (%s.readers): pass the DSN distill load used, or a DSN of the reader itself: %w", where, cfg.User, sandbox.ReaderMeta, err)
		case err != nil:
			return nil, fmt.Errorf("%s: read the reader's password: %w", where, err)
		}
		cfg = cfg.Clone()
		cfg.User, cfg.Passwd = name, password
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	pool := sql.OpenDB(connector)
	defer pool.Close()
	if err := checkMySQLReader(ctx, pool, where, name); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mysqlRoleGrant matches the lines SHOW GRANTS may list for a task role: its USAGE and its
// SELECT on one database (MySQL adds @`%` to the role).
var mysqlRoleGrant = regexp.MustCompile("^GRANT (USAGE ON \\*\\.\\*|SELECT ON `(?:[^`]|``)+`\\.\\*) TO `[^`]+`(@`%`)?$")

// checkMySQLReader checks, on a connection of the reader itself, that it logs in, holds no
// privilege of its own, and has no role but its task roles, each holding SELECT on one
// database only (CheckReader).
func checkMySQLReader(ctx context.Context, pool *sql.DB, where, name string) error {
	p := &myProbe{pool: pool, name: name}
	defer p.close()
	return sandbox.CheckReader(ctx, where, name, p)
}

// myProbe is CheckReader's view of a MySQL reader, through a pool of its own connections; a
// role's grants show only where the role is enabled, on conn.
type myProbe struct {
	pool *sql.DB
	name string
	conn *sql.Conn
}

func (p *myProbe) close() {
	if p.conn != nil {
		sandbox.Discard(p.conn)
		p.conn.Close()
	}
}

func (p *myProbe) CurrentUser(ctx context.Context) (string, string, error) {
	var user string
	err := p.pool.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user)
	u, _, _ := strings.Cut(user, "@")
	return user, u, err
}

func (*myProbe) LoginHint(err error) string {
	if myErrNo(err) == 1045 {
		return "run distill load again: it resets the stored password, and its --reader-hosts must cover the host this machine connects from"
	}
	return ""
}

// privileges: the login's global, database, table and column privileges, roles it may grant,
// and the roles granted to it.
func (p *myProbe) Privileges(ctx context.Context) ([]string, []string, error) {
	var extra []string
	for _, q := range []string{
		"SELECT CONCAT('global ', PRIVILEGE_TYPE) FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE <> 'USAGE' OR IS_GRANTABLE = 'YES'",
		"SELECT CONCAT(PRIVILEGE_TYPE, ' on ', TABLE_SCHEMA, ' held by the login itself') FROM information_schema.SCHEMA_PRIVILEGES",
		"SELECT CONCAT(PRIVILEGE_TYPE, ' on ', TABLE_SCHEMA, '.', TABLE_NAME) FROM information_schema.TABLE_PRIVILEGES",
		"SELECT CONCAT(PRIVILEGE_TYPE, ' on ', TABLE_SCHEMA, '.', TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMN_PRIVILEGES",
		"SELECT CONCAT('role ', ROLE_NAME, ' with its admin option') FROM information_schema.APPLICABLE_ROLES WHERE IS_GRANTABLE = 'YES'",
	} {
		got, err := sandbox.QueryStrings(ctx, p.pool, q)
		if myErrNo(err) == 1109 { // no such information_schema table on this server
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read the privileges of reader %s: %w", p.name, err)
		}
		extra = append(extra, got...)
	}
	roles, err := sandbox.QueryStrings(ctx, p.pool, "SELECT DISTINCT ROLE_NAME FROM information_schema.APPLICABLE_ROLES")
	if err != nil && myErrNo(err) != 1109 {
		return nil, nil, fmt.Errorf("read the roles of reader %s: %w", p.name, err)
	}
	return extra, roles, nil
}

func (*myProbe) OtherRole(role string) string { return "role " + role }

// taskRole: the grants of a task role beyond USAGE and SELECT on one database.
func (p *myProbe) TaskRole(ctx context.Context, role string) ([]string, error) {
	if p.conn == nil {
		conn, err := p.pool.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the roles of reader %s: %w", p.name, err)
		}
		p.conn = conn
	}
	if _, err := p.conn.ExecContext(ctx, "SET ROLE "+sandbox.SQLString(role)); err != nil {
		return nil, fmt.Errorf("enable role %s: %w", role, err)
	}
	grants, err := sandbox.QueryStrings(ctx, p.conn, "SHOW GRANTS FOR "+sandbox.SQLString(role))
	if n := myErrNo(err); n == 1044 || n == 1142 || n == 1227 {
		return nil, nil // MySQL shows no grants but the user's own: EnsureReader resets the roles
	}
	if err != nil {
		return nil, fmt.Errorf("read the grants of role %s: %w", role, err)
	}
	var extra []string
	dbs := 0
	for _, g := range grants {
		if m := mysqlRoleGrant.FindStringSubmatch(g); m != nil {
			if strings.HasPrefix(m[1], "SELECT") {
				dbs++
			}
			continue
		}
		extra = append(extra, g)
	}
	if dbs > 1 {
		extra = append(extra, fmt.Sprintf("SELECT on %d databases", dbs))
	}
	return extra, nil
}

func describeMySQLUser(ctx context.Context, dsn string) (string, error) {
	conn, closeConn, err := openMySQLAdmin(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer closeConn()
	var user string
	if err := conn.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user); err != nil {
		return "", fmt.Errorf("mysql: describe the DSN's user: %w", err)
	}
	privs, err := sandbox.QueryStrings(ctx, conn, `SELECT DISTINCT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE <> 'USAGE'
		AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')`)
	if err != nil {
		return "", fmt.Errorf("mysql: describe the DSN's user: %w", err)
	}
	what := "no global privilege (check its database grants yourself)"
	if len(privs) > 0 {
		var worst []string // the ones that reach beyond the data
		for _, p := range []string{"SUPER", "FILE", "PROCESS", "CREATE USER", "SHUTDOWN", "RELOAD", "INSERT", "DROP"} {
			if slices.Contains(privs, p) {
				worst = append(worst, p)
			}
		}
		what = fmt.Sprintf("%d global privileges", len(privs))
		if len(worst) > 0 {
			what += ", among them " + strings.Join(worst, ", ")
		}
	}
	return fmt.Sprintf("mysql user %q: %s", user, what), nil
}
