package evaluate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
)

var mixedOut = flag.String("mixed-out", "", "TestOfficialVerdicts: write the mixed prediction set's files for the official evaluators to this directory")

// verdictTable is testdata/official_verdicts.json: the official evaluators' verdict on every
// prediction of the mixed set (1 correct, 0 wrong, "gold_error" where test-suite-sql-eval stops
// on a gold query that fails on the database).
type verdictTable struct {
	Comment string         `json:"comment"`
	Command string         `json:"command"`
	Items   []verdictEntry `json:"items"`
}

type verdictEntry struct {
	Index      int    `json:"index"`
	Kind       string `json:"kind"`
	SHA256     string `json:"sha256"`
	Spider     any    `json:"spider"`
	SpiderKeep any    `json:"spider_keep_distinct"`
	BIRD       any    `json:"bird"`
}

type mixedItem struct {
	Index int    `json:"index"`
	DBID  string `json:"db_id"`
	Kind  string `json:"kind"`
	Pred  string `json:"pred"`
	Gold  string `json:"gold"`
}

func predHash(sql string) string {
	h := sha256.Sum256([]byte(sql))
	return hex.EncodeToString(h[:8])
}

// mixedSet builds the mixed prediction set over the Spider dev tasks.
func mixedSet(tasks []datasets.Task) []mixedItem {
	golds := make([]string, len(tasks))
	for i, t := range tasks {
		golds[i] = t.Gold[datasets.SQLite]
	}
	kinds, preds := mixedPredictions(golds)
	items := make([]mixedItem, len(tasks))
	for i, t := range tasks {
		items[i] = mixedItem{Index: t.Index, DBID: t.DBID, Kind: kinds[i], Pred: preds[i], Gold: golds[i]}
	}
	return items
}

// writeMixed writes the files the official evaluators read: gold.txt and pred.txt
// (test-suite-sql-eval), dev_gold.sql and predict_dev.json (BIRD), and items.jsonl.
func writeMixed(t *testing.T, dir string, items []mixedItem) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var gold, pred, jsonl strings.Builder
	bird := make([]string, len(items))
	for i, it := range items {
		if strings.ContainsAny(it.Gold+it.Pred, "\t\n") {
			t.Fatalf("item %d holds a tab or newline", i)
		}
		fmt.Fprintf(&gold, "%s\t%s\n", it.Gold, it.DBID)
		fmt.Fprintf(&pred, "%s\n", it.Pred)
		line, _ := json.Marshal(it)
		jsonl.Write(append(line, '\n'))
		v, _ := json.Marshal(it.Pred + evaluate.BIRDSeparator + it.DBID)
		bird[i] = fmt.Sprintf("%q: %s", fmt.Sprint(i), v)
	}
	files := map[string]string{
		"gold.txt": gold.String(), "pred.txt": pred.String(), "dev_gold.sql": gold.String(),
		"items.jsonl": jsonl.String(), "predict_dev.json": "{" + strings.Join(bird, ",\n") + "}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loadVerdicts reads testdata/official_verdicts.json and checks it was made from items.
func loadVerdicts(t *testing.T, items []mixedItem) verdictTable {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "official_verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table verdictTable
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Items) != len(items) {
		t.Fatalf("verdict table has %d items, the mixed set %d", len(table.Items), len(items))
	}
	for i, it := range items {
		e := table.Items[i]
		if e.Index != i || e.Kind != it.Kind || e.SHA256 != predHash(it.Pred) {
			t.Fatalf("item %d (%s): the table was made from another prediction (%d %s %s, now %s): regenerate it (testdata/official/README.md)", i, it.Kind, e.Index, e.Kind, e.SHA256, predHash(it.Pred))
		}
	}
	return table
}

