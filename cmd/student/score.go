package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
)

func init() {
	register("score", "score a predict_dev.json the way BIRD's (or Spider's) official evaluation does", runScore)
}

func runScore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student score", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		predPath = fs.String("predictions", "", "predictions in BIRD's format {\"<index>\": \"SQL\\t----- bird -----\\tdb_id\"} (required)")
		taskSpec = fs.String("tasks", "", "tasks with the gold SQL: bird:PATH/dev.json, minidev:PATH, spider:PATH (required)")
		dbRoot   = fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
		timeout  = fs.Duration("timeout", evaluate.DefaultScoreTimeout, "limit for one prediction and its gold SQL together (a timeout scores 0)")
		style    = fs.String("style", "", "comparison: bird (set of rows) or spider (ordered when the gold has ORDER BY, else multiset); default by --tasks")
		limit    = fs.Int("limit", 0, "score only the first N tasks (0 = all), e.g. after student eval --limit N")
		jobs     = fs.Int("jobs", 8, "tasks scored at once")
		jsonOut  = fs.String("json", "", "also write every task's outcome as JSON to this file")
	)
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
	if *limit < 0 || *jobs < 1 || *timeout <= 0 {
		return fail(fmt.Errorf("--limit %d, --jobs %d, --timeout %s: out of range", *limit, *jobs, *timeout))
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
	rep, err := evaluate.Score(ctx, evaluate.ScoreConfig{Tasks: tasks, Predictions: preds, Style: *style, Timeout: *timeout, Opener: conn, Jobs: *jobs})
	if err != nil {
		return fail(err)
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(data, '\n'), 0o644)
		}
		if err != nil {
			return fail(fmt.Errorf("--json %s: %w", *jsonOut, err))
		}
	}
	if err := rep.WriteText(stdout); err != nil {
		return fail(err)
	}
	return 0
}
