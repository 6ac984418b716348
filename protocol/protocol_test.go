package protocol_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

func TestParseReply(t *testing.T) {
	cases := []struct {
		name, in, think, sql string
		ok, hasThink, closed bool
		wellFormed           bool
		answer               string
	}{
		{"plain", "<think>count them</think>\n<sql>SELECT count(*) FROM t</sql>", "count them", "SELECT count(*) FROM t", true, true, true, true, "<sql>SELECT count(*) FROM t</sql>"},
		{"upper case tags", "<THINK>x</THINK>\n<SQL> SELECT 1 </SQL>", "x", "SELECT 1", true, true, true, true, "<SQL> SELECT 1 </SQL>"},
		{"fence inside", "<think>a</think>\n<sql>\n```sql\nSELECT a\nFROM t\n```\n</sql>", "a", "SELECT a\nFROM t", true, true, true, true, "<sql>\n```sql\nSELECT a\nFROM t\n```\n</sql>"},
		{"fence no info", "<think>a</think><sql>```\nSELECT 2\n```</sql>", "a", "SELECT 2", true, true, true, true, "<sql>```\nSELECT 2\n```</sql>"},
		{"last of several blocks", "<think>t</think>\n<sql>SELECT 1</sql>\nor better\n<sql>SELECT 2</sql>", "t", "SELECT 2", true, true, true, false, "<sql>SELECT 1</sql>\nor better\n<sql>SELECT 2</sql>"},
		{"draft inside think ignored", "<think>maybe <sql>SELECT draft</sql></think>\n<sql>SELECT final</sql>", "maybe <sql>SELECT draft</sql>", "SELECT final", true, true, true, false, "<sql>SELECT final</sql>"},
		{"only draft inside think", "<think>maybe <sql>SELECT draft</sql></think>\nno answer", "maybe <sql>SELECT draft</sql>", "", false, true, true, false, "no answer"},
		{"first close ends the block", "<think>a</think>\n<sql>SELECT 1</sql> then </think> <sql>SELECT 2</sql>", "a", "SELECT 2", true, true, true, false, "<sql>SELECT 1</sql> then </think> <sql>SELECT 2</sql>"},
		{"missing closing sql tag", "<think>t</think>\n<sql>SELECT 3", "t", "SELECT 3", true, true, true, false, "<sql>SELECT 3"},
		{"pre-filled think", "reasoning here</think>\n<sql>SELECT 4</sql>", "reasoning here", "SELECT 4", true, true, true, false, "<sql>SELECT 4</sql>"},
		{"think stripped by server", "\n\n<sql>SELECT 5</sql>", "", "SELECT 5", true, false, false, false, "<sql>SELECT 5</sql>"},
		{"unclosed think then sql", "<think>forgot to close\n<sql>SELECT 6</sql>", "forgot to close", "SELECT 6", true, true, false, false, "<sql>SELECT 6</sql>"},
		{"unclosed think only", "<think>still thinking", "still thinking", "", false, true, false, false, ""},
		{"preamble kept in answer", "Sure. <think>x</think> <sql>SELECT 8</sql>", "x", "SELECT 8", true, true, true, false, "Sure.\n<sql>SELECT 8</sql>"},
		{"no tags", "SELECT 7", "", "", false, false, false, false, "SELECT 7"},
		{"empty sql", "<think>x</think><sql>  </sql>", "x", "", false, true, true, false, "<sql>  </sql>"},
		{"empty", "", "", "", false, false, false, false, ""},
		{"unicode before tags", "<think>Ünïcödé İ</think><sql>SELECT 'ß'</sql>", "Ünïcödé İ", "SELECT 'ß'", true, true, true, true, "<sql>SELECT 'ß'</sql>"},
		{"mysql backticks kept", "<think>x</think><sql>SELECT `a` FROM `t`</sql>", "x", "SELECT `a` FROM `t`", true, true, true, true, "<sql>SELECT `a` FROM `t`</sql>"},
		{"think tags in a literal of a leading sql block", "<sql>SELECT id FROM posts WHERE body LIKE '%</think>%'</sql>", "", "SELECT id FROM posts WHERE body LIKE '%</think>%'", true, false, false, false, "<sql>SELECT id FROM posts WHERE body LIKE '%</think>%'</sql>"},
		{"open think tag in a literal of a leading sql block", "\n<sql>SELECT '<think>' AS t</sql>", "", "SELECT '<think>' AS t", true, false, false, false, "<sql>SELECT '<think>' AS t</sql>"},
		{"spaced tag is text", "<think>x</think>< sql>SELECT 9</sql>", "x", "", false, true, true, false, "< sql>SELECT 9</sql>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := protocol.ParseReply(c.in)
			if p.Think != c.think || p.SQL != c.sql || p.OK != c.ok || p.HasThink != c.hasThink || p.ThinkClosed != c.closed || p.WellFormed != c.wellFormed {
				t.Errorf("ParseReply(%q) = %+v, want think %q sql %q ok %v think %v/%v well-formed %v", c.in, p, c.think, c.sql, c.ok, c.hasThink, c.closed, c.wellFormed)
			}
			if got := p.Answer(c.in); got != c.answer {
				t.Errorf("Answer(%q) = %q, want %q", c.in, got, c.answer)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	cases := []struct {
		content, reasoning, finish string
		want                       bool
	}{
		{"", "", "length", true},                                        // content null: hidden reasoning used the budget
		{"", "field reasoning", "length", true},                         // content null after a reasoning field
		{"\n\n", "field reasoning", "length", true},                     // nothing but whitespace after the reasoning
		{"<think>still going", "", "length", true},                      // inline thinking cut
		{"<think>done</think>\n", "", "length", true},                   // thought, then cut before answering
		{"<think>a</think>\n<sql>SELECT a FROM", "", "length", true},    // cut inside <sql>
		{"<think>a</think>\n<sql>SELECT 1", "", "content_filter", true}, // any non-stop finish inside <sql>
		{"<think>a</think>\n<sql>SELECT 1</sql>", "", "length", false},  // complete despite the limit
		{"<think>a</think>\n<sql>SELECT 1", "", "stop", false},          // a stop sequence ate </sql>
		{"", "", "stop", false},                                         // empty but stopped: a violation
		{"\n\n\n\n", "", "length", false},                               // whitespace to the limit: a violation
		{"no tags at all", "", "length", false},                         // rambling to the limit: a violation
		{"<think>done</think>\nand then some text", "", "length", false},
		{"no tags at all", "", "", false},
	}
	for _, c := range cases {
		r := chat.Reply{Content: c.content, Reasoning: c.reasoning, FinishReason: c.finish}
		if got := protocol.Truncated(r); got != c.want {
			t.Errorf("Truncated(%q, reasoning %q, %q) = %v, want %v", c.content, c.reasoning, c.finish, got, c.want)
		}
	}
}

// TestCutInOpenedThink: with a chat template that opened <think> in the prompt, a reply the
// token limit cut before </think> has no tag at all and is truncated, not a format violation;
// the same text without ThinkOpened (a student, or a template that opens nothing) stays one.
func TestCutInOpenedThink(t *testing.T) {
	cases := []struct {
		content, reasoning, finish string
		opened, cut, truncated     bool
	}{
		{"still reasoning about the join", "", "length", true, true, true},
		{"still reasoning about the join", "", "length", false, false, false}, // rambling to the limit
		{"still reasoning about the join", "", "stop", true, false, false},    // stopped inside its reasoning
		{"still reasoning about the join", "", "content_filter", true, false, false},
		{"the answer part, cut", "the field's reasoning", "length", true, false, false}, // a parser split the reasoning off
		{"done</think>\nan answer without sql", "", "length", true, false, false},       // reached </think>: a violation
		{"done</think>\n", "", "length", true, false, true},                             // cut right after its reasoning
		{"draft <sql>SELECT 1</sql> and more", "", "length", true, false, false},        // a closed <sql> runs, as before
		{"thinking <sql>SELECT a FROM", "", "length", true, false, true},                // cut inside <sql>
		{"", "", "length", true, false, true},                                           // content null: nothing to put back
		{"\n\n", "", "length", true, false, false},                                      // whitespace to the limit
	}
	for _, c := range cases {
		r := chat.Reply{Content: c.content, Reasoning: c.reasoning, FinishReason: c.finish, ThinkOpened: c.opened}
		if got := protocol.CutInOpenedThink(r); got != c.cut {
			t.Errorf("CutInOpenedThink(%q, reasoning %q, %s, opened %v) = %v, want %v", c.content, c.reasoning, c.finish, c.opened, got, c.cut)
		}
		if got := protocol.Truncated(r); got != c.truncated {
			t.Errorf("Truncated(%q, reasoning %q, %s, opened %v) = %v, want %v", c.content, c.reasoning, c.finish, c.opened, got, c.truncated)
		}
		want := c.content
		if c.cut {
			want = "<think>" + c.content
		}
		if got := protocol.ReplyContent(r); got != want {
			t.Errorf("ReplyContent(%q) = %q, want %q", c.content, got, want)
		}
	}
}

func TestSameSQL(t *testing.T) {
	if !protocol.SameSQL(" SELECT 1\n", "SELECT 1") {
		t.Error("whitespace around must not matter")
	}
	if protocol.SameSQL("SELECT 1", "select 1") || protocol.SameSQL("SELECT 1;", "SELECT 1") || protocol.SameSQL("", "") {
		t.Error("case, semicolons and empty statements must count")
	}
}

func TestPrompts(t *testing.T) {
	sp := protocol.SystemPrompt(datasets.Postgres, "PostgreSQL 16.4", "CREATE TABLE t (a int); -- a: 1, 2")
	for _, want := range []string{"PostgreSQL 16.4", "CREATE TABLE t (a int); -- a: 1, 2", "<think>", "<sql>", "<observation>", "exactly the same SQL", "read-only"} {
		if !strings.Contains(sp, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sp)
		}
	}
	up := protocol.UserPrompt(datasets.Task{Question: " How many? ", Evidence: "many = count"})
	if up != "Question: How many?\nEvidence: many = count" {
		t.Errorf("user prompt %q", up)
	}
	if up := protocol.UserPrompt(datasets.Task{Question: "Q"}); up != "Question: Q" {
		t.Errorf("user prompt without evidence %q", up)
	}
}

// TestInvalidUTF8 is what a policy is shown of a database whose TEXT holds bytes that are not
// UTF-8 (SQLite stores any bytes as TEXT): the system prompt's sample values, a result's cells
// and column names, an error. Each such byte is U+FFFD, as encoding/json writes it, so the
// texts a run dir, the env's JSON, its token ids, a prompt or rollout Parquet file and the
// student's prompt hold are one text. Before, the raw bytes reached the env's token ids (its
// JSON text said U+FFFD) and the Parquet files, which DuckDB then refused to read.
func TestInvalidUTF8(t *testing.T) {
	sp := protocol.SystemPrompt(datasets.SQLite, "SQLite 3", "CREATE TABLE t (name TEXT -- examples: '\xffA', '\xc3')")
	if !strings.Contains(sp, "'\uFFFDA', '\uFFFD'") {
		t.Errorf("system prompt's sample values: %q", sp[strings.Index(sp, "CREATE"):strings.Index(sp, "Rules")])
	}
	res := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"n\xfe"}, Rows: [][]any{{"\xffA\xc3"}, {[]byte("ok")}}, Total: 2}
	if got, want := protocol.RenderObservation(res, protocol.ObsCaps{}), "<observation>\nn\uFFFD\n\uFFFDA\uFFFD\nok\n(2 rows)\n</observation>"; got != want {
		t.Errorf("result: %q, want %q", got, want)
	}
	bad := &sandbox.Result{Outcome: sandbox.OutcomeError, Error: "bad value \xe2\x82"}
	if got, want := protocol.RenderObservation(bad, protocol.ObsCaps{}), "<observation>\nError: bad value \uFFFD\uFFFD\n</observation>"; got != want {
		t.Errorf("error: %q, want %q", got, want)
	}
	if got := protocol.FormatValue("\xff"); got != "\uFFFD" {
		t.Errorf("FormatValue: %q", got)
	}
	// A cell of invalid bytes is cut like any other: each U+FFFD is one character.
	long := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"b"}, Rows: [][]any{{strings.Repeat("\xff", 300)}}, Total: 1}
	if got := protocol.RenderObservation(long, protocol.ObsCaps{MaxCellChars: 5}); got != "<observation>\nb\n\uFFFD\uFFFD\uFFFD\uFFFD…\n(1 row)\n</observation>" || !utf8.ValidString(got) {
		t.Errorf("a cut cell: %q", got)
	}
}

