package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/evaluate/evalrun"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var evalCmd = &cli.Command{
	Name:    "eval",
	Summary: "evaluate a policy (the student, a teacher, the oracle) on benchmark tasks",
	Help:    "Re-running the same command resumes the eval dir; Ctrl-C stops and exits 130.",
	Setup:   setupEval,
}

func setupEval(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true})
	dsns := cli.AddDSNs(fs)
	dialect := cli.AddDialect(fs, datasets.SQLite, "the engine the tasks run on")
	episode := cli.AddEpisode(fs, false)
	progress := cli.AddProgress(fs)
	shard := cli.AddShard(fs, "the tasks", "join the parts with student merge")
	out := cli.AddOut(fs, "", "eval dir (created, or resumed when it exists; default evals/POLICY)", false)
	tcfg := cli.AddTeachers(fs)
	var (
		model       = fs.String("model", "", "student model directory (same as --policy student:DIR)")
		policySpec  = fs.String("policy", "", "policy to evaluate: oracle, teacher:NAME (from --config), student:DIR")
		backend     = fs.String("backend", "cpu", "student runtime backend: cpu, cuda (NVIDIA GPU) or cuda-emulated (the CUDA kernels on the CPU; -tags cudaemu builds)")
		batch       = fs.Int("batch", 0, "conversations in flight, for student:DIR also the most decoded together (0 = the policy's own, else 16)")
		samples     = fs.Int("samples", 1, "trajectories per task (needs --temperature > 0 to differ)")
		temperature = fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
		vote        = fs.Bool("vote", false, "with --samples > 1: answer each task by majority over the samples' executed results")
		maxTokens   = fs.Int("max-tokens", 0, "completion token limit per turn (0 = the policy's default)")
		tokenizer   = fs.String("tokenizer", "", "student: tokenizer.json or its directory, used when the model directory has none (default $"+policies.EnvStudentTokenizer+", else $"+cli.TokenizerEnv+", else ../shared/tokenizer/qwen2.5 when present)")
		cacheTokens = fs.Int("cache-tokens", 65536, "student: tokens of finished conversations' KV caches kept for prefix reuse (a shared schema prompt, the previous turn); negative: none, every prompt computed in full")
	)
	var wf weightFlags
	wf.add(fs, "student: ")
	return func(ctx context.Context, c *cli.Call) error {
		spec, err := evalPolicySpec(*model, *policySpec)
		if err != nil {
			return cli.Usage(err)
		}
		if err := wf.check(); err != nil {
			return err
		}
		// A backend that cannot run here is one clear line before anything starts.
		if b, err := student.ParseBackend(*backend); err != nil {
			return cli.Usagef("--%v", err)
		} else if b != student.BackendCPU {
			if err := cuda.Check(b); err != nil {
				return fmt.Errorf("--backend %s: %w", b, err)
			}
		}
		if err := tasks.Check(); err != nil {
			return err
		}
		if *batch < 0 || *samples < 1 || episode.MaxTurns < 1 || *temperature < 0 {
			return cli.Usagef("--batch %d, --samples %d, --max-turns %d, --temperature %g: out of range", *batch, *samples, episode.MaxTurns, *temperature)
		}
		if *samples > 1 && *temperature == 0 {
			return cli.Usagef("--samples %d at --temperature 0 repeats one greedy answer; set --temperature > 0", *samples)
		}
		if *vote && *samples < 2 {
			return cli.Usagef("--vote needs --samples 2 or more")
		}
		dialects := dialect.List()
		if err := dsns.Check(dialects); err != nil {
			return err
		}
		if out.Dir != "" { // checked before a model loads; evals/POLICY once the policy is known
			if err := cli.CheckRunDir(out.Dir, "an eval dir"); err != nil {
				return err
			}
		}
		live, logw := progress.Writers(c.Stderr)
		sopts, err := evalStudentOptions(os.Getenv, c.Given(), evalStudentFlags{
			tokenizer: *tokenizer, dtype: wf.dtype, kv: wf.kv, backend: *backend, threads: wf.threads, mmap: wf.mmap, cacheTokens: *cacheTokens, batch: *batch,
		})
		if err != nil && strings.HasPrefix(spec, "student:") {
			return err
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		cfg, err := tcfg.Load(spec)
		if err != nil {
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects, c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer cli.Disconnect(conn, dialects, c.Stderr, c.Name)
		// Last, as it may load a model (student:DIR): the cheaper checks above fail first.
		h, err := policies.Resolve(spec, policies.Options{Teachers: cfg, Student: sopts})
		if err != nil {
			return tokenizerHint(err)
		}
		dir := out.Dir
		if dir == "" {
			dir = filepath.Join("evals", h.Name)
			if err := cli.CheckRunDir(dir, "an eval dir"); err != nil {
				return err
			}
		}

		ep := episode.Options()
		ep.Chat = chat.Options{Temperature: chat.Float(*temperature), MaxTokens: *maxTokens}
		s, err := evalrun.Run(ctx, evaluate.Config{
			Dir: dir, Tasks: ts, TaskSpec: tasks.Spec(), Limit: tasks.Limit, Policy: h, Dialect: dialect.One(),
			Samples: *samples, Vote: *vote, Batch: *batch, Shard: shard.Shard, Opener: conn, Toolkit: buildinfo.Version(),
			Episode: ep, Progress: logw, Interactive: live,
			Abort: c.Abort("abandoning the episodes in flight"),
		})
		if s != nil {
			for _, r := range s.Repairs {
				fmt.Fprintf(c.Stderr, "%s: resume: %s\n", c.Name, r)
			}
			fmt.Fprintf(c.Stdout, "eval dir %s\n", dir)
			s.WriteText(c.Stdout)
		}
		return err
	}
}

// evalPolicySpec joins --model and --policy into one policy spec.
func evalPolicySpec(model, policy string) (string, error) {
	switch {
	case model != "" && policy != "":
		return "", errors.New("give --model DIR or --policy SPEC, not both")
	case model != "":
		return "student:" + model, nil
	case policy != "":
		return policy, nil
	}
	return "", errors.New("give --model DIR (the student) or --policy SPEC (oracle, teacher:NAME, student:DIR)")
}

// evalStudentFlags are eval's flags for the student:DIR policy.
type evalStudentFlags struct {
	tokenizer, dtype, kv, backend string
	threads, cacheTokens          int
	batch                         int
	mmap                          bool
}

// evalStudentOptions builds the student:DIR policy's options: the documented
// CHAINEDSQL_STUDENT_* environment (policies.StudentEnv) first, then the flags the user gave
// (set names those that count only when given; the string flags and --threads count when
// non-empty or positive), then for the tokenizer cli.FallbackTokenizer's default, and --batch as
// the generator's MaxBatch so that the conversations in flight decode together.
func evalStudentOptions(getenv func(string) string, set map[string]bool, f evalStudentFlags) (student.Options, error) {
	opts, err := policies.StudentEnv(getenv)
	if err != nil {
		return opts, err
	}
	if f.tokenizer != "" {
		opts.Tokenizer = f.tokenizer
	}
	opts.Tokenizer = cli.FallbackTokenizer(opts.Tokenizer)
	if f.dtype != "" {
		opts.DType = f.dtype
	}
	if f.kv != "" {
		opts.KVCache = f.kv
	}
	if f.backend != "" {
		opts.Backend = f.backend // --backend (default cpu) wins over the environment, as it always has
	}
	if f.threads > 0 {
		opts.Threads = f.threads
	}
	if set["mmap"] {
		opts.Mmap = f.mmap
	}
	if set["cache-tokens"] {
		opts.Generate.CacheTokens = f.cacheTokens
	}
	if f.batch > 0 {
		opts.Generate.MaxBatch = f.batch
	}
	return opts, nil
}
