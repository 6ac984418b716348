package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestScoreSpiderStyles scores three Spider dev predictions in each style (verdicts as
// test-suite-sql-eval and BIRD's evaluation.py give them).
func TestScoreSpiderStyles(t *testing.T) {
	dev := shared.Path(t, "data/spider/dev.json")
	preds := map[string]string{
		"0": "SELECT count(DISTINCT country) FROM singer" + evaluate.BIRDSeparator + "concert_singer",
		"2": "SELECT DISTINCT country, name, age FROM singer ORDER BY age DESC" + evaluate.BIRDSeparator + "concert_singer",
		"3": "SELECT name, country, age FROM singer ORDER BY age" + evaluate.BIRDSeparator + "concert_singer",
	}
	data, _ := json.Marshal(preds)
	path := filepath.Join(t.TempDir(), "predict_dev.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// 0: count( country) = count(*); kept, 3 countries vs 6 singers. 2: DISTINCT removed,
		// columns permuted. 3: ordered the other way. 1 has no prediction.
		{nil, "EX 50.00% (easy 50.00, medium 50.00) (spider style, on sqlite)"},
		{[]string{"--keep-distinct"}, "EX 25.00% (easy 0.00, medium 50.00) (spider, keep-distinct style, on sqlite)"},
		{[]string{"--style", "spider-strict"}, "EX 0.00% (easy 0.00, medium 0.00) (spider-strict style, on sqlite)"},
		{[]string{"--style", "bird"}, "EX 25.00% (easy 0.00, medium 50.00) (bird style, on sqlite)"},
	} {
		jsonPath := filepath.Join(t.TempDir(), "items.json")
		args := append([]string{"score", "--predictions", path, "--tasks", "spider:" + dev, "--limit", "4", "--json", jsonPath}, c.args...)
		code, out, errs := run(t, args...)
		if code != 0 || !strings.HasPrefix(out, c.want) {
			t.Errorf("score %v: exit %d\n%s\n%s\nwant %s", c.args, code, out, errs, c.want)
			continue
		}
		var rep evaluate.ScoreReport
		data, err := os.ReadFile(jsonPath)
		if err != nil || json.Unmarshal(data, &rep) != nil || len(rep.Items) != 4 {
			t.Fatalf("--json: %v %s", err, data)
		}
		if c.args == nil && (rep.Items[2].Executed != "SELECT  country, name, age FROM singer ORDER BY age DESC" || !rep.Items[2].Ordered) {
			t.Errorf("spider: item 2 executed %q ordered %v", rep.Items[2].Executed, rep.Items[2].Ordered)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--style", "exact"}, "want bird, spider or spider-strict"},
		{[]string{"--style", "bird", "--keep-distinct"}, "keep-distinct applies to the spider style only"},
		{[]string{"--timeout", "-1s"}, "out of range"},
	} {
		args := append([]string{"score", "--predictions", path, "--tasks", "spider:" + dev}, c.args...)
		if code, _, errs := run(t, args...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("score %v: exit %d, stderr %q, want %q", c.args, code, errs, c.want)
		}
	}
}