func TestRenderObservation(t *testing.T) {
	rows := func(n int) [][]any {
		var out [][]any
		for i := 0; i < n; i++ {
			out = append(out, []any{int64(i), "x"})
		}
		return out
	}
	long := strings.Repeat("é", 150)
	cases := []struct {
		name string
		res  *sandbox.Result
		caps protocol.ObsCaps
		want string
	}{
		{"small", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"id", "name"}, Rows: [][]any{{int64(1), "a"}, {int64(1), "a"}, {nil, 2.5}}, Total: 3},
			protocol.ObsCaps{}, "<observation>\nid | name\n1 | a\n1 | a\nNULL | 2.5\n(3 rows)\n</observation>"},
		{"one row", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"n"}, Rows: [][]any{{int64(7)}}, Total: 1},
			protocol.ObsCaps{}, "<observation>\nn\n7\n(1 row)\n</observation>"},
		{"row cap with exact total", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"i", "s"}, Rows: rows(5), Total: 35, Truncated: true},
			protocol.ObsCaps{MaxRows: 3}, "<observation>\ni | s\n0 | x\n1 | x\n2 | x\n… 32 more rows (35 total)\n</observation>"},
		{"cell cut", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"t"}, Rows: [][]any{{long}}, Total: 1},
			protocol.ObsCaps{MaxCellChars: 10}, "<observation>\nt\nééééééééé…\n(1 row)\n</observation>"},
		{"newline in cell", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"t"}, Rows: [][]any{{"a\nb\tc"}}, Total: 1},
			protocol.ObsCaps{}, "<observation>\nt\na\\nb\\tc\n(1 row)\n</observation>"},
		{"empty", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"a", "b"}},
			protocol.ObsCaps{}, "<observation>\nEmpty result set\nColumns: a | b\n</observation>"},
		{"error", &sandbox.Result{Outcome: sandbox.OutcomeError, Error: "no such column: nme"},
			protocol.ObsCaps{}, "<observation>\nError: no such column: nme\n</observation>"},
		{"timeout", &sandbox.Result{Outcome: sandbox.OutcomeTimeout, Duration: 30 * time.Second},
			protocol.ObsCaps{}, "<observation>\nTimeout: the statement ran longer than 30s and was stopped\n</observation>"},
		{"refused", &sandbox.Result{Outcome: sandbox.OutcomeRefused, Error: "writes are not allowed"},
			protocol.ObsCaps{}, "<observation>\nRefused: writes are not allowed\n</observation>"},
		{"refused by the screen", &sandbox.Result{Outcome: sandbox.OutcomeRefused, Error: "refused: only read-only queries (SELECT, WITH, VALUES) are allowed"},
			protocol.ObsCaps{}, "<observation>\nRefused: only read-only queries (SELECT, WITH, VALUES) are allowed\n</observation>"},
		{"huge error", &sandbox.Result{Outcome: sandbox.OutcomeError, Error: "invalid input syntax for type integer: \"" + strings.Repeat("9", 1<<20) + "\""},
			protocol.ObsCaps{MaxChars: 100}, "<observation>\nError: invalid input syntax for type integer: \"" + strings.Repeat("9", 32) + "…[truncated 1048545 bytes]\n</observation>"}, // 100 bytes
		{"wide header and first row", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{strings.Repeat("h", 60), strings.Repeat("i", 60)}, Rows: [][]any{{strings.Repeat("a", 60), strings.Repeat("b", 60)}, {"c", "d"}}, Total: 2},
			protocol.ObsCaps{MaxChars: 80}, "<observation>\n" + strings.Repeat("h", 56) + "…[truncated 67 bytes]\n" + strings.Repeat("a", 56) + "…[truncated 67 bytes]\n… 1 more rows (2 total)\n</observation>"},
		{"char cap", &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"s"}, Rows: [][]any{{strings.Repeat("a", 50)}, {strings.Repeat("b", 50)}, {strings.Repeat("c", 50)}}, Total: 3},
			protocol.ObsCaps{MaxChars: 80}, "<observation>\ns\n" + strings.Repeat("a", 50) + "\n… 2 more rows (3 total)\n</observation>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := protocol.RenderObservation(c.res, c.caps); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
	if got := protocol.FormatViolationObservation(); !strings.HasPrefix(got, "<observation>\nFormat error") {
		t.Errorf("format violation observation %q", got)
	}
}

