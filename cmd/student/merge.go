package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/chainedsql/chainedsql/evaluate"
)

func init() {
	register("merge", "join the eval dirs of a sharded student eval (--shard I/N) into one", runMerge)
}

func runMerge(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "eval dir to write the merged results, predictions and summary into")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: student merge --out DIR EVAL_DIR...   (every part 0/N … N-1/N of one student eval --shard run)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	s, err := evaluate.Merge(*out, fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "student merge: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "merged %d parts into %s\n", fs.NArg(), *out)
	if err := s.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "student merge: %v\n", err)
		return 1
	}
	return 0
}
