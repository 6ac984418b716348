package distill

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
)

// DefaultMaxTurns is the protocol's turn budget.
const DefaultMaxTurns = 5

// ObsCaps bound what an observation shows. Zero fields take the defaults.
type ObsCaps struct {
	// MaxRows is how many result rows are shown (default 20).
	MaxRows int `json:"max_rows"`
	// MaxCellChars is the widest cell in characters (runes); longer cells are cut and end in "…"
	// (default 100).
	MaxCellChars int `json:"max_cell_chars"`
	// MaxChars bounds the rendered table body; rows past it are counted in the truncation line
	// instead of shown (default 8000).
	MaxChars int `json:"max_chars"`
}

// Default observation caps.
const (
	DefaultObsRows      = 20
	DefaultObsCellChars = 100
	DefaultObsChars     = 8000
)

// WithDefaults returns c with zero fields set to the defaults.
func (c ObsCaps) WithDefaults() ObsCaps {
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultObsRows
	}
	if c.MaxCellChars <= 0 {
		c.MaxCellChars = DefaultObsCellChars
	}
	if c.MaxChars <= 0 {
		c.MaxChars = DefaultObsChars
	}
	return c
}

// EngineName is the human name of a dialect's engine ("SQLite", "PostgreSQL", "MySQL").
func EngineName(d datasets.Dialect) string {
	switch d {
	case datasets.SQLite:
		return "SQLite"
	case datasets.Postgres:
		return "PostgreSQL"
	case datasets.MySQL:
		return "MySQL"
	}
	return string(d)
}