// FuzzParseReply checks the parser's invariants on any input: it never panics; outputs are
// trimmed and come from the input; the block offsets are in range and the block starts with its
// tag; a well-formed reply is also OK; and the canonical form of what was parsed parses back to
// the same reasoning and statement, well-formed.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"<think>a</think>\n<sql>SELECT 1</sql>", "<SQL>```sql\nx\n```", "</think><sql>", "<think><sql></sql>", "İ<sql>ß</sql>", "",
		"a</think>b</think><sql>c", "SELECT '</think>'", "x <think> y", "<think>x<sql>y</sql></think><sql>z</sql>", "<ThInK>\n</tHiNk><Sql>1</sQL>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := protocol.ParseReply(s)
		if p.OK != (p.SQL != "") || (p.WellFormed && !p.OK) || (p.OK && !p.HasSQL) || (p.ThinkClosed && !p.HasThink) {
			t.Fatalf("inconsistent flags %+v", p)
		}
		if p.SQL != strings.TrimSpace(p.SQL) || p.Think != strings.TrimSpace(p.Think) {
			t.Fatalf("untrimmed output %+v", p)
		}
		if !strings.Contains(s, p.SQL) && !strings.Contains(strings.ReplaceAll(s, "```", ""), p.SQL) {
			t.Fatalf("sql %q is not from the input", p.SQL)
		}
		if !strings.Contains(s, p.Think) {
			t.Fatalf("think %q is not from the input", p.Think)
		}
		if p.ThinkStart < 0 || p.ThinkStart > p.ThinkEnd || p.ThinkEnd > len(s) {
			t.Fatalf("block [%d,%d) out of range for %d bytes", p.ThinkStart, p.ThinkEnd, len(s))
		}
		if p.HasThink && !strings.Contains(s[p.ThinkStart:p.ThinkEnd], p.Think) {
			t.Fatalf("think %q is not inside its block %q", p.Think, s[p.ThinkStart:p.ThinkEnd])
		}
		// A statement sent alone (the reasoning in a field) parses back whole, whatever think
		// tags its literals hold.
		if stmt := strings.TrimSpace(s); stmt != "" && !strings.Contains(strings.ToLower(s), "sql>") && !strings.HasPrefix(stmt, "```") {
			q := protocol.ParseReply("<sql>" + s + "</sql>")
			if q.SQL != stmt || q.HasThink || !q.SQLClosed {
				t.Fatalf("lone statement %q parses as %+v", s, q)
			}
		}
		if p.OK && !strings.Contains(strings.ToLower(p.Think+p.SQL), "<") && !strings.Contains(p.SQL, "`") {
			canon := "<think>" + p.Think + "</think>\n<sql>" + p.SQL + "</sql>"
			q := protocol.ParseReply(canon)
			if !q.OK || q.SQL != p.SQL || q.Think != p.Think || !q.WellFormed {
				t.Fatalf("canonical form %q parses as %+v", canon, q)
			}
		}
	})
}

