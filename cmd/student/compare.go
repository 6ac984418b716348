package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/chainedsql/chainedsql/evaluate"
)

func init() {
	register("compare", "print the summaries of eval dirs side by side", runCompare)
}

func runCompare(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: student compare EVAL_DIR...") }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if err := evaluate.Compare(stdout, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "student compare: %v\n", err)
		return 1
	}
	return 0
}
