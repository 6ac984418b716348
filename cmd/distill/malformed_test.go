package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	curatepkg "github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestMalformedTurnsShown: distill's summary table (and its log-mode progress lines) and the
// card's per-teacher table that curate builds from the run show each teacher's malformed turns,
// the count rundir.Outcome.MalformedTurns gives (the format reward's, rundir.MalformedTurns),
// through the built binaries. The scripted teacher answers a first turn with prose (a format
// violation, so malformed), a second with a bare <sql> block (malformed, no violation) and a
// third with reasoning and that block (well-formed, converged): 2 malformed turns and 1
// violation an episode, so the two counts differ; the oracle's are 0.
func TestMalformedTurnsShown(t *testing.T) {
	tok := shared.Path(t, "tokenizer/qwen2.5")
	bin, curate := testbin.Build(t, "."), testbin.Build(t, "../curate")
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		turn := 0
		for _, m := range r.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		switch turn {
		case 0:
			return oaitest.Response{Content: "I would count the rows."}
		case 1:
			return oaitest.Response{Content: "<sql>SELECT 1</sql>"}
		}
		return oaitest.Response{Think: "the same again", Content: "<sql>SELECT 1</sql>"}
	})
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "teachers.yaml")
	if err := os.WriteFile(cfg, []byte("teachers:\n  scripted:\n    base_url: "+srv.BaseURL()+"\n    model: test-model\n    api_key_env: \"\"\n    max_retries: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(tmp, "run")
	code, stdout, stderr := testbin.Run(t, exec.Command(bin, "--config", cfg, "--teachers", "scripted,oracle", "--tasks", "sample",
		"--limit", "6", "--dialects", "sqlite", "--out", run, "--progress", "log"))
	if code != 0 {
		t.Fatalf("distill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := map[string][2]int{} // teacher: malformed turns, format violations, by rundir
	for tr, err := range rundir.Trajectories(run) {
		if err != nil {
			t.Fatal(err)
		}
		o := tr.Outcome()
		w := want[tr.Teacher]
		want[tr.Teacher] = [2]int{w[0] + o.MalformedTurns, w[1] + o.FormatViolations}
	}
	if want["scripted"] != [2]int{12, 6} || want["oracle"] != [2]int{0, 0} {
		t.Fatalf("the run dir holds %v (malformed, violations), want scripted [12 6] and oracle [0 0]", want)
	}

	// The summary table: the malformed column, right after format-viol.
	header := regexp.MustCompile(`(?m)^\s*teacher\s+dialect\s+trajectories\s+failed\s+converged\s+exec-ok\s+correct\s+format-viol\s+malformed\s+avg turns`)
	if !header.MatchString(stdout) {
		t.Errorf("no malformed column in the summary:\n%s", stdout)
	}
	for name, w := range want {
		row := regexp.MustCompile(`(?m)^\s*` + name + `\s+sqlite\s+6\s+0\s+\S+\s+\S+\s+\S+\s+(\d+)\s+(\d+)\s`)
		m := row.FindStringSubmatch(stdout)
		if m == nil || m[1] != fmt.Sprint(w[1]) || m[2] != fmt.Sprint(w[0]) {
			t.Errorf("%s's summary row %q, want format-viol %d, malformed %d:\n%s", name, m, w[1], w[0], stdout)
		}
	}
	// The last progress line of each teacher (log mode writes them to stderr).
	for name, w := range want {
		lines := regexp.MustCompile(`(?m)^\S+ `+name+` .* malformed (\d+)`).FindAllStringSubmatch(stderr, -1)
		if len(lines) == 0 || lines[len(lines)-1][1] != fmt.Sprint(w[0]) {
			t.Errorf("%s's progress lines end with %v, want malformed %d:\n%s", name, lines, w[0], stderr)
		}
	}

	// The card's per-teacher table and stats.json, from curate build on the run.
	ds := filepath.Join(tmp, "dataset")
	if code, out, errs := testbin.Run(t, exec.Command(curate, "build", "--tokenizer", tok, "--out", ds, "--quiet", run)); code != 0 {
		t.Fatalf("curate build: exit %d\n%s\n%s", code, out, errs)
	}
	card, err := os.ReadFile(filepath.Join(ds, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(card), "| unjudged | format violations / malformed turns | think field") {
		t.Fatalf("the card's per-teacher table has no malformed column:\n%s", card)
	}
	for name, w := range want {
		cell := fmt.Sprintf(" | %d / %d | ", w[1], w[0])
		row := regexp.MustCompile(`(?m)^\| ` + name + ` \|.*$`).FindString(string(card))
		if !strings.Contains(row, cell) {
			t.Errorf("%s's card row %q lacks %q", name, row, cell)
		}
	}
	rep, err := curatepkg.ReadReport(ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Teachers {
		if w := want[s.Teacher]; s.MalformedTurns != w[0] || s.FormatViolations != w[1] {
			t.Errorf("stats.json: %s has malformed %d, violations %d; want %d, %d", s.Teacher, s.MalformedTurns, s.FormatViolations, w[0], w[1])
		}
	}
	if len(rep.Teachers) != len(want) {
		t.Errorf("stats.json has %d teachers, want %d", len(rep.Teachers), len(want))
	}
}
