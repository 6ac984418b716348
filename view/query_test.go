package view

import (
	"net/url"
	"strings"
	"testing"
)

// TestParseQueryKeys: every key the README lists reads (sort, offset and limit included); any
// other key is refused, named, with the likely intended key for a misspelling and the list of
// keys.
func TestParseQueryKeys(t *testing.T) {
	valid := map[string]string{
		"teacher": "glm", "dialect": "sqlite", "difficulty": "easy", "db_id": "concert_singer",
		"converged": "1", "exec_ok": "0", "correct": "1", "unjudged": "1", "truncated": "0", "violations": "some",
		"turns_min": "2", "turns_max": "3", "tokens_min": "10", "tokens_max": "900",
		"q": "singer", "text": "wait", "in": "reasoning", "label": "good", "noted": "1", "labelled": "0",
		"sort": "-tokens", "offset": "5", "limit": "20",
	}
	all := url.Values{}
	for k, v := range valid {
		all.Set(k, v)
		if _, err := ParseQuery(url.Values{k: {v}}); err != nil {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
	if _, err := ParseQuery(all); err != nil {
		t.Errorf("every key at once: %v", err)
	}
	if len(valid) != len(queryKeys) {
		t.Errorf("the test has %d keys, ParseQuery takes %d: %v", len(valid), len(queryKeys), queryKeys)
	}
	for _, c := range []struct{ query, want, hint string }{
		{"bogus=1", `unknown key "bogus"`, ""},
		{"teachers=glm", `unknown key "teachers"`, `did you mean "teacher"?`},
		{"teacher=glm&lable=good", `unknown key "lable"`, `did you mean "label"?`},
		{"format=jsonl", `unknown key "format"`, ""},
		{"x=1", `unknown key "x"`, ""},
	} {
		v, _ := url.ParseQuery(c.query)
		_, err := ParseQuery(v)
		if err == nil {
			t.Errorf("%s: no error", c.query)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, "teacher, dialect, difficulty, db_id, converged") {
			t.Errorf("%s: %q lacks %q or the keys", c.query, msg, c.want)
		}
		if c.hint != "" && !strings.Contains(msg, c.hint) || c.hint == "" && strings.Contains(msg, "did you mean") {
			t.Errorf("%s: %q, want hint %q", c.query, msg, c.hint)
		}
	}
}
