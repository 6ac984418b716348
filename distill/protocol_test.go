package distill_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
)

func TestParseReply(t *testing.T) {
	cases := []struct {
		name, in, think, sql string
		ok                   bool
	}{
		{"plain", "<think>count them</think>\n<sql>SELECT count(*) FROM t</sql>", "count them", "SELECT count(*) FROM t", true},
		{"upper case tags", "<THINK>x</THINK>\n<SQL> SELECT 1 </SQL>", "x", "SELECT 1", true},
		{"fence inside", "<think>a</think>\n<sql>\n```sql\nSELECT a\nFROM t\n```\n</sql>", "a", "SELECT a\nFROM t", true},
		{"fence no info", "<think>a</think><sql>```\nSELECT 2\n```</sql>", "a", "SELECT 2", true},
		{"last of several blocks", "<think>t</think>\n<sql>SELECT 1</sql>\nor better\n<sql>SELECT 2</sql>", "t", "SELECT 2", true},
		{"draft inside think ignored", "<think>maybe <sql>SELECT draft</sql></think>\n<sql>SELECT final</sql>", "maybe <sql>SELECT draft</sql>", "SELECT final", true},
		{"only draft inside think", "<think>maybe <sql>SELECT draft</sql></think>\nno answer", "maybe <sql>SELECT draft</sql>", "", false},
		{"missing closing sql tag", "<think>t</think>\n<sql>SELECT 3", "t", "SELECT 3", true},
		{"pre-filled think", "reasoning here</think>\n<sql>SELECT 4</sql>", "reasoning here", "SELECT 4", true},
		{"think stripped by server", "\n\n<sql>SELECT 5</sql>", "", "SELECT 5", true},
		{"unclosed think then sql", "<think>forgot to close\n<sql>SELECT 6</sql>", "forgot to close", "SELECT 6", true},
		{"unclosed think only", "<think>still thinking", "still thinking", "", false},
		{"no tags", "SELECT 7", "", "", false},
		{"empty sql", "<think>x</think><sql>  </sql>", "x", "", false},
		{"empty", "", "", "", false},
		{"unicode before tags", "<think>Ünïcödé İ</think><sql>SELECT 'ß'</sql>", "Ünïcödé İ", "SELECT 'ß'", true},
		{"mysql backticks kept", "<think>x</think><sql>SELECT `a` FROM `t`</sql>", "x", "SELECT `a` FROM `t`", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			think, sql, ok := distill.ParseReply(c.in)
			if think != c.think || sql != c.sql || ok != c.ok {
				t.Errorf("ParseReply(%q) = (%q, %q, %v), want (%q, %q, %v)", c.in, think, sql, ok, c.think, c.sql, c.ok)
			}
		})
	}
}

func TestSameSQL(t *testing.T) {
	if !distill.SameSQL(" SELECT 1\n", "SELECT 1") {
		t.Error("whitespace around must not matter")
	}
	if distill.SameSQL("SELECT 1", "select 1") || distill.SameSQL("SELECT 1;", "SELECT 1") || distill.SameSQL("", "") {
		t.Error("case, semicolons and empty statements must count")
	}
}

