package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/judge"
)

var scoreCmd = &cli.Command{
	Name:    "score",
	Summary: "score a predict_dev.json as BIRD's evaluation.py or Spider's test-suite-sql-eval does",
	Help:    scoreHelp,
	Setup:   setupScore,
}

func setupScore(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true, Note: "with the gold SQL; --limit N after student eval --limit N"})
	dsns := cli.AddDSNs(fs)
	dialect := cli.AddDialect(fs, "", "the engine the predictions and gold SQL run on; default the eval dir's (summary.json beside its predict_dev.json), else sqlite")
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
		// The dialect: --dialect, else the one the eval dir holding the predictions ran on.
		d := dialect.One()
		written, fromEval, err := evaluate.PredictionsDialect(*predPath)
		if err != nil {
			return fmt.Errorf("--predictions: %w", err)
		}
		switch {
		case d == "" && fromEval:
			d = written
			fmt.Fprintf(c.Stderr, "%s: scoring on %s, the dialect of the eval dir of %s (its %s)\n", c.Name, d, *predPath, evaluate.SummaryFile)
		case d == "":
			d = datasets.SQLite
		case fromEval && d != written:
			fmt.Fprintf(c.Stderr, "%s: WARNING: %s was written on %s (its eval dir's %s); scoring it on %s as --dialect says\n", c.Name, *predPath, written, evaluate.SummaryFile, d)
		}
		dialects := []datasets.Dialect{d}
		if err := dsns.Check(dialects); err != nil {
			return err
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		preds, err := evaluate.ReadPredictions(*predPath)
		if err != nil {
			return err
		}
		cfg := evaluate.ScoreConfig{Tasks: ts, Predictions: preds, Style: st, KeepDistinct: *keepDist, Timeout: *timeout, Dialect: d, Jobs: *jobs}
		if err := cfg.Check(); err != nil { // before connecting: no gold for d is not a database error
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects, c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer cli.Disconnect(conn, dialects, c.Stderr, c.Name)
		cfg.Opener = conn
		rep, err := evaluate.Score(ctx, cfg)
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
Values compare as Python's sqlite3 returns them (on the servers, by the cross-engine rule
student eval judges with); any error scores 0.
Dialects: both queries run on --dialect's engine; on postgres and mysql in the databases
distill load copied, as its read-only reader, with server-side deadlines. A student eval
dir holds one dialect, recorded in its summary.json: its predict_dev.json is scored on that
dialect unless --dialect is given (give the server's DSN, e.g. --pg-dsn). On a server, a
task with SQLite gold only (Spider, BIRD dev) whose gold fails there is judged against that
gold's answer on its SQLite file (--db-root), as eval judges it. BIRD mini-dev's MySQL and
PostgreSQL gold: --tasks minidev:FOLDER, or a mini_dev_*.json with the others beside it.`