// TestOfficialVerdicts scores the mixed prediction set over Spider dev in the spider style
// (with and without --keep-distinct) and the bird style, and checks every item against the
// verdict the official evaluator gave it.
func TestOfficialVerdicts(t *testing.T) {
	dev := shared.Path(t, "data/spider/dev.json")
	tasks, err := datasets.LoadTasks("spider:"+dev, "")
	if err != nil {
		t.Fatal(err)
	}
	items := mixedSet(tasks)
	if *mixedOut != "" {
		writeMixed(t, *mixedOut, items)
		t.Logf("wrote the mixed set's %d items to %s", len(items), *mixedOut)
	}
	table := loadVerdicts(t, items)
	preds := make(map[int]evaluate.Prediction, len(items))
	for _, it := range items {
		preds[it.Index] = evaluate.Prediction{Index: it.Index, SQL: it.Pred, DBID: it.DBID}
	}
	conn := &sandbox.Connector{}
	defer conn.Close()
	for _, mode := range []struct {
		name  string
		style judge.Style
		keep  bool
		want  func(verdictEntry) any
	}{
		{"spider", judge.StyleSpider, false, func(e verdictEntry) any { return e.Spider }},
		{"spider --keep-distinct", judge.StyleSpider, true, func(e verdictEntry) any { return e.SpiderKeep }},
		{"bird", judge.StyleBIRD, false, func(e verdictEntry) any { return e.BIRD }},
	} {
		rep, err := evaluate.Score(context.Background(), evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Style: mode.style, KeepDistinct: mode.keep, Opener: conn})
		if err != nil {
			t.Fatal(err)
		}
		wrong, byKind := 0, map[string]int{}
		for i, it := range rep.Items {
			want := verdictText(mode.want(table.Items[i]))
			got := "0"
			switch {
			case it.Outcome == judge.OutcomeGoldError && mode.style == judge.StyleSpider:
				got = "gold_error"
			case it.Correct:
				got = "1"
			}
			if got != want {
				wrong++
				byKind[items[i].Kind]++
				if wrong <= 20 {
					t.Errorf("%s: item %d (%s) %q: got %s (%s %s), official %s", mode.name, i, items[i].Kind, items[i].Pred, got, it.Outcome, it.Error, want)
				}
			}
		}
		if wrong > 0 {
			t.Errorf("%s: %d of %d verdicts differ from the official evaluator's (by kind %v)", mode.name, wrong, len(items), byKind)
		} else {
			t.Logf("%s: all %d verdicts agree with the official evaluator's (EX %.2f%%)", mode.name, len(items), 100*rep.EX.EX)
		}
	}
}

func verdictText(v any) string {
	switch x := v.(type) {
	case float64:
		return fmt.Sprint(int(x))
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// TestEvalMatchesOfficialSpider runs student eval's loop over Spider dev with a policy
// answering each task's mixed-set prediction, and checks every task's Correct against the
// official test-suite-sql-eval verdict: eval judges Spider tasks as student score does.
func TestEvalMatchesOfficialSpider(t *testing.T) {
	dev := shared.Path(t, "data/spider/dev.json")
	all, err := datasets.LoadTasks("spider:"+dev, "")
	if err != nil {
		t.Fatal(err)
	}
	items := mixedSet(all)
	table := loadVerdicts(t, items)
	asked := map[string]int{}
	for _, task := range all {
		asked[task.Question]++
	}
	var tasks []datasets.Task
	sqls := map[string][]string{}
	want := map[int]string{}
	for i := range all {
		if asked[all[i].Question] > 1 {
			continue // the policy tells tasks apart by their question
		}
		tasks = append(tasks, all[i])
		sqls[all[i].Question] = []string{items[i].Pred}
		want[all[i].Index] = verdictText(table.Items[i].Spider)
	}
	p := &variants{seen: map[string]int{}, sqls: sqls}
	dir := filepath.Join(t.TempDir(), "eval")
	if _, err := runEval(t, context.Background(), dir, "spider:"+dev, tasks, handle("mixed", p), nil); err != nil {
		t.Fatal(err)
	}
	res, err := evaluate.ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(tasks) {
		t.Fatalf("%d results for %d tasks", len(res), len(tasks))
	}
	wrong := 0
	for _, r := range res {
		got := map[bool]string{true: "1", false: "0"}[r.Correct]
		if r.SQL != items[r.Index].Pred || got != want[r.Index] {
			wrong++
			t.Errorf("task %d (%s) %q: eval says %s (outcome %s, final %q), official %s", r.Index, items[r.Index].Kind, items[r.Index].Pred, got, r.Outcome, r.SQL, want[r.Index])
		}
	}
	t.Logf("%d Spider tasks evaluated, %d differ from the official verdict", len(res), wrong)
}
