package sandbox

// The registered engines, one line each, in the order flags and messages list them. A new
// dialect is its dialect_NAME.go (a Dialect and its Engine) and one line here.
func init() {
	Register(sqliteDialect{})
	Register(postgresDialect{})
	Register(mysqlDialect{})
}
