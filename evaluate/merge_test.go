package evaluate_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestShardsMergeToSingleRun splits the scripted evaluation into 3 parts, merges them, and gets
// exactly the single run's results, predictions and headline; a part given twice, a missing part
// and a part of another evaluation are refused.
func TestShardsMergeToSingleRun(t *testing.T) {
	path := writeBIRD(t, evalEntries)
	tasks := loadBIRD(t, path)
	root := t.TempDir()
	policy := func() *episode.PolicyHandle { return handle("scripted", newScripted(evalEntries, wrongReplies)) }
	single, err := runEval(t, context.Background(), filepath.Join(root, "single"), "bird:"+path, tasks, policy(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	total := 0
	for i := range 3 {
		dir := filepath.Join(root, "part", string(rune('0'+i)))
		s, err := runEval(t, context.Background(), dir, "bird:"+path, tasks, policy(), func(c *evaluate.Config) {
			c.Shard = rundir.Shard{Index: i, Count: 3}
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := (rundir.Shard{Index: i, Count: 3}).String(); s.Shard != want {
			t.Fatalf("part %d summary shard %q", i, s.Shard)
		}
		total += s.Loaded
		parts = append(parts, dir)
	}
	if total != len(tasks) {
		t.Fatalf("parts hold %d tasks, want %d", total, len(tasks))
	}
	out := filepath.Join(root, "merged")
	m, err := evaluate.Merge(out, parts)
	if err != nil {
		t.Fatal(err)
	}
	if m.Eval.Headline() != single.Eval.Headline() || m.Loaded != single.Loaded || !reflect.DeepEqual(m.Counts, single.Counts) || !m.Complete {
		t.Fatalf("merged %q (loaded %d, counts %v, complete %v)\nsingle %q (loaded %d, counts %v)",
			m.Eval.Headline(), m.Loaded, m.Counts, m.Complete, single.Eval.Headline(), single.Loaded, single.Counts)
	}
	if m.Tokens != single.Tokens || m.TurnTime.Turns != single.TurnTime.Turns {
		t.Fatalf("merged tokens %+v turns %d, single %+v %d", m.Tokens, m.TurnTime.Turns, single.Tokens, single.TurnTime.Turns)
	}
	a, err := evaluate.ReadResults(out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := evaluate.ReadResults(filepath.Join(root, "single"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("merged results differ from the single run's:\n%+v\n%+v", a, b)
	}
	pa, err := evaluate.ReadPredictions(filepath.Join(out, evaluate.PredictFile))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := evaluate.ReadPredictions(filepath.Join(root, "single", evaluate.PredictFile))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pa, pb) {
		t.Fatalf("merged predictions differ:\n%v\n%v", pa, pb)
	}
	if got, want := len(readJSONL(t, filepath.Join(out, evaluate.TrajectoriesFile))), len(tasks); got != want {
		t.Fatalf("%d merged trajectories, want %d", got, want)
	}

	for _, c := range []struct {
		name  string
		parts []string
		want  string
	}{
		{"twice", []string{parts[0], parts[1], parts[1]}, "given twice"},
		{"missing", parts[:2], "missing"},
		{"other eval", []string{parts[0], parts[1], filepath.Join(root, "single")}, "split into"},
		{"output is a part", parts, "is one of the parts"},
	} {
		o := filepath.Join(root, "bad-"+strings.ReplaceAll(c.name, " ", "-"))
		if c.name == "output is a part" {
			o = parts[0]
		}
		if _, err := evaluate.Merge(o, c.parts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
		if c.name != "output is a part" {
			if _, err := os.Stat(filepath.Join(o, evaluate.SummaryFile)); err == nil {
				t.Errorf("%s: a refused merge wrote %s", c.name, o)
			}
		}
	}
}
