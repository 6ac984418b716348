// Command curate turns distill run directories into a Parquet training dataset, verifies its
// token counts and prints its statistics.
//
//	curate build RUN_DIR... [--tokenizer PATH] [--think auto|field|inline|none] [--truncated keep|exclude] [--max-length 32768] --out DATASET_DIR [--rows-per-shard N]
//	curate verify DATASET_DIR [--tokenizer PATH]
//	curate stats DATASET_DIR [--json] [--markdown] [--plots DIR] [--epochs N]
//	curate view PATH... [--addr 127.0.0.1:8080] [--tokenizer PATH]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/stats"
)

// TokenizerEnv names the environment variable holding the default tokenizer path.
const TokenizerEnv = "CHAINEDSQL_TOKENIZER"

const usage = `usage:
  curate build RUN_DIR... --out DATASET_DIR [--tokenizer PATH] [--think auto|field|inline|none] [--truncated keep|exclude] [--max-length 32768] [--rows-per-shard N] [--epochs N]
  curate verify DATASET_DIR [--tokenizer PATH]
  curate stats DATASET_DIR [--json] [--markdown] [--plots DIR] [--epochs N]
  curate view PATH... [--addr 127.0.0.1:8080] [--tokenizer PATH]

curate view serves a web app over a dataset dir, a run dir (read live while distill writes
it) or eval dirs (two or more: the compare view).
--tokenizer is a tokenizer.json or a directory holding one. Without it curate uses
$CHAINEDSQL_TOKENIZER, else ../shared/tokenizer/qwen2.5 when that directory exists.
Run "curate COMMAND -h" for the flags of one command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "curate") {
			msg = "curate: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "build":
		return cmdBuild(ctx, args[1:], stdout, stderr)
	case "verify":
		return cmdVerify(ctx, args[1:], stdout, stderr)
	case "stats":
		return cmdStats(ctx, args[1:], stdout, stderr)
	case "view":
		return cmdView(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// parse parses flags that may come before or after the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// defaultTokenizer is $CHAINEDSQL_TOKENIZER, else ../shared/tokenizer/qwen2.5 when present.
func defaultTokenizer() string {
	if p := os.Getenv(TokenizerEnv); p != "" {
		return p
	}
	p := filepath.Join("..", "shared", "tokenizer", "qwen2.5")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

func loadTokenizer(path string) (curate.Tokenizer, string, error) {
	if path == "" {
		path = defaultTokenizer()
	}
	if path == "" {
		return nil, "", fmt.Errorf("no tokenizer: pass --tokenizer PATH (a tokenizer.json or its directory) or set %s", TokenizerEnv)
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

func tokenizerFlag(fs *flag.FlagSet) *string {
	return fs.String("tokenizer", "", "tokenizer.json or its directory (default $"+TokenizerEnv+", else ../shared/tokenizer/qwen2.5 when present)")
}

func cmdBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("curate build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tokPath := tokenizerFlag(fs)
	think := fs.String("think", string(curate.ThinkAuto), "where assistant messages' <think> comes from: auto (the reasoning field, else the inline block), field, inline, none")
	truncated := fs.String("truncated", string(curate.TruncatedKeep), "rows with a turn the token limit cut: keep (they teach stopping mid-reply; the card warns) or exclude (listed as excluded)")
	maxLen := fs.Int("max-length", curate.DefaultMaxLength, "exclude rows with more tokens than this")
	out := fs.String("out", "", "dataset directory to create (must not exist, or be empty)")
	perShard := fs.Int("rows-per-shard", curate.DefaultRowsPerShard, "rows per Parquet file")
	epochs := fs.Int("epochs", 0, "show trainable tokens × epochs in the card")
	workers := fs.Int("workers", 0, "tokenising workers (default GOMAXPROCS; output does not depend on it)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	runs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return errors.New("build: no RUN_DIR given")
	}
	if *out == "" {
		return errors.New("build: --out DATASET_DIR is required")
	}
	mode, err := curate.ParseThinkMode(*think)
	if err != nil {
		return fmt.Errorf("build: --think: %w", err)
	}
	trunc, err := curate.ParseTruncatedPolicy(*truncated)
	if err != nil {
		return fmt.Errorf("build: --truncated: %w", err)
	}
	tok, name, err := loadTokenizer(*tokPath)
	if err != nil {
		return err
	}
	began := time.Now()
	last := began
	opts := curate.BuildOptions{
		Tokenizer: tok, TokenizerName: name, Think: mode, Truncated: trunc, MaxLength: *maxLen, Out: *out, RowsPerShard: *perShard,
		Epochs: *epochs, Workers: *workers,
	}
	if !*quiet {
		opts.Progress = func(p curate.BuildProgress) {
			if now := time.Now(); now.Sub(last) >= 2*time.Second {
				last = now
				el := now.Sub(began).Seconds()
				fmt.Fprintf(stderr, "read %d, rows %d, excluded %d, %.0f rows/s, %.0f tokens/s\n",
					p.Read, p.Rows, p.Excluded, float64(p.Read)/el, float64(p.Tokens)/el)
			}
		}
	}
	rep, err := curate.Build(ctx, runs, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d rows in %d shards (%d trajectories, %d excluded), %d tokens (%d trainable), %s\n",
		rep.Dir, rep.Rows, len(rep.Shards), rep.Trajectories, rep.ExcludedCount, rep.Tokens.Sum, rep.TrainableTokens, rep.Duration.Round(time.Millisecond))
	fmt.Fprintf(stdout, "think %s: %d turns from the reasoning field, %d inline, %d none; %d inline blocks left out\n",
		rep.ThinkMode, rep.Think.Field, rep.Think.Inline, rep.Think.None, rep.Think.InlineDropped)
	fmt.Fprintf(stdout, "truncated %s: %d truncated turns in %d rows", rep.Truncated, rep.Think.TruncatedTurns, rep.TruncatedRows)
	if rep.TruncatedRows > 0 {
		fmt.Fprint(stdout, " (their messages end where the teacher was cut and teach stopping mid-reply; filter truncated_turns == 0 or build with --truncated exclude)")
	}
	fmt.Fprintln(stdout)
	for i, e := range rep.Excluded {
		if i == 20 {
			fmt.Fprintf(stdout, "  … %d more in %s\n", len(rep.Excluded)-20, filepath.Join(rep.Dir, curate.StatsFile))
			break
		}
		fmt.Fprintf(stdout, "  excluded %s (%s, %s", e.Key, e.SourceRun, e.Reason)
		if e.NumTokens > 0 {
			fmt.Fprintf(stdout, ", %d tokens", e.NumTokens)
		}
		if e.TruncatedTurns > 0 {
			fmt.Fprintf(stdout, ", %d truncated turns", e.TruncatedTurns)
		}
		fmt.Fprintln(stdout, ")")
	}
	return nil
}

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("curate verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tokPath := tokenizerFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("verify: want exactly one DATASET_DIR")
	}
	tok, _, err := loadTokenizer(*tokPath)
	if err != nil {
		return err
	}
	rep, err := curate.VerifyWith(ctx, pos[0], tok, 0)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "%s: %d of %d rows agree (%.2f%%)\n", pos[0], rep.Agree, rep.Rows, 100*rep.Agreement())
		for _, m := range rep.Mismatches {
			fmt.Fprintf(stdout, "  row %d %s: num_tokens %d (recomputed %d), num_trainable_tokens %d (recomputed %d): %s\n",
				m.Index, m.Key, m.NumTokens, m.RecomputedTokens, m.NumTrainable, m.RecomputedTrainable, m.Problem)
		}
	}
	if len(rep.Mismatches) > 0 {
		return fmt.Errorf("verify: %d rows disagree", len(rep.Mismatches))
	}
	return nil
}

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("curate stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	asMD := fs.Bool("markdown", false, "print Markdown tables")
	plots := fs.String("plots", "", "write PNG charts per teacher (token length, turns used, convergence/exec-ok/correct rates, format violations) into DIR")
	epochs := fs.Int("epochs", 0, "multiply trainable tokens by N (default: the build's --epochs, else 1)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("stats: want exactly one DATASET_DIR")
	}
	if *asJSON && *asMD {
		return errors.New("stats: --json and --markdown exclude each other")
	}
	st, err := stats.Dataset(ctx, pos[0])
	if err != nil {
		return err
	}
	if *epochs > 0 {
		st.SetEpochs(*epochs)
	}
	switch {
	case *asJSON:
		err = st.WriteJSON(stdout)
	case *asMD:
		err = st.WriteMarkdown(stdout)
	default:
		err = st.WriteText(stdout)
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
			fmt.Fprintln(stderr, "wrote", p)
		}
	}
	return nil
}
