package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/oaitest"
)

// TestTruncatedTurns: teachers behind a vLLM without a reasoning parser whose chat template
// opens <think> in the prompt, each cut by the token limit inside the reasoning of its first
// turn (content without any tag, finish length), through the built distill and curate binaries.
// The qwen preset declares the template (template_opens_think) and gets a truncated turn,
// rendered as an open <think>; glm declares nothing and the same text stays a format violation.
// curate build keeps the truncated row by default and warns in its summary, card and stats;
// --truncated exclude lists it as excluded instead. verify agrees on both datasets and
// curate.Mask (the viewer's loss mask) gives every row's counts.
func TestTruncatedTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs both binaries")
	}
	f := newProviderFixture(t)
	cut := strings.TrimSpace(f.tasks[0].Question)
	p := oaitest.Personalities["vllm-opened"]
	models := presetModels(t, p.Name)
	srv := oaitest.NewServer(t, providerScript(f.gold, cut), oaitest.WithPersonality(p), oaitest.WithModels(models["glm"], models["qwen"]))
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	f.distillRun(t, srv, p.Name, []string{"glm", "qwen"}, "", run)
	tok, _, err := loadTokenizer(f.tok)
	if err != nil {
		t.Fatal(err)
	}

	// check reads a dataset back: verify agrees, every row's mask gives its counts, and the rows
	// are rendered as described above. It returns the rows by teacher and question.
	check := func(t *testing.T, ds string) map[string]*curate.Row {
		t.Helper()
		if out := f.run(t, f.curate, "verify", "--tokenizer", f.tok, ds); !strings.Contains(out, "(100.00%)") {
			t.Errorf("verify: %s", out)
		}
		rows := map[string]*curate.Row{}
		err := curate.ReadRows(context.Background(), ds, func(r *curate.Row) error {
			m, err := curate.Mask(tok, r.Messages)
			if err != nil {
				return err
			}
			if int64(len(m.Tokens)) != r.NumTokens || int64(m.Trainable) != r.NumTrainableTokens {
				t.Errorf("%s: mask %d tokens, %d trainable; row %d, %d", r.Key, len(m.Tokens), m.Trainable, r.NumTokens, r.NumTrainableTokens)
			}
			q := strings.TrimSpace(r.Question)
			think := thinkOf(r.Model, q, 0)
			first := r.Messages[2].Content
			switch {
			case q == cut && r.Teacher == "qwen":
				if r.TruncatedTurns != 1 || r.FormatViolations != 0 || first != "<think>"+think || r.ThinkSources[0] != curate.ThinkFromInline {
					t.Errorf("qwen cut: truncated %d violations %d source %q first message %q", r.TruncatedTurns, r.FormatViolations, r.ThinkSources[0], first)
				}
			case q == cut:
				if r.TruncatedTurns != 0 || r.FormatViolations != 1 || first != think || r.ThinkSources[0] != curate.ThinkFromNone {
					t.Errorf("glm cut: truncated %d violations %d source %q first message %q", r.TruncatedTurns, r.FormatViolations, r.ThinkSources[0], first)
				}
			default:
				if want := "<think>" + think + "</think>\n<sql>" + f.gold[q] + "</sql>"; first != want || r.TruncatedTurns != 0 || r.FormatViolations != 0 {
					t.Errorf("%s: first message %q, want %q", r.Key, first, want)
				}
			}
			rows[r.Teacher+"|"+q] = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	readJSON := func(t *testing.T, text string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(text), v); err != nil {
			t.Fatalf("%v: %s", err, text)
		}
	}
	type report struct {
		Truncated     string            `json:"truncated"`
		TruncatedRows int               `json:"truncated_rows"`
		Excluded      []curate.Excluded `json:"excluded"`
	}
	type statsOut struct {
		Truncated string `json:"truncated"`
		Overall   struct {
			Rows          int `json:"rows"`
			RowsTruncated int `json:"rows_truncated"`
		} `json:"overall"`
	}

	keep := filepath.Join(tmp, "keep")
	out := f.run(t, f.curate, "build", "--tokenizer", f.tok, "--out", keep, "--quiet", run)
	if !strings.Contains(out, "truncated keep: 1 truncated turns in 1 rows (their messages end where the teacher was cut") {
		t.Errorf("build summary:\n%s", out)
	}
	rows := check(t, keep)
	if len(rows) != 2*providerTasks {
		t.Errorf("keep: %d rows, want %d", len(rows), 2*providerTasks)
	}
	card, _ := os.ReadFile(filepath.Join(keep, curate.CardFile))
	for _, want := range []string{"> **Warning: 1 rows (16.7%) hold 1 truncated turns.**", "`curate build --truncated exclude`",
		"- Truncated turns (`--truncated keep`): 1 turns in 1 rows\n"} {
		if !strings.Contains(string(card), want) {
			t.Errorf("keep card lacks %q:\n%s", want, card)
		}
	}
	var rep report
	b, _ := os.ReadFile(filepath.Join(keep, curate.StatsFile))
	readJSON(t, string(b), &rep)
	if rep.Truncated != "keep" || rep.TruncatedRows != 1 || len(rep.Excluded) != 0 {
		t.Errorf("keep stats.json: %+v", rep)
	}
	var st statsOut
	readJSON(t, f.run(t, f.curate, "stats", "--json", keep), &st)
	if st.Truncated != "keep" || st.Overall.RowsTruncated != 1 || st.Overall.Rows != 2*providerTasks {
		t.Errorf("keep curate stats: %+v", st)
	}

	excl := filepath.Join(tmp, "exclude")
	out = f.run(t, f.curate, "build", "--tokenizer", f.tok, "--truncated", "exclude", "--out", excl, "--quiet", run)
	cutKey := rows["qwen|"+cut].Key
	if !strings.Contains(out, "excluded "+cutKey+" (run, truncated, 1 truncated turns)") || !strings.Contains(out, "truncated exclude: 0 truncated turns in 0 rows\n") {
		t.Errorf("exclude build summary:\n%s", out)
	}
	rows = check(t, excl)
	if len(rows) != 2*providerTasks-1 || rows["qwen|"+cut] != nil {
		t.Errorf("exclude: %d rows (the truncated one present: %v)", len(rows), rows["qwen|"+cut] != nil)
	}
	card, _ = os.ReadFile(filepath.Join(excl, curate.CardFile))
	for _, want := range []string{"and those with a truncated turn (`--truncated exclude`)", "1 × `truncated`",
		"- Truncated turns (`--truncated exclude`): 0 turns in 0 rows; 1 rows with truncated turns excluded\n"} {
		if !strings.Contains(string(card), want) {
			t.Errorf("exclude card lacks %q:\n%s", want, card)
		}
	}
	if strings.Contains(string(card), "Warning:") {
		t.Errorf("exclude card warns of truncated rows it does not hold:\n%s", card)
	}
	rep = report{}
	b, _ = os.ReadFile(filepath.Join(excl, curate.StatsFile))
	readJSON(t, string(b), &rep)
	if rep.Truncated != "exclude" || rep.TruncatedRows != 0 || len(rep.Excluded) != 1 ||
		rep.Excluded[0] != (curate.Excluded{Key: cutKey, SourceRun: "run", Teacher: "qwen", Reason: curate.ReasonTruncated, TruncatedTurns: 1}) {
		t.Errorf("exclude stats.json: %+v", rep)
	}
	text := f.run(t, f.curate, "stats", excl)
	if !strings.Contains(text, "(--truncated exclude)") || !strings.Contains(text, "Excluded rows: 1") {
		t.Errorf("exclude curate stats:\n%s", text)
	}

	bad := filepath.Join(tmp, "bad")
	if r := runBinary(t, f.curate, "build", "--tokenizer", f.tok, "--truncated", "drop", "--out", bad, run); r.code == 0 ||
		!strings.Contains(r.stderr, "--truncated") || !strings.Contains(r.stderr, "want keep or exclude") {
		t.Errorf("--truncated drop: exit %d, stderr %q", r.code, r.stderr)
	}
	nothingAt(t, bad)
}
