package sandbox_test

// The tests of package sandbox open real databases: every engine is registered.
import _ "github.com/chainedsql/chainedsql/sandbox/engines"