// SystemPrompt is the protocol's system turn: the dialect and engine version, the schema as that
// dialect's DDL (sample values as comments, as datasets.Schema.DDL renders them) and the rules.
func SystemPrompt(dialect datasets.Dialect, version, ddl string) string {
	engine := EngineName(dialect)
	if version == "" {
		version = engine
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You are an expert data analyst. You answer questions by writing SQL for a %s database (engine: %s).\n\n", engine, version)
	fmt.Fprintf(&b, "Database schema (%s DDL; comments show sample values):\n\n", engine)
	b.WriteString(strings.TrimSpace(ddl))
	b.WriteString("\n\n")
	b.WriteString("Rules:\n")
	b.WriteString("1. Every reply has exactly this form: <think>your reasoning</think>, then a new line, then <sql>one SQL statement</sql>.\n")
	fmt.Fprintf(&b, "2. Write exactly one read-only statement (SELECT, or WITH ... SELECT) in %s syntax. Writes, schema changes and several statements are refused.\n", engine)
	b.WriteString("3. Your statement is executed and the result comes back as <observation>...</observation>: the column names, the first rows, the total row count, or the database's error message.\n")
	b.WriteString("4. Use the observations to check and correct your query. When the result answers the question, reply with exactly the same SQL again to finish.\n")
	b.WriteString("5. The number of replies is limited: finish as soon as your query is right.\n")
	return b.String()
}

// UserPrompt is the protocol's user turn: "Question: …", and "Evidence: …" when the task has
// external knowledge.
func UserPrompt(t datasets.Task) string {
	s := "Question: " + strings.TrimSpace(t.Question)
	if ev := strings.TrimSpace(t.Evidence); ev != "" {
		s += "\nEvidence: " + ev
	}
	return s
}

// parsed is the full outcome of parsing one reply.
type parsed struct {
	think  string
	sql    string
	ok     bool
	closed bool // the <sql> block had its closing tag
}

// ParseReply extracts the reasoning and the SQL of an assistant reply.
//
// Rules (chained-sql/v1): tags are matched case-insensitively. Everything up to the last
// </think> is reasoning (an opening <think> is optional, since some chat templates pre-fill it),
// and <sql> blocks are looked for only after it, so drafts inside the reasoning are ignored. A
// reply with <think> but no </think> has its reasoning end at the first <sql>. Of several <sql>
// blocks the last one counts (the model's final answer). A missing </sql> is accepted (stop
// sequences cut it); the SQL then runs to the end of the reply. A Markdown code fence around the
// statement inside <sql> is removed. ok is false when there is no <sql> or the statement is blank.
// Replies of reasoning models whose reasoning came in a separate field simply have no <think>.
func ParseReply(content string) (think, sql string, ok bool) {
	p := parseReply(content)
	return p.think, p.sql, p.ok
}

func parseReply(content string) parsed {
	var p parsed
	lower := asciiLower(content) // the tags are ASCII; byte offsets stay those of content
	answer := 0                  // offset where the answer region starts
	if end := strings.LastIndex(lower, "</think>"); end >= 0 {
		start := 0
		if open := strings.Index(lower[:end], "<think>"); open >= 0 {
			start = open + len("<think>")
		}
		p.think = strings.TrimSpace(content[start:end])
		answer = end + len("</think>")
	} else if open := strings.Index(lower, "<think>"); open >= 0 {
		start := open + len("<think>")
		rest := lower[start:]
		if s := strings.Index(rest, "<sql>"); s >= 0 {
			p.think = strings.TrimSpace(content[start : start+s])
			answer = start + s
		} else {
			p.think = strings.TrimSpace(content[start:])
			return p
		}
	}
	region := lower[answer:]
	i := strings.LastIndex(region, "<sql>")
	if i < 0 {
		return p
	}
	body := answer + i + len("<sql>")
	stmt := content[body:]
	if j := strings.Index(lower[body:], "</sql>"); j >= 0 {
		stmt = content[body : body+j]
		p.closed = true
	}
	p.sql = stripFence(strings.TrimSpace(stmt))
	p.ok = p.sql != ""
	return p
}

// asciiLower lowers ASCII letters only, keeping byte offsets identical to s (strings.ToLower may
// change the length of non-ASCII text).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// stripFence removes a Markdown code fence (```sql … ```) around s.
func stripFence(s string) string {
	if !strings.HasPrefix(s, "```") {
		return s
	}
	s = s[3:]
	if nl := strings.IndexByte(s, '\n'); nl >= 0 {
		// The info string (e.g. "sql") runs to the end of the first line.
		if info := strings.TrimSpace(s[:nl]); !strings.ContainsAny(info, " \t(") {
			s = s[nl+1:]
		}
	} else {
		s = strings.TrimLeft(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
	}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, "```")
	return strings.TrimSpace(s)
}

// SameSQL is the convergence test: a and b are identical after trimming surrounding whitespace.
// Nothing else is normalised (case, inner spacing, a trailing semicolon all count), because
// finishing means repeating the statement verbatim.
func SameSQL(a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	return a != "" && a == b
}

// Observation texts that are not result tables.
const (
	ObsEmpty = "Empty result set"
	// FormatViolationText is the observation answering a reply with no parsable <sql> block.
	FormatViolationText = "Format error: your reply has no <sql>...</sql> block with a statement. Reply with <think>your reasoning</think> then, on a new line, <sql>one SQL statement</sql>."
	// TruncatedReplyText answers a reply cut by the token limit before its </sql>.
	TruncatedReplyText = "Format error: your reply was cut off by the length limit before </sql>. Think more briefly and reply with <think>your reasoning</think> then, on a new line, <sql>one SQL statement</sql>."
)

// wrapObservation puts body into the observation tags.
func wrapObservation(body string) string {
	return "<observation>\n" + body + "\n</observation>"
}

// FormatViolationObservation is the observation for a reply without a usable <sql> block.
func FormatViolationObservation() string { return wrapObservation(FormatViolationText) }

// RenderObservation renders an execution result as the protocol's observation: for a result set,
// the column header line, the first rows in their real order (duplicates kept) with cells joined
// by " | ", then either "(N rows)" or "… N more rows (M total)"; "Empty result set" (with the
// columns); "Error: <engine text>"; a timeout line; or "Refused: <why>". Cells longer than
// caps.MaxCellChars are cut and end in "…"; NULL is "NULL"; newlines and tabs inside cells are
// escaped so each row stays one line.
func RenderObservation(res *datasets.Result, caps ObsCaps) string {
	caps = caps.WithDefaults()
	if res == nil {
		return wrapObservation("Error: no result")
	}
	switch res.Outcome {
	case datasets.OutcomeError:
		return wrapObservation("Error: " + oneLineCap(res.Error, caps.MaxChars))
	case datasets.OutcomeTimeout:
		msg := "Timeout: the statement ran too long and was stopped"
		if res.Duration > 0 {
			msg = fmt.Sprintf("Timeout: the statement ran longer than %s and was stopped", res.Duration.Round(time.Millisecond))
		}
		return wrapObservation(msg)
	case datasets.OutcomeRefused:
		why := res.Error
		if why == "" {
			why = "only one read-only statement is allowed"
		}
		return wrapObservation("Refused: " + oneLineCap(why, caps.MaxChars))
	case datasets.OutcomeOK:
	default:
		return wrapObservation(fmt.Sprintf("Error: unknown outcome %q", res.Outcome))
	}
	var b strings.Builder
	header := make([]string, len(res.Columns))
	for i, c := range res.Columns {
		header[i] = cutCell(c, caps.MaxCellChars)
	}
	total := res.Total
	if total < len(res.Rows) {
		total = len(res.Rows)
	}
	if total == 0 {
		b.WriteString(ObsEmpty)
		if len(header) > 0 {
			b.WriteString("\nColumns: ")
			b.WriteString(strings.Join(header, " | "))
		}
		return wrapObservation(b.String())
	}
	b.WriteString(strings.Join(header, " | "))
	shown := 0
	cells := make([]string, 0, len(res.Columns))
	for _, row := range res.Rows {
		if shown >= caps.MaxRows {
			break
		}
		cells = cells[:0]
		for _, v := range row {
			cells = append(cells, cutCell(FormatValue(v), caps.MaxCellChars))
		}
		line := strings.Join(cells, " | ")
		if shown > 0 && b.Len()+1+len(line) > caps.MaxChars {
			break
		}
		b.WriteByte('\n')
		b.WriteString(line)
		shown++
	}
	b.WriteByte('\n')
	if shown < total {
		fmt.Fprintf(&b, "… %d more rows (%d total)", total-shown, total)
	} else if total == 1 {
		b.WriteString("(1 row)")
	} else {
		fmt.Fprintf(&b, "(%d rows)", total)
	}
	return wrapObservation(b.String())
}

// FormatValue renders one normalised result value as observation text.
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return "x'" + hex.EncodeToString(x) + "'"
	case time.Time:
		if x.Hour() == 0 && x.Minute() == 0 && x.Second() == 0 && x.Nanosecond() == 0 {
			return x.Format("2006-01-02")
		}
		return x.Format("2006-01-02 15:04:05.999999999")
	}
	return fmt.Sprint(v)
}

// cellEscaper keeps a cell on one line.
var cellEscaper = strings.NewReplacer("\r\n", `\n`, "\n", `\n`, "\r", `\r`, "\t", `\t`)

// cutCell escapes s and cuts it to max runes, the last one "…" when cut.
func cutCell(s string, max int) string {
	s = cellEscaper.Replace(s)
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// oneLineCap trims s and cuts it to max bytes on a rune boundary, marking the cut with "…".
func oneLineCap(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// AssistantText is the canonical protocol form of an assistant message for training:
// "<think>REASONING</think>\n<sql>SQL</sql>" when the content has no <think> of its own and the
// reasoning came in a separate field; the content as it is otherwise.
func AssistantText(m chat.Message) string {
	if m.Reasoning == "" || strings.Contains(asciiLower(m.Content), "</think>") {
		return m.Content
	}
	return "<think>" + strings.TrimSpace(m.Reasoning) + "</think>\n" + strings.TrimLeft(m.Content, " \t\r\n")
}
