package main

import (
	"context"
	"flag"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var compareCmd = &cli.Command{
	Name:    "compare",
	Summary: "print the summaries of eval dirs side by side",
	Args:    "EVAL_DIR...",
	Setup: func(*flag.FlagSet) cli.Func {
		return func(_ context.Context, c *cli.Call) error { return evaluate.Compare(c.Stdout, c.Args) }
	},
}
