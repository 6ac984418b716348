// Package datasets holds benchmark tasks: the Task, the dialect names its gold SQL is keyed by,
// and the loaders (BIRD, BIRD mini-dev, Spider, the bundled sample with its SQLite databases).
// Running statements is package sandbox's, judging them package judge's.
package datasets

// Dialect names a SQL engine.
type Dialect string

// The supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
)

// Difficulty buckets used by BIRD; Spider's hardness levels are kept as they come.
const (
	Simple      = "simple"
	Moderate    = "moderate"
	Challenging = "challenging"
)

// Task is one question of a benchmark.
type Task struct {
	// ID is unique within its source, e.g. "bird-dev/0" or "spider-dev/12".
	ID string `json:"id"`
	// Index is the position in the source file (BIRD's question_id order), used for predict_dev.json.
	Index    int    `json:"index"`
	DBID     string `json:"db_id"`
	Question string `json:"question"`
	Evidence string `json:"evidence,omitempty"`
	// Gold is the gold SQL per dialect; a missing dialect means the task only has gold for others.
	Gold       map[Dialect]string `json:"gold"`
	Difficulty string             `json:"difficulty,omitempty"`
	// Source names the benchmark: "bird", "minidev", "spider", "sample".
	Source string `json:"source"`
	// DBPath is the SQLite file of the task's database, when it has one.
	DBPath string `json:"db_path,omitempty"`
}

// GoldFor returns the gold SQL for d, falling back to SQLite's when d has none.
func (t Task) GoldFor(d Dialect) (string, bool) {
	if s, ok := t.Gold[d]; ok && s != "" {
		return s, true
	}
	s, ok := t.Gold[SQLite]
	return s, ok && s != ""
}

// GoldReference returns the dialect whose copy of t's database an episode on d judges against
// when t's gold SQL fails on d: SQLite, when d is a server and t has SQLite gold only. A
// benchmark written for SQLite (Spider, BIRD dev) defines its answers by its SQLite gold on its
// SQLite file, which the server copies were loaded from, and that gold may fail on another
// engine (a text column compared with a number is an error on PostgreSQL). ok is false
// otherwise. Where the file is not at hand, the gold's failure on d leaves the episode
// unjudged.
func (t Task) GoldReference(d Dialect) (ref Dialect, ok bool) {
	if d == SQLite || t.Gold[d] != "" || t.Gold[SQLite] == "" {
		return "", false
	}
	return SQLite, true
}
