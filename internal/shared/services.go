package shared

import (
	"os"
	"testing"
)

// PostgresDSN returns the DSN of the test PostgreSQL server ($CHAINEDSQL_PG_DSN, default the
// local trust-auth server's database test).
func PostgresDSN() string {
	if v := os.Getenv("CHAINEDSQL_PG_DSN"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// MySQLDSN returns the DSN of the test MariaDB/MySQL server ($CHAINEDSQL_MYSQL_DSN, default root
// with an empty password on 127.0.0.1:3306), in go-sql-driver/mysql form without a database.
func MySQLDSN() string {
	if v := os.Getenv("CHAINEDSQL_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// SkipServers skips tb when CHAINEDSQL_NO_SERVERS is set (machines without PostgreSQL/MariaDB).
func SkipServers(tb testing.TB) {
	tb.Helper()
	if os.Getenv("CHAINEDSQL_NO_SERVERS") != "" {
		tb.Skip("CHAINEDSQL_NO_SERVERS is set: skipping tests that need PostgreSQL/MariaDB")
	}
}
