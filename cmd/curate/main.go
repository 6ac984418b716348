// Command curate turns distill run directories into a Parquet training dataset, verifies its
// token counts and prints its statistics.
//
//	curate build RUN_DIR... [--tokenizer PATH] [--think auto|field|inline|none] [--truncated keep|exclude] [--max-length 32768] [--salvage] --out DATASET_DIR [--rows-per-shard N]
//	curate verify DATASET_DIR [--tokenizer PATH]
//	curate stats DATASET_DIR [--json] [--markdown] [--plots DIR] [--epochs N]
//	curate view PATH... [--addr 127.0.0.1:8080] [--tokenizer PATH]
//	curate export DATASET_DIR [--where FILTER] --out FILE.parquet|FILE.jsonl
//
// Flags may come before or after the positional arguments. The exit status is 0 on success, 1
// on a failure, 2 on a usage error and 130 after Ctrl-C (internal/cli).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/plural"
	"github.com/chainedsql/chainedsql/stats"
)

// program is the curate binary.
var program = &cli.Program{
	Name:    "curate",
	Summary: "Turn distill run dirs into a Parquet training dataset, verify it, read its statistics, browse it.",
	Help: `curate view serves a web app over a dataset dir, a run dir (read live while distill writes
it) or eval dirs (two or more: the compare view).
--tokenizer is a tokenizer.json or a directory holding one. Without it curate uses
$CHAINEDSQL_TOKENIZER, else ../shared/tokenizer/qwen2.5 when that directory exists.`,
	Commands: []*cli.Command{buildCmd, verifyCmd, statsCmd, viewCmd, exportCmd},
}

func main() { program.Main() }

