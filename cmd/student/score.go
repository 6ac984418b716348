package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
)

var scoreCmd = &cli.Command{
	Name:    "score",
	Summary: "score a predict_dev.json as BIRD's evaluation.py or Spider's test-suite-sql-eval does",
	Help:    scoreHelp,
	Setup:   setupScore,
}

func setupScore(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true, Note: "with the gold SQL; --limit N after student eval --limit N"})
	var (
		predPath = fs.String("predictions", "", "predictions in BIRD's format {\"<index>\": \"SQL\\t----- bird -----\\tdb_id\"} (required)")
		timeout  = fs.Duration("timeout", 0, "limit for one prediction and its gold SQL together, a timeout scoring 0 (default 30s for bird, 60s for the spider styles)")
		style    = fs.String("style", "", "judging style: bird, spider or spider-strict (see above); default spider when --tasks is spider:, else bird")
		keepDist = fs.Bool("keep-distinct", false, "spider style: keep DISTINCT in both queries (the official --keep_distinct)")
		jobs     = fs.Int("jobs", 8, "tasks scored at once")
		jsonOut  = fs.String("json", "", "also write every task's outcome as JSON to this file")
	)
	return func(ctx context.Context, c *cli.Call) error {
		if *predPath == "" {
			return cli.Usagef("--predictions and --tasks are required")
		}
		if *jobs < 1 || *timeout < 0 {
			return cli.Usagef("--jobs %d, --timeout %s: out of range", *jobs, *timeout)
		}
		var st judge.Style
		if *style != "" {
			var err error
			if st, err = judge.ParseStyle(*style); err != nil {
				return cli.Usagef("--style: %v", err)
			}
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		preds, err := evaluate.ReadPredictions(*predPath)
		if err != nil {
			return err
		}
		conn := &sandbox.Connector{SQLiteRoot: tasks.DBRoot}
		defer conn.Close()
		rep, err := evaluate.Score(ctx, evaluate.ScoreConfig{Tasks: ts, Predictions: preds, Style: st, KeepDistinct: *keepDist, Timeout: *timeout, Opener: conn, Jobs: *jobs})
		if err != nil {
			return err
		}
		if *jsonOut != "" {
			if err := rep.WriteJSON(*jsonOut); err != nil {
				return fmt.Errorf("--json: %w", err)
			}
		}
		return rep.WriteText(c.Stdout)
	}
}

const scoreHelp = `Executes every prediction and its gold SQL and reports execution accuracy (EX).
Styles:
  bird           BIRD's evaluation.py, the published BIRD EX: set(prediction rows) ==
                 set(gold rows); row order and duplicates ignored, column order kept.
  spider         test-suite-sql-eval (evaluation.py --etype exec), the published Spider EX:
                 DISTINCT removed from both queries (--keep-distinct keeps it), only the
                 first statement run, "value" in the prediction read as 1, "> =" read as
                 ">="; rows compared in order when the gold contains "order by" anywhere
                 (subqueries too), else as multisets; the prediction's columns may come in
                 any order; an int equals the same float, except where the official
                 per-row text sort tells them apart. One database per task
                 (<db>/<db>.sqlite): not test-suite accuracy, which the official code
                 computes over every *.sqlite* in that folder.
  spider-strict  the SQL as written; column order and DISTINCT count; rows in order only
                 when the gold's outermost query has ORDER BY, else multisets. Matches no
                 published figure.
Values compare as Python's sqlite3 returns them; any error scores 0.`