func TestPrompts(t *testing.T) {
	sp := distill.SystemPrompt(datasets.Postgres, "PostgreSQL 16.4", "CREATE TABLE t (a int); -- a: 1, 2")
	for _, want := range []string{"PostgreSQL 16.4", "CREATE TABLE t (a int); -- a: 1, 2", "<think>", "<sql>", "<observation>", "exactly the same SQL", "read-only"} {
		if !strings.Contains(sp, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sp)
		}
	}
	up := distill.UserPrompt(datasets.Task{Question: " How many? ", Evidence: "many = count"})
	if up != "Question: How many?\nEvidence: many = count" {
		t.Errorf("user prompt %q", up)
	}
	if up := distill.UserPrompt(datasets.Task{Question: "Q"}); up != "Question: Q" {
		t.Errorf("user prompt without evidence %q", up)
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
		res  *datasets.Result
		caps distill.ObsCaps
		want string
	}{
		{"small", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"id", "name"}, Rows: [][]any{{int64(1), "a"}, {int64(1), "a"}, {nil, 2.5}}, Total: 3},
			distill.ObsCaps{}, "<observation>\nid | name\n1 | a\n1 | a\nNULL | 2.5\n(3 rows)\n</observation>"},
		{"one row", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"n"}, Rows: [][]any{{int64(7)}}, Total: 1},
			distill.ObsCaps{}, "<observation>\nn\n7\n(1 row)\n</observation>"},
		{"row cap with exact total", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"i", "s"}, Rows: rows(5), Total: 35, Truncated: true},
			distill.ObsCaps{MaxRows: 3}, "<observation>\ni | s\n0 | x\n1 | x\n2 | x\n… 32 more rows (35 total)\n</observation>"},
		{"cell cut", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"t"}, Rows: [][]any{{long}}, Total: 1},
			distill.ObsCaps{MaxCellChars: 10}, "<observation>\nt\nééééééééé…\n(1 row)\n</observation>"},
		{"newline in cell", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"t"}, Rows: [][]any{{"a\nb\tc"}}, Total: 1},
			distill.ObsCaps{}, "<observation>\nt\na\\nb\\tc\n(1 row)\n</observation>"},
		{"empty", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"a", "b"}},
			distill.ObsCaps{}, "<observation>\nEmpty result set\nColumns: a | b\n</observation>"},
		{"error", &datasets.Result{Outcome: datasets.OutcomeError, Error: "no such column: nme"},
			distill.ObsCaps{}, "<observation>\nError: no such column: nme\n</observation>"},
		{"timeout", &datasets.Result{Outcome: datasets.OutcomeTimeout, Duration: 30 * time.Second},
			distill.ObsCaps{}, "<observation>\nTimeout: the statement ran longer than 30s and was stopped\n</observation>"},
		{"refused", &datasets.Result{Outcome: datasets.OutcomeRefused, Error: "writes are not allowed"},
			distill.ObsCaps{}, "<observation>\nRefused: writes are not allowed\n</observation>"},
		{"char cap", &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{"s"}, Rows: [][]any{{strings.Repeat("a", 50)}, {strings.Repeat("b", 50)}, {strings.Repeat("c", 50)}}, Total: 3},
			distill.ObsCaps{MaxChars: 80}, "<observation>\ns\n" + strings.Repeat("a", 50) + "\n… 2 more rows (3 total)\n</observation>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := distill.RenderObservation(c.res, c.caps); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
	if got := distill.FormatViolationObservation(); !strings.HasPrefix(got, "<observation>\nFormat error") {
		t.Errorf("format violation observation %q", got)
	}
}

func TestAssistantText(t *testing.T) {
	m := chat.Message{Role: "assistant", Content: "\n<sql>SELECT 1</sql>", Reasoning: " because "}
	if got := distill.AssistantText(m); got != "<think>because</think>\n<sql>SELECT 1</sql>" {
		t.Errorf("AssistantText = %q", got)
	}
	m = chat.Message{Role: "assistant", Content: "<think>a</think>\n<sql>SELECT 1</sql>", Reasoning: "a"}
	if got := distill.AssistantText(m); got != m.Content {
		t.Errorf("content with its own think changed: %q", got)
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"<think>a</think>\n<sql>SELECT 1</sql>", "<SQL>```sql\nx\n```", "</think><sql>", "<think><sql></sql>", "İ<sql>ß</sql>", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		think, sql, ok := distill.ParseReply(s)
		if ok != (sql != "") {
			t.Fatalf("ok=%v with sql %q", ok, sql)
		}
		if sql != strings.TrimSpace(sql) || think != strings.TrimSpace(think) {
			t.Fatalf("untrimmed output %q / %q", think, sql)
		}
		if !strings.Contains(s, sql) && !strings.Contains(strings.ReplaceAll(s, "```", ""), sql) {
			t.Fatalf("sql %q is not from the input", sql)
		}
		if ok && !strings.Contains(sql+think, "<") && !strings.Contains(sql, "`") {
			// The canonical form parses back to the same statement and reasoning.
			think2, sql2, ok2 := distill.ParseReply("<think>" + think + "</think>\n<sql>" + sql + "</sql>")
			if !ok2 || sql2 != sql || think2 != think {
				t.Fatalf("canonical form of (%q, %q) parses as (%q, %q, %v)", think, sql, think2, sql2, ok2)
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
		res := &datasets.Result{Outcome: datasets.OutcomeOK, Columns: []string{col, "n", "f", "z", "b"}, Rows: rows, Total: total}
		caps := distill.ObsCaps{MaxRows: maxRows, MaxCellChars: maxCell}
		out := distill.RenderObservation(res, caps)
		if !strings.HasPrefix(out, "<observation>\n") || !strings.HasSuffix(out, "\n</observation>") {
			t.Fatalf("not wrapped: %q", out)
		}
		if !utf8.ValidString(out) && utf8.ValidString(col) && utf8.ValidString(cell) {
			t.Fatalf("invalid UTF-8 from valid input")
		}
		c := caps.WithDefaults()
		body := strings.Split(strings.TrimSuffix(strings.TrimPrefix(out, "<observation>\n"), "\n</observation>"), "\n")
		if total == 0 {
			if body[0] != distill.ObsEmpty {
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