// loadTokenizer loads the tokenizer at path (cli.TokenizerPath) and returns it
// with its name, the file's directory.
func loadTokenizer(path string) (curate.Tokenizer, string, error) {
	path, err := cli.TokenizerPath(path)
	if err != nil {
		return nil, "", err
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, "", fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	// Checked here as well as in curate so that the error names the file.
	for _, special := range []string{"<|im_start|>", "<|im_end|>"} {
		if _, ok := tok.TokenID(special); !ok {
			return nil, "", fmt.Errorf("tokenizer %s has no %s token: not a ChatML (Qwen2) tokenizer", path, special)
		}
	}
	name := filepath.Base(filepath.Clean(path))
	if name == "tokenizer.json" {
		name = filepath.Base(filepath.Dir(filepath.Clean(path)))
	}
	return curate.Adapt(tok), name, nil
}

var buildCmd = &cli.Command{
	Name:    "build",
	Summary: "tokenise run dirs into a Parquet dataset with token and trainable-token counts and a dataset card",
	Args:    "RUN_DIR...",
	Setup:   setupBuild,
}

func setupBuild(fs *flag.FlagSet) cli.Func {
	tokPath := cli.AddTokenizer(fs, "")
	think := fs.String("think", string(curate.ThinkAuto), "where assistant messages' <think> comes from: auto (the reasoning field, else the inline block), field, inline, none")
	truncated := fs.String("truncated", string(curate.TruncatedKeep), "rows with a turn the token limit cut: keep (they teach stopping mid-reply; the card warns) or exclude (listed as excluded)")
	maxLen := fs.Int("max-length", curate.DefaultMaxLength, "exclude rows with more tokens than this")
	out := cli.AddOut(fs, "", "dataset directory to create (must not exist, or be empty)", true)
	perShard := fs.Int("rows-per-shard", curate.DefaultRowsPerShard, "rows per Parquet file")
	epochs := fs.Int("epochs", 0, "show trainable tokens × epochs in the card")
	workers := fs.Int("workers", 0, "tokenising workers (default GOMAXPROCS; output does not depend on it)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	salvage := fs.Bool("salvage", false, "build from damaged run dirs: skip lines over the readers' limit or not a trajectory, and list them (stderr, stats.json)")
	return func(ctx context.Context, c *cli.Call) error {
		if err := out.Check(); err != nil {
			return err
		}
		mode, err := curate.ParseThinkMode(*think)
		if err != nil {
			return cli.Usagef("--think: %v", err)
		}
		trunc, err := curate.ParseTruncatedPolicy(*truncated)
		if err != nil {
			return cli.Usagef("--truncated: %v", err)
		}
		tok, name, err := loadTokenizer(*tokPath)
		if err != nil {
			return err
		}
		began := time.Now()
		last := began
		opts := curate.BuildOptions{
			Tokenizer: tok, TokenizerName: name, Think: mode, Truncated: trunc, MaxLength: *maxLen, Out: out.Dir, RowsPerShard: *perShard,
			Epochs: *epochs, Workers: *workers, Salvage: *salvage,
		}
		if !*quiet {
			opts.Progress = func(p curate.BuildProgress) {
				if now := time.Now(); now.Sub(last) >= 2*time.Second {
					last = now
					el := now.Sub(began).Seconds()
					fmt.Fprintf(c.Stderr, "read %d, rows %d, excluded %d, %.0f rows/s, %.0f tokens/s\n",
						p.Read, p.Rows, p.Excluded, float64(p.Read)/el, float64(p.Tokens)/el)
				}
			}
		}
		rep, err := curate.Build(ctx, c.Args, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "wrote %s: %d rows in %s (%d trajectories, %d excluded), %d tokens (%d trainable), %s\n",
			rep.Dir, rep.Rows, plural.Count(len(rep.Shards), "shard"), rep.Trajectories, rep.ExcludedCount, rep.Tokens.Sum, rep.TrainableTokens, rep.Duration.Round(time.Millisecond))
		fmt.Fprintf(c.Stdout, "think %s: %d turns from the reasoning field, %d inline, %d none; %d inline blocks left out\n",
			rep.ThinkMode, rep.Think.Field, rep.Think.Inline, rep.Think.None, rep.Think.InlineDropped)
		fmt.Fprintf(c.Stdout, "truncated %s: %d truncated turns in %d rows", rep.Truncated, rep.Think.TruncatedTurns, rep.TruncatedRows)
		if rep.TruncatedRows > 0 {
			fmt.Fprint(c.Stdout, " (their messages end where the teacher was cut and teach stopping mid-reply; filter truncated_turns == 0 or build with --truncated exclude)")
		}
		fmt.Fprintln(c.Stdout)
		if rep.Unjudged > 0 {
			fmt.Fprintf(c.Stdout, "unjudged: %d of %d rows: their gold SQL failed (gold_error), so correct is false whatever the teacher wrote\n",
				rep.Unjudged, rep.Rows)
		}
		for _, sv := range rep.Salvaged {
			key := ""
			if sv.Key != "" {
				key = ", key " + sv.Key
			}
			fmt.Fprintf(c.Stderr, "%s: salvage: skipped %s %s line %d (%d bytes%s): %s\n", c.Name, sv.SourceRun, sv.File, sv.Line, sv.Bytes, key, sv.Error)
		}
		for i, e := range rep.Excluded {
			if i == 20 {
				fmt.Fprintf(c.Stdout, "  … %d more in %s\n", len(rep.Excluded)-20, filepath.Join(rep.Dir, curate.StatsFile))
				break
			}
			fmt.Fprintf(c.Stdout, "  excluded %s (%s, %s", e.Key, e.SourceRun, e.Reason)
			if e.NumTokens > 0 {
				fmt.Fprintf(c.Stdout, ", %d tokens", e.NumTokens)
			}
			if e.TruncatedTurns > 0 {
				fmt.Fprintf(c.Stdout, ", %d truncated turns", e.TruncatedTurns)
			}
			fmt.Fprintln(c.Stdout, ")")
		}
		return nil
	}
}

var verifyCmd = &cli.Command{
	Name:    "verify",
	Summary: "recount every row's tokens and trainable tokens from its token ids and compare",
	Args:    "DATASET_DIR",
	Setup:   setupVerify,
}

func setupVerify(fs *flag.FlagSet) cli.Func {
	tokPath := cli.AddTokenizer(fs, "")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return func(ctx context.Context, c *cli.Call) error {
		pos := c.Args
		tok, _, err := loadTokenizer(*tokPath)
		if err != nil {
			return err
		}
		rep, err := curate.VerifyWith(ctx, pos[0], tok, 0)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(c.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(c.Stdout, "%s: %d of %d rows agree (%.2f%%)\n", pos[0], rep.Agree, rep.Rows, 100*rep.Agreement())
			for _, m := range rep.Mismatches {
				fmt.Fprintf(c.Stdout, "  row %d %s: num_tokens %d (recomputed %d), num_trainable_tokens %d (recomputed %d): %s\n",
					m.Index, m.Key, m.NumTokens, m.RecomputedTokens, m.NumTrainable, m.RecomputedTrainable, m.Problem)
			}
		}
		if len(rep.Mismatches) > 0 {
			return fmt.Errorf("%d rows disagree", len(rep.Mismatches))
		}
		return nil
	}
}

var statsCmd = &cli.Command{
	Name:    "stats",
	Summary: "print a dataset's statistics as text, JSON or Markdown, and plot them",
	Args:    "DATASET_DIR",
	Setup:   setupStats,
}

func setupStats(fs *flag.FlagSet) cli.Func {
	asJSON := fs.Bool("json", false, "print JSON")
	asMD := fs.Bool("markdown", false, "print Markdown tables")
	plots := fs.String("plots", "", "write PNG charts per teacher (token length, turns used, convergence/exec-ok/correct rates, format violations) into DIR")
	epochs := fs.Int("epochs", 0, "multiply trainable tokens by N (default: the build's --epochs, else 1)")
	return func(ctx context.Context, c *cli.Call) error {
		if *asJSON && *asMD {
			return cli.Usagef("--json and --markdown exclude each other")
		}
		st, err := stats.Dataset(ctx, c.Args[0])
		if err != nil {
			return err
		}
		if *epochs > 0 {
			st.SetEpochs(*epochs)
		}
		switch {
		case *asJSON:
			err = st.WriteJSON(c.Stdout)
		case *asMD:
			err = st.WriteMarkdown(c.Stdout)
		default:
			err = st.WriteText(c.Stdout)
		}
		if err != nil {
			return err
		}
		if *plots != "" {
			paths, err := st.WritePlots(*plots)
			if err != nil {
				return err
			}
			for _, p := range paths {
				fmt.Fprintln(c.Stderr, "wrote", p)
			}
		}
		return nil
	}
}
