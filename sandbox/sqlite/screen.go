package sqlite

import (
	"fmt"

	"github.com/chainedsql/chainedsql/sandbox"
)

// sqliteScreen are SQLite's own refusals: the built-ins whose one call it cannot stop.
func sqliteScreen() sandbox.ScreenRules {
	return sandbox.ScreenRules{Word: func(w string) string {
		if sqliteUnstoppable[w] {
			return fmt.Sprintf("refused: %s is not allowed on SQLite (one call can take hours, and SQLite cannot stop it at the deadline)", w)
		}
		return ""
	}}
}

// sqliteUnstoppable are SQLite built-ins whose one call takes time quadratic in its arguments'
// size inside a single step, where neither the interrupt nor the progress handler is looked at
// (two values at the length limit: hours): unhex with a set of characters to skip searches the
// set for each character skipped; json_patch searches the target's keys for each key of the
// patch. Rare in benchmark SQL, so refused rather than rewritten (instr, replace, trim and LIKE
// are bounded in the engine instead, see guardSQLite).
var sqliteUnstoppable = map[string]bool{"unhex": true, "json_patch": true, "jsonb_patch": true}
