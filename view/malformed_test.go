package view

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/stats"
)

// TestMalformedTurnsEverywhere: the format reward's count of malformed turns is the same
// number in every output a user reads it in: the dataset's stats.json and card, curate stats
// (text and JSON), the viewer's stats tables over the run dir and the dataset, and the eval
// summary (summary.json, its text, the compare table). The fixture's scripted teacher opens
// tasks 0, 6, … with a format violation and tasks 4, 10, … with a truncated turn, each then
// well-formed; the oracle is always well-formed. So malformed_turns is the count of those
// tasks, which differs from format_violations (the first kind only).
func TestMalformedTurnsEverywhere(t *testing.T) {
	f := getFixture(t)
	want, violations := 0, 0
	for _, task := range f.tasks {
		switch task.Index % 6 {
		case 0:
			want++
			violations++
		case 4:
			want++
		}
	}
	if want == violations {
		t.Fatalf("fixture: %d malformed turns, as many as format violations: the test cannot tell them apart", want)
	}
	// The run dir's trajectories, through the one definition.
	got := 0
	for l, err := range rundir.Lines(f.run) {
		if err != nil {
			t.Fatal(err)
		}
		var tr rundir.Trajectory
		if err := json.Unmarshal(l.Data, &tr); err != nil {
			t.Fatal(err)
		}
		got += tr.Outcome().MalformedTurns
	}
	if got != want {
		t.Fatalf("run dir: %d malformed turns, want %d", got, want)
	}

	rep, err := curate.ReadReport(f.dataset)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MalformedTurns != want || rep.FormatViolations != violations {
		t.Errorf("stats.json: malformed_turns %d, format_violations %d; want %d, %d", rep.MalformedTurns, rep.FormatViolations, want, violations)
	}
	card, err := os.ReadFile(filepath.Join(f.dataset, curate.CardFile))
	if err != nil {
		t.Fatal(err)
	}
	if line := fmt.Sprintf("- Format: %d format violations (`format_violations`", violations); !strings.Contains(string(card), line) ||
		!strings.Contains(string(card), fmt.Sprintf(" and %d malformed turns (`malformed_turns`", want)) {
		t.Errorf("card lacks %d format violations and %d malformed turns:\n%s", violations, want, card)
	}

	// curate stats: JSON and text.
	st, err := stats.Dataset(context.Background(), f.dataset)
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := st.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Overall struct {
			MalformedTurns int `json:"malformed_turns"`
		} `json:"overall"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil || parsed.Overall.MalformedTurns != want {
		t.Errorf("curate stats --json: overall malformed_turns %d, want %d (%v)", parsed.Overall.MalformedTurns, want, err)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	head := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "malformed turns") })
	all := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "all ") })
	if head < 0 || all < head || lastField(lines[all]) != strconv.Itoa(want) {
		t.Errorf("curate stats text: no overall row ending in %d malformed turns:\n%s", want, text.String())
	}

	// The viewer's stats: the dataset's per-teacher table, the run dir's outcomes table.
	for _, c := range []struct{ path, row string }{{f.dataset, "all"}, {f.run, ""}} {
		var page StatsPage
		get(t, openServer(t, f.tok, c.path).Handler(), "/api/stats", &page)
		tab := page.Sections[0].Tables[0]
		col := slices.Index(tab.Header, "malformed turns")
		sum := 0
		for _, r := range tab.Rows {
			if col < 0 || (c.row != "" && r[0] != c.row) {
				continue
			}
			n, _ := strconv.Atoi(r[col])
			sum += n
		}
		if sum != want {
			t.Errorf("viewer over %s: %d malformed turns in %+v, want %d", filepath.Base(c.path), sum, tab, want)
		}
	}

	// student eval: the scripted student plays the same episodes.
	sum, err := evaluate.ReadSummary(f.evalStudent)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Eval.MalformedTurns != want {
		t.Errorf("summary.json: eval.malformed_turns %d, want %d", sum.Eval.MalformedTurns, want)
	}
	var out bytes.Buffer
	if err := sum.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf(", malformed turns %d, ", want)) {
		t.Errorf("eval summary text lacks %d malformed turns:\n%s", want, out.String())
	}
	out.Reset()
	if err := evaluate.Compare(&out, []string{f.evalStudent, f.evalOracle}); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(strings.Split(out.String(), "\n"), func(l string) bool { return strings.HasPrefix(l, "malformed turns ") })
	if i < 0 || strings.Fields(strings.Split(out.String(), "\n")[i])[2] != strconv.Itoa(want) || lastField(strings.Split(out.String(), "\n")[i]) != "0" {
		t.Errorf("eval compare: no malformed turns row with %d and 0:\n%s", want, out.String())
	}
}

// lastField is the last whitespace-separated field of s ("" when none).
func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
