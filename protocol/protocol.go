// Package protocol is the chained-sql/v1 protocol itself: the prompts, the reply tags and their
// parser, convergence's SQL comparison, truncation, and the observations. It runs nothing: the
// episode loop is package episode's, the record of an episode package rundir's.
package protocol

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/sandbox"
	// The engines the prompts name, and that every package above the protocol opens databases
	// with, registered once for all of them.
	_ "github.com/chainedsql/chainedsql/sandbox/engines"
)

// ProtocolVersion names the protocol this package speaks.
const ProtocolVersion = "chained-sql/v1"

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
	// instead of shown. The header line, the first row and an error text are each cut to it
	// (default 8000).
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

// EngineName is the human name of a dialect's engine ("SQLite", "PostgreSQL", "MySQL"):
// sandbox.EngineName.
func EngineName(d datasets.Dialect) string { return sandbox.EngineName(d) }

// SystemPrompt is the protocol's system turn: the dialect and engine version, the schema as that
// dialect's DDL (sample values as comments, as sandbox.Schema.DDL renders them) and the rules.
// A byte of the DDL that is not UTF-8 (a sample value's) is U+FFFD (textcap.Valid).
func SystemPrompt(dialect datasets.Dialect, version, ddl string) string {
	engine := EngineName(dialect)
	if version == "" {
		version = engine
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You are an expert data analyst. You answer questions by writing SQL for a %s database (engine: %s).\n\n", engine, version)
	fmt.Fprintf(&b, "Database schema (%s DDL; comments show sample values):\n\n", engine)
	b.WriteString(textcap.Valid(strings.TrimSpace(ddl)))
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

// ParsedReply is an assistant reply taken apart under the chained-sql/v1 format rule (see
// ParseReply). Byte offsets index the content that was parsed.
type ParsedReply struct {
	// Think is the text of the think block, trimmed of surrounding whitespace; "" when there is
	// no block.
	Think string
	// HasThink reports a think block: an opening <think>, or a lone </think> that ends
	// reasoning a chat template opened in the prompt. ThinkClosed reports its </think>.
	HasThink, ThinkClosed bool
	// ThinkStart and ThinkEnd delimit the block in the content, its tags included: cutting
	// content[ThinkStart:ThinkEnd] out leaves the answer. Both are 0 without a block.
	ThinkStart, ThinkEnd int
	// SQL is the statement of the answer's last <sql> block, trimmed, a Markdown fence around it
	// removed; "" when there is none or it is blank.
	SQL string
	// HasSQL reports an <sql> tag after the think block; SQLClosed its </sql>.
	HasSQL, SQLClosed bool
	// OK reports a usable statement (SQL != "").
	OK bool
	// WellFormed reports the strict protocol form, which a format reward checks: optional
	// whitespace, <think>reasoning</think>, optional whitespace, <sql>statement</sql>, optional
	// whitespace, each tag exactly once, no tag inside the reasoning or the statement, and a
	// non-blank statement.
	WellFormed bool
}

// Answer returns the content without its think block: the text before the block and the text
// after it, each trimmed, joined by a newline when both are non-empty.
func (p ParsedReply) Answer(content string) string {
	if !p.HasThink {
		return strings.TrimSpace(content)
	}
	before := strings.TrimSpace(content[:p.ThinkStart])
	after := strings.TrimSpace(content[p.ThinkEnd:])
	if before != "" && after != "" {
		return before + "\n" + after
	}
	return before + after
}

// Protocol tags. They are matched without regard to ASCII case.
const (
	TagThinkOpen  = "<think>"
	TagThinkClose = "</think>"
	TagSQLOpen    = "<sql>"
	TagSQLClose   = "</sql>"
)

// ParseReply takes an assistant reply apart. It is the one parser of the protocol: the episode
// loop, curate's rendering and the RL environment all use it. The rules:
//
//   - Tags are exactly <think>, </think>, <sql>, </sql>, matched without regard to ASCII case
//     (<THINK> counts; "< think>" does not).
//   - A reply that begins (after whitespace) with an <sql> block has no think tags inside
//     that block: servers that split the reasoning into a field send just the answer, and a
//     '</think>' in a string literal of its statement is SQL.
//   - The think block ends at the first </think>, as the reasoning parsers of vLLM and SGLang
//     split a reply. It begins at the first <think> before that; when there is none, at the
//     start of the content (chat templates that put the opening tag into the prompt).
//   - Without any </think>, a <think> opens a block that ends where the first <sql> after it
//     begins, or at the end of the content (a reply cut by the token limit). Such a block is
//     not closed (ThinkClosed false).
//   - <sql> is looked for only after the think block, so drafts inside the reasoning never run.
//     Of several <sql> blocks the last one counts (the model's final answer). Its statement runs
//     to the first </sql> after it, or to the end of the content when there is none (stop
//     sequences cut it; SQLClosed false). A Markdown code fence around the statement is removed.
//   - Text outside the blocks is ignored; WellFormed reports whether there was any.
//
// ParseReply never fails: a reply with no usable statement has OK false.
func ParseReply(content string) ParsedReply {
	var p ParsedReply
	lower := asciiLower(content) // the tags are ASCII; byte offsets stay those of content
	answer := 0                  // offset where the answer region starts
	// A reply that opens with its <sql> block (a server split the reasoning off into a field)
	// has no think block in that statement: a '<think>' or '</think>' in a string literal
	// there is SQL, not a tag. Think tags are looked for only after that block.
	from := leadingSQLEnd(lower)
	if end := strings.Index(lower[from:], TagThinkClose); end >= 0 {
		end += from
		start := 0
		if open := strings.Index(lower[from:end], TagThinkOpen); open >= 0 {
			p.ThinkStart, start = from+open, from+open+len(TagThinkOpen)
		} else if from > 0 {
			p.ThinkStart, start = from, from // a lone </think> after the leading block
		}
		p.Think = strings.TrimSpace(content[start:end])
		p.HasThink, p.ThinkClosed = true, true
		answer = end + len(TagThinkClose)
		p.ThinkEnd = answer
	} else if open := strings.Index(lower[from:], TagThinkOpen); open >= 0 {
		open += from
		start := open + len(TagThinkOpen)
		p.HasThink, p.ThinkStart = true, open
		if s := strings.Index(lower[start:], TagSQLOpen); s >= 0 {
			answer = start + s
		} else {
			answer = len(content)
		}
		p.Think = strings.TrimSpace(content[start:answer])
		p.ThinkEnd = answer
	}
	region := lower[answer:]
	if i := strings.LastIndex(region, TagSQLOpen); i >= 0 {
		p.HasSQL = true
		body := answer + i + len(TagSQLOpen)
		stmt := content[body:]
		if j := strings.Index(lower[body:], TagSQLClose); j >= 0 {
			stmt = content[body : body+j]
			p.SQLClosed = true
		}
		p.SQL = stripFence(strings.TrimSpace(stmt))
		p.OK = p.SQL != ""
	}
	p.WellFormed = wellFormed(lower)
	return p
}

// leadingSQLEnd is the offset just past the </sql> of an <sql> block that begins the
// (lowered) content after whitespace, the end of the content when that block is not closed,
// and 0 when the content does not begin with <sql>.
func leadingSQLEnd(lower string) int {
	lead := len(lower) - len(strings.TrimLeft(lower, " \t\r\n"))
	if !strings.HasPrefix(lower[lead:], TagSQLOpen) {
		return 0
	}
	body := lead + len(TagSQLOpen)
	if j := strings.Index(lower[body:], TagSQLClose); j >= 0 {
		return body + j + len(TagSQLClose)
	}
	return len(lower)
}

// wellFormed checks the strict form on lowered content (see ParsedReply.WellFormed).
func wellFormed(lower string) bool {
	s := strings.TrimSpace(lower)
	rest, ok := strings.CutPrefix(s, TagThinkOpen)
	if !ok {
		return false
	}
	think, rest, ok := strings.Cut(rest, TagThinkClose)
	if !ok || hasTag(think) {
		return false
	}
	rest, ok = strings.CutPrefix(strings.TrimSpace(rest), TagSQLOpen)
	if !ok {
		return false
	}
	stmt, rest, ok := strings.Cut(rest, TagSQLClose)
	return ok && strings.TrimSpace(rest) == "" && strings.TrimSpace(stmt) != "" && !hasTag(stmt)
}

func hasTag(s string) bool {
	for _, t := range []string{TagThinkOpen, TagThinkClose, TagSQLOpen, TagSQLClose} {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
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
	// TruncatedReplyText answers a truncated reply: one the token limit (or another non-stop
	// finish) cut before its SQL was complete. It is not a format violation.
	TruncatedReplyText = "Your reply was cut off by the length limit before it finished its <sql> block. Think more briefly and reply with <think>your reasoning</think> then, on a new line, <sql>one SQL statement</sql>."
)

// wrapObservation puts body into the observation tags.
func wrapObservation(body string) string {
	return "<observation>\n" + body + "\n</observation>"
}

// FormatViolationObservation is the observation for a reply without a usable <sql> block.
func FormatViolationObservation() string { return wrapObservation(FormatViolationText) }

// TruncatedObservation is the observation for a truncated reply.
func TruncatedObservation() string { return wrapObservation(TruncatedReplyText) }

// Truncated reports whether a reply was cut before its SQL was complete: any finish other than
// stop (or none) inside an <sql> block that has no </sql>; or finish length while the model was
// still reasoning: content null or empty (the reasoning field, or hidden reasoning, used the
// budget), reasoning (a field, or an inline think block) and nothing after it, or, when the chat
// template opened the think block in the prompt (Reply.ThinkOpened), content with no protocol
// tag at all (see CutInOpenedThink). Such a turn is not a format violation: the model was
// stopped, not wrong. A reply that ran to the limit with anything else and no <sql>
// (whitespace included) is still a format violation.
func Truncated(r chat.Reply) bool {
	if r.FinishReason == "" || r.FinishReason == chat.FinishStop {
		return false
	}
	p := ParseReply(r.Content)
	if p.HasSQL && !p.SQLClosed {
		return true
	}
	if r.FinishReason != chat.FinishLength || p.OK {
		return false
	}
	reasoned := p.HasThink || strings.TrimSpace(r.Reasoning) != ""
	return r.Content == "" || (reasoned && p.Answer(r.Content) == "") || CutInOpenedThink(r)
}

// CutInOpenedThink reports a reply the token limit cut inside reasoning that the chat template
// opened in the prompt: Reply.ThinkOpened, finish length, no separate reasoning text (a server
// that split one off returned the answer part as content), and non-blank content with no
// <think>, </think> or <sql> tag. By the template's construction all of that content is
// reasoning: the model never reached its </think>. Without ThinkOpened the same text is a reply
// that ran to the limit without any <sql>, a format violation: a student's or an RL trainer's
// reply is never read this way, nor one of a teacher whose template writes no <think> into the
// prompt.
func CutInOpenedThink(r chat.Reply) bool {
	if !r.ThinkOpened || r.FinishReason != chat.FinishLength || strings.TrimSpace(r.Reasoning) != "" || strings.TrimSpace(r.Content) == "" {
		return false
	}
	p := ParseReply(r.Content)
	return !p.HasThink && !p.HasSQL
}

// ReplyContent is r's content as the model generated it: for a reply cut inside reasoning its
// template opened (CutInOpenedThink), with that opening <think> put back in front, so that
// ParseReply sees an unclosed think block; otherwise the content as received.
func ReplyContent(r chat.Reply) string {
	if CutInOpenedThink(r) {
		return TagThinkOpen + r.Content
	}
	return r.Content
}

// RenderObservation renders an execution result as the protocol's observation: for a result set,
// the column header line, the first rows in their real order (duplicates kept) with cells joined
// by " | ", then either "(N rows)" or "… N more rows (M total)"; "Empty result set" (with the
// columns); "Error: <engine text>"; a timeout line; or "Refused: <why>". Cells longer than
// caps.MaxCellChars are cut and end in "…"; NULL is "NULL"; newlines and tabs inside cells are
// escaped so each row stays one line. The header line, the first row and an error or refusal
// text are each cut to caps.MaxChars bytes (textcap.Cut, "…[truncated N bytes]"); rows after the
// first are shown while the body stays within caps.MaxChars, so the body is at most about
// twice caps.MaxChars. A refusal's reason is shown after one "Refused: " (the screen's own
// "refused: " prefix is dropped).
func RenderObservation(res *sandbox.Result, caps ObsCaps) string {
	caps = caps.WithDefaults()
	if res == nil {
		return wrapObservation("Error: no result")
	}
	switch res.Outcome {
	case sandbox.OutcomeError:
		return wrapObservation("Error: " + oneLineCap(textcap.Valid(res.Error), caps.MaxChars))
	case sandbox.OutcomeTimeout:
		msg := "Timeout: the statement ran too long and was stopped"
		if res.Duration > 0 {
			msg = fmt.Sprintf("Timeout: the statement ran longer than %s and was stopped", res.Duration.Round(time.Millisecond))
		}
		return wrapObservation(msg)
	case sandbox.OutcomeRefused:
		// The screen's reasons begin with "refused: " themselves; the observation says it once.
		why := strings.TrimSpace(res.Error)
		if len(why) >= len(refusedPrefix) && strings.EqualFold(why[:len(refusedPrefix)], refusedPrefix) {
			why = why[len(refusedPrefix):]
		}
		if why == "" {
			why = "only one read-only statement is allowed"
		}
		return wrapObservation("Refused: " + oneLineCap(textcap.Valid(why), caps.MaxChars))
	case sandbox.OutcomeOK:
	default:
		return wrapObservation(fmt.Sprintf("Error: unknown outcome %q", res.Outcome))
	}
	var b strings.Builder
	header := make([]string, len(res.Columns))
	for i, c := range res.Columns {
		header[i] = cutCell(textcap.Valid(c), caps.MaxCellChars)
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
	b.WriteString(textcap.Cut(strings.Join(header, " | "), caps.MaxChars))
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
		if b.Len()+1+len(line) > caps.MaxChars {
			if shown > 0 {
				break
			}
			line = textcap.Cut(line, caps.MaxChars) // the first row is shown, cut if need be
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

// FormatValue renders one normalised result value as observation text: a string's bytes that
// are not UTF-8 as U+FFFD (textcap.Valid), bytes that are not UTF-8 as x'hex'.
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return textcap.Valid(x)
	case sandbox.Decimal:
		return string(x)
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

// refusedPrefix begins the reasons the screen gives (datasets); RenderObservation drops it.
const refusedPrefix = "refused: "

// oneLineCap trims s and cuts it to max bytes (textcap.Cut: on a rune boundary, the marker
// included).
func oneLineCap(s string, max int) string {
	return textcap.Cut(strings.TrimSpace(s), max)
}
