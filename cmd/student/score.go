package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
)

func init() {
	register("score", "score a predict_dev.json as BIRD's evaluation.py or Spider's test-suite-sql-eval does", runScore)
}

func runScore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student score", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		predPath = fs.String("predictions", "", "predictions in BIRD's format {\"<index>\": \"SQL\\t----- bird -----\\tdb_id\"} (required)")
		taskSpec = fs.String("tasks", "", "tasks with the gold SQL: bird:PATH/dev.json, minidev:PATH, spider:PATH (required)")
		dbRoot   = fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
		timeout  = fs.Duration("timeout", 0, "limit for one prediction and its gold SQL together, a timeout scoring 0 (default 30s for bird, 60s for the spider styles)")
		style    = fs.String("style", "", "judging style: bird, spider or spider-strict (see above); default spider when --tasks is spider:, else bird")
		keepDist = fs.Bool("keep-distinct", false, "spider style: keep DISTINCT in both queries (the official --keep_distinct)")
		limit    = fs.Int("limit", 0, "score only the first N tasks (0 = all), e.g. after student eval --limit N")
		jobs     = fs.Int("jobs", 8, "tasks scored at once")
		jsonOut  = fs.String("json", "", "also write every task's outcome as JSON to this file")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), scoreUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "student score: %v\n", err)
		return 1
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *predPath == "" || *taskSpec == "" {
		return fail(errors.New("--predictions and --tasks are required"))
	}
	if *limit < 0 || *jobs < 1 || *timeout < 0 {
		return fail(fmt.Errorf("--limit %d, --jobs %d, --timeout %s: out of range", *limit, *jobs, *timeout))
	}
	var st datasets.Style
	if *style != "" {
		var err error
		if st, err = datasets.ParseStyle(*style); err != nil {
			return fail(fmt.Errorf("--style: %w", err))
		}
	}
	tasks, err := datasets.LoadTasks(*taskSpec, *dbRoot)
	if err != nil {
		return fail(fmt.Errorf("tasks %s: %w", *taskSpec, err))
	}
	if *limit > 0 && *limit < len(tasks) {
		tasks = tasks[:*limit]
	}
	preds, err := evaluate.ReadPredictions(*predPath)
	if err != nil {
		return fail(err)
	}
	conn := &datasets.Connector{SQLiteRoot: *dbRoot}
	defer conn.Close()
	rep, err := evaluate.Score(ctx, evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Style: st, KeepDistinct: *keepDist, Timeout: *timeout, Opener: conn, Jobs: *jobs})
	if err != nil {
		return fail(err)
	}
	if *jsonOut != "" {
		if err := rep.WriteJSON(*jsonOut); err != nil {
			return fail(fmt.Errorf("--json: %w", err))
		}
	}
	if err := rep.WriteText(stdout); err != nil {
		return fail(err)
	}
	return 0
}

const scoreUsage = `usage: student score --predictions FILE --tasks SPEC [flags]

Executes every prediction and its gold SQL and reports execution accuracy (EX).
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
Values compare as Python's sqlite3 returns them; any error scores 0.

Flags:
`
