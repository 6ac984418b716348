package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var mergeCmd = &cli.Command{
	Name:    "merge",
	Summary: "join the eval dirs of a sharded student eval (--shard I/N) into one",
	Args:    "EVAL_DIR...",
	Help:    "The EVAL_DIRs are every part 0/N … N-1/N of one student eval --shard run.",
	Setup: func(fs *flag.FlagSet) cli.Func {
		out := cli.AddOut(fs, "", "eval dir to write the merged results, predictions and summary into", true)
		return func(_ context.Context, c *cli.Call) error {
			if err := out.Check(); err != nil {
				return err
			}
			s, err := evaluate.Merge(out.Dir, c.Args)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "merged %d parts into %s\n", len(c.Args), out.Dir)
			return s.WriteText(c.Stdout)
		}
	},
}
