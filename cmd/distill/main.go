// Command distill runs teachers (or the built-in oracle) over benchmark tasks with the
// chained-sql/v1 protocol and writes a resumable run dir (see docs/DESIGN.md).
//
//	distill --teachers gpt-oss,deepseek,glm,qwen --tasks bird:PATH/dev.json --dialects sqlite,postgres --out runs/NAME
//	distill load --tasks SPEC --dialect postgres|mysql --dsn DSN
//	distill env serve --tasks SPEC [--dialects ...] [--addr 127.0.0.1:8090]
//
// With no flags it runs the bundled sample on SQLite with the oracle policy into runs/demo, which
// needs no keys. Re-running the same command resumes; Ctrl-C stops after the episodes in flight
// (a second Ctrl-C abandons them); the exit status is 130 after an interruption, 2 after a usage
// error, 1 after any other failure (internal/cli).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// program is the distill binary: the main job (distill [flags]) and its subcommands.
var program = &cli.Program{
	Name:     "distill",
	Summary:  "Distil multi-turn Text-to-SQL trajectories from teachers into a resumable run dir.",
	Default:  distillCmd,
	Commands: []*cli.Command{loadCmd, envCmd},
}

func main() { program.Main() }

var distillCmd = &cli.Command{
	Summary: "run the policies over the tasks in every dialect and write a resumable run dir",
	Help: `Real teachers: set CHAINEDSQL_BASE_URL and CHAINEDSQL_API_KEY (one OpenAI-compatible
endpoint for all presets), or write a config file (teachers/example.yaml) and pass --config.
Re-running the same command resumes; Ctrl-C stops after the episodes in flight (a second
Ctrl-C abandons them) and exits 130. When a teacher's first 3 results written (in the order its
episodes finish) fail with the same client error (HTTP 4xx but 408 and 429), distill abandons
the episodes in flight and exits 1 naming the error and its fix; with more than one episode in
flight per teacher, more than 3 of its requests may have gone out and failures.jsonl may list
more than 3.`,
	Setup: setupDistill,
}

func setupDistill(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Default: "sample", Limit: true})
	dsns := cli.AddDSNs(fs)
	dialects := cli.AddDialects(fs, "")
	episodeFlags := cli.AddEpisode(fs, true)
	progress := cli.AddProgress(fs)
	shard := cli.AddShard(fs, "the keys (by hash)", "each part writes its own run dir; curate build merges them")
	out := cli.AddOut(fs, "runs/demo", "run dir (created, or resumed when it exists)", false)
	tcfg := cli.AddTeachers(fs)
	var (
		teacherList = fs.String("teachers", episode.OracleName, "comma-separated policies: oracle, teacher names from the config (gpt-oss, deepseek, glm, qwen, ...), teacher:NAME, student:DIR")
		samples     = fs.Int("samples", 1, "trajectories per (task, teacher, dialect)")
		concurrency = fs.Int("concurrency", 0, "episodes in flight per teacher (0 = the teacher's max_concurrency)")
		retryFailed = fs.Bool("retry-failed", false, "retry keys that failed terminally in an earlier invocation")
		temperature = fs.Float64("temperature", -1, "sampling temperature for every teacher (-1 = the teacher's config)")
		maxTokens   = fs.Int("max-tokens", 0, "completion token limit per turn (0 = the teacher's config)")
		ordered     = fs.Bool("ordered", false, "judge ordered results when the gold SQL has ORDER BY (Spider style)")
		drain       = fs.Duration("drain-timeout", distill.DefaultDrainTimeout, "after Ctrl-C, how long in-flight episodes may finish")
		shardMB     = fs.Int("shard-mb", distill.DefaultMaxShardBytes>>20, "rotate shard files at this size (MiB)")
	)
	return func(ctx context.Context, c *cli.Call) error {
		if err := tasks.Check(); err != nil {
			return err
		}
		if *samples < 1 || episodeFlags.MaxTurns < 1 || *concurrency < 0 || *maxTokens < 0 {
			return cli.Usagef("--samples %d, --max-turns %d, --concurrency %d, --max-tokens %d: out of range (--samples and --max-turns at least 1)",
				*samples, episodeFlags.MaxTurns, *concurrency, *maxTokens)
		}
		if err := dsns.Check(dialects.List()); err != nil {
			return err
		}
		if err := cli.CheckRunDir(out.Dir, "a run dir"); err != nil {
			return err
		}
		live, logw := progress.Writers(c.Stderr)
		cfg, err := tcfg.Load(*teacherList)
		if err != nil {
			return err
		}
		popts := policies.Options{Teachers: cfg}
		if strings.Contains(*teacherList, "student:") {
			// student:DIR takes what its spec cannot carry from the documented environment.
			if popts.Student, err = policies.StudentEnv(os.Getenv); err != nil {
				return err
			}
			popts.Student.Tokenizer = cli.FallbackTokenizer(popts.Student.Tokenizer)
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects.List(), c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer cli.Disconnect(conn, dialects.List(), c.Stderr, c.Name)
		// Last, as it may load a model (student:DIR): the cheaper checks above fail first.
		handles, err := policies.ResolveList(*teacherList, popts)
		if errors.Is(err, student.ErrNoTokenizer) {
			return fmt.Errorf("%w; set $%s or $%s (a tokenizer.json or its directory, e.g. the Qwen2.5 tokenizer's)", err, policies.EnvStudentTokenizer, cli.TokenizerEnv)
		}
		if err != nil {
			return err
		}

		ep := episodeFlags.Options()
		if *temperature >= 0 {
			ep.Chat.Temperature = chat.Float(*temperature)
		}
		ep.Chat.MaxTokens = *maxTokens
		ep.Ordered = *ordered
		start := time.Now()
		res, err := distill.Run(ctx, distill.RunConfig{
			Dir:           out.Dir,
			Tasks:         ts,
			TaskSpec:      tasks.Spec(),
			Limit:         tasks.Limit,
			Policies:      handles,
			Dialects:      dialects.List(),
			Samples:       *samples,
			Episode:       ep,
			Concurrency:   *concurrency,
			Shard:         shard.Shard,
			Opener:        conn,
			RetryFailed:   *retryFailed,
			Toolkit:       buildinfo.Version(),
			MaxShardBytes: int64(*shardMB) << 20,
			DrainTimeout:  *drain,
			Abort:         c.Abort("abandoning the episodes in flight"),
			Progress:      logw,
			Interactive:   live,
		})
		if res != nil {
			for _, r := range res.Repairs {
				fmt.Fprintf(c.Stderr, "%s: resume: %s\n", c.Name, r)
			}
		}
		if err != nil && !errors.Is(err, distill.ErrInterrupted) {
			return err
		}
		if res != nil {
			fmt.Fprintf(c.Stdout, "run dir %s: %d keys, %d done earlier, %d done now, %d failed now, %d abandoned, %s\n",
				out.Dir, res.Total, res.Skipped, res.Done, res.Failed, res.Abandoned, time.Since(start).Round(time.Millisecond))
			if len(res.Summary) > 0 {
				distill.WriteSummary(c.Stdout, res.Summary)
			}
			for _, b := range res.BadLines {
				fmt.Fprintf(c.Stderr, "%s: skipped a damaged run-dir line: %v\n", c.Name, b)
			}
		}
		return err
	}
}