func FuzzRenderObservation(f *testing.F) {
	f.Add("a", "x\ny", int64(3), 2.5, 2, 5, 10, 1)
	f.Add("", "", int64(0), 0.0, 0, 0, 0, 0)
	f.Fuzz(func(t *testing.T, col, cell string, n int64, fl float64, nrows, maxRows, maxCell int, total int) {
		if nrows < 0 || nrows > 200 {
			nrows = 3
		}
		var rows [][]any
		for i := 0; i < nrows; i++ {
			rows = append(rows, []any{cell, n, fl, nil, []byte(cell)})
		}
		if total < nrows {
			total = nrows
		}
		maxRows %= 50
		maxCell %= 300
		res := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{col, "n", "f", "z", "b"}, Rows: rows, Total: total}
		caps := protocol.ObsCaps{MaxRows: maxRows, MaxCellChars: maxCell}
		out := protocol.RenderObservation(res, caps)
		if !strings.HasPrefix(out, "<observation>\n") || !strings.HasSuffix(out, "\n</observation>") {
			t.Fatalf("not wrapped: %q", out)
		}
		if !utf8.ValidString(out) && utf8.ValidString(col) && utf8.ValidString(cell) {
			t.Fatalf("invalid UTF-8 from valid input")
		}
		c := caps.WithDefaults()
		body := strings.Split(strings.TrimSuffix(strings.TrimPrefix(out, "<observation>\n"), "\n</observation>"), "\n")
		if total == 0 {
			if body[0] != protocol.ObsEmpty {
				t.Fatalf("empty result rendered %q", out)
			}
			return
		}
		shown := len(body) - 2
		if shown > c.MaxRows || shown > nrows {
			t.Fatalf("%d rows shown, caps %d, have %d", shown, c.MaxRows, nrows)
		}
		last := body[len(body)-1]
		if shown < total && !strings.HasPrefix(last, "… ") {
			t.Fatalf("truncation line missing: %q", last)
		}
		for _, line := range body[1 : len(body)-1] {
			for _, cellText := range strings.Split(line, " | ") {
				if utf8.RuneCountInString(cellText) > c.MaxCellChars && !strings.Contains(cell, " | ") && !strings.Contains(col, " | ") {
					t.Fatalf("cell of %d runes over cap %d", utf8.RuneCountInString(cellText), c.MaxCellChars)
				}
			}
		}
	})
}
