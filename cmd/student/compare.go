package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var compareCmd = &cli.Command{
	Name:    "compare",
	Summary: "print the summaries of eval dirs side by side",
	Args:    "EVAL_DIR...",
	Help: `Each column is its eval dir's own summary. When the dirs scored different task sets, a note
says so, with each dir's task count and the EX of every dir on the tasks they all scored: the
figure to compare.`,
	Setup: func(*flag.FlagSet) cli.Func {
		return func(_ context.Context, c *cli.Call) error {
			if err := evaluate.Compare(c.Stdout, c.Args); err != nil {
				return err
			}
			return compareTaskSets(c.Stdout, c.Args)
		}
	},
}

// compareTaskSets writes, when the dirs' results.jsonl cover different tasks, a note with each
// dir's task count and its EX on the tasks every dir scored (with the unjudged among them:
// results whose gold SQL failed, which EX counts wrong).
func compareTaskSets(w io.Writer, dirs []string) error {
	sets := make([]map[string][3]int, len(dirs)) // task id → (correct lines, lines, unjudged lines)
	for i, d := range dirs {
		rs, err := evaluate.ReadResults(d)
		if err != nil {
			return err
		}
		sets[i] = map[string][3]int{}
		for _, r := range rs {
			c := sets[i][r.ID]
			o := r.EpisodeOutcome()
			if o.Correct {
				c[0]++
			}
			c[1]++
			if o.Unjudged {
				c[2]++
			}
			sets[i][r.ID] = c
		}
	}
	common := map[string]bool{}
	for id := range sets[0] {
		common[id] = true
	}
	same := true
	for _, s := range sets[1:] {
		if len(s) != len(sets[0]) {
			same = false
		}
		for id := range common {
			if _, ok := s[id]; !ok {
				delete(common, id)
				same = false
			}
		}
	}
	if same {
		return nil
	}
	counts := make([]string, len(dirs))
	for i, d := range dirs {
		counts[i] = fmt.Sprintf("%s %d", filepath.Base(filepath.Clean(d)), len(sets[i]))
	}
	fmt.Fprintf(w, "\nnote: the eval dirs scored different task sets (tasks: %s; %d in common), so the columns above are not comparable.\n",
		strings.Join(counts, ", "), len(common))
	if len(common) == 0 {
		fmt.Fprintln(w, "note: no task is in every dir: there is nothing to compare")
		return nil
	}
	ex := make([]string, len(dirs))
	for i, d := range dirs {
		correct, n, unjudged := 0, 0, 0
		for id := range common {
			correct += sets[i][id][0]
			n += sets[i][id][1]
			unjudged += sets[i][id][2]
		}
		ex[i] = fmt.Sprintf("%s %.2f%% (%d/%d", filepath.Base(filepath.Clean(d)), 100*float64(correct)/float64(n), correct, n)
		if unjudged > 0 {
			ex[i] += fmt.Sprintf(", %d unjudged", unjudged)
		}
		ex[i] += ")"
	}
	fmt.Fprintf(w, "EX on the %d tasks in common: %s\n", len(common), strings.Join(ex, ", "))
	return nil
}
