package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/env"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/plural"
)

var envPromptsCmd = &cli.Command{
	Name:    "prompts",
	Summary: "write each task's prompt, as env serve starts its episodes, to Parquet for trainers that generate (docs/ENV.md)",
	Help:    "One row per task and dialect: task, dialect, db_id, difficulty, split, train/val subset, the prompt messages, their chat-template text, token ids and count. Ctrl-C leaves no file.",
	Setup:   setupEnvPrompts,
}

func setupEnvPrompts(fs *flag.FlagSet) cli.Func {
	ef := addEnvFlags(fs, "exported", "the student's, for the prompts' token ids (required)")
	out := fs.String("out", "", "Parquet file to write (required)")
	return func(ctx context.Context, c *cli.Call) error {
		if *out == "" {
			return cli.Usagef("--out FILE is required")
		}
		ts, conn, tok, err := ef.open(ctx, c, true)
		if err != nil {
			return err
		}
		defer ef.close(conn, c)
		srv, err := env.New(env.Config{Tasks: ts, Dialects: ef.dialects.List(), Opener: conn, Subsets: &ef.subsets, Tokenizer: encoderOf(tok)})
		if err != nil {
			return err
		}
		defer srv.Close()
		n, err := srv.WritePrompts(ctx, *out)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted, no file written: %w", err)
			}
			return err
		}
		fmt.Fprintf(c.Stderr, "%s: %s (%s of %s, dialects %s, validation fraction %g, seed %d) -> %s\n",
			c.Name, plural.Count(n, "prompt"), plural.Count(len(ts), "task"), strings.Join(ef.tasks.Specs(), ", "), ef.dialects, ef.subsets.ValFraction, ef.subsets.Seed, *out)
		return nil
	}
}
