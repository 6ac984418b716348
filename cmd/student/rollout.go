package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"path/filepath"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rollout"
	"github.com/chainedsql/chainedsql/rundir"
)

var rolloutCmd = &cli.Command{
	Name:    "rollout",
	Summary: "GRPO groups: G episodes per task from the student, to Parquet with token ids, masks, log-probs, rewards and advantages (docs/ROLLOUT.md)",
	Help: "All episodes are decoded together (--batch at once) and the file is written when all are done; Ctrl-C writes nothing. " +
		"--subset train|val plays the tasks of one subset (--val-fraction and --subset-seed: distill env's --val-fraction and --seed). " +
		"With --serve ADDR it runs no rollout at start but listens: POST /v1/rollouts {\"out\": FILE, \"seed\": N, \"task_ids\": [ID, ...], \"subset\": \"train\"|\"val\"} " +
		"runs one on those tasks (default every task, or --subset's; an unknown id is 400) with the flags' group, sampling and rewards and answers its report, " +
		"FILE a name in --out-dir (default --out's directory; a relative name is taken from it; an absolute path elsewhere, .. or a symbolic link out of it is refused 403), " +
		"replacing an existing file only when it is a rollout table this command wrote (anything else is refused 403, as is such a file at --out without --serve); " +
		"POST /v1/weights {\"path\": DIR} reloads the weights between rollouts (a rollout runs wholly on the weights serving when it starts), " +
		"and the rest of student serve's API answers too. Ctrl-C stops it. " +
		"--log-dir also writes every episode to a run dir (curate build, stats and view read it), appending to one of the same tasks and options.",
	Setup: setupRollout,
}

func setupRollout(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true})
	dsns := cli.AddDSNs(fs)
	dialect := cli.AddDialect(fs, datasets.SQLite, "the engine the tasks run on")
	episode := cli.AddEpisode(fs, false)
	rw := cli.AddRewards(fs)
	var (
		out         = fs.String("out", "", "Parquet file to write (required without --serve; with it, the default file and, without --out-dir, its directory)")
		group       = fs.Int("group", 8, "G: episodes per task")
		temperature = fs.Float64("temperature", 1, "sampling temperature (0 = greedy)")
		topP        = fs.Float64("top-p", 1, "nucleus sampling mass (1 = off)")
		topK        = fs.Int("top-k", 0, "keep the k most likely tokens (0 = off)")
		seed        = fs.Int64("seed", 0, "seed of the sampling (each turn of each episode draws from its own seed derived from it; bit-for-bit repeats need --batch 1 --cache-tokens -1)")
		maxTokens   = fs.Int("max-tokens", 1024, "completion token limit per turn")
		batch       = fs.Int("batch", 256, "most sequences decoded together")
		cacheTokens = fs.Int("cache-tokens", 65536, "tokens of finished requests' KV caches kept for prefix reuse (negative: none)")
		addr        = fs.String("serve", "", "listen on ADDR and run rollouts on request (POST /v1/rollouts), reloading weights between them (POST /v1/weights); --out is then the default file")
		outDirFlag  = fs.String("out-dir", "", "with --serve: the one directory requests may write in (default --out's directory); a request's out is a name in it, never outside it, and replaces only a rollout table")
		quiet       = fs.Bool("quiet", false, "with --serve: no request log on stderr")
		maxN        = fs.Int("max-n", serve.DefaultMaxN, "with --serve: most choices (n) one chat completion may ask for, as student serve's")
		profile     = fs.String("cpuprofile", "", "without --serve: write a CPU profile of the rollout (pprof) to this file")
		subset      = fs.String("subset", "", "play only the tasks of this subset, train or val (default every task; under --serve a request's subset or task_ids choose)")
		logDir      = fs.String("log-dir", "", "also write every episode as a trajectory to this run dir, keyed TASK/seedSEED/gGROUP/sSAMPLE (a run dir of the same tasks and options is appended to)")
	)
	subsets := datasets.DefaultSubsets
	fs.Float64Var(&subsets.ValFraction, "val-fraction", datasets.DefaultSubsets.ValFraction, "share of the tasks in the validation subset, by a hash of task id and --subset-seed: distill env's --val-fraction (docs/ENV.md)")
	fs.Int64Var(&subsets.Seed, "subset-seed", datasets.DefaultSubsets.Seed, "seed of the train/validation assignment: distill env's --seed")
	gc := addGenerationConfig(fs, "with --serve: ")
	weightsRoot := addWeightsRoot(fs, "with --serve: ")
	guard := cli.AddGuard(fs, true)
	return func(ctx context.Context, c *cli.Call) error {
		if err := cmp.Or(mf.check(), gc.check()); err != nil {
			return err
		}
		if *out == "" && *addr == "" {
			return cli.Usagef("--out FILE is required")
		}
		if *addr == "" && *outDirFlag != "" {
			return cli.Usagef("--out-dir is for --serve (without it, --out names the file)")
		}
		if *addr != "" && *out == "" && *outDirFlag == "" {
			return cli.Usagef("--serve needs --out-dir DIR or --out FILE: the directory requests write their files in")
		}
		if err := guard.Check(); err != nil {
			return err
		}
		if *group < 1 || *maxTokens < 1 || *batch < 1 || episode.MaxTurns < 1 || *temperature < 0 || *topP < 0 || *topP > 1 || *topK < 0 {
			return cli.Usagef("--group %d, --max-tokens %d, --batch %d, --max-turns %d, --temperature %g, --top-p %g, --top-k %d: out of range",
				*group, *maxTokens, *batch, episode.MaxTurns, *temperature, *topP, *topK)
		}
		if *maxN < 1 {
			return cli.Usagef("--max-n %d: at least 1", *maxN)
		}
		if *group > 1 && *temperature == 0 {
			return cli.Usagef("--group %d at --temperature 0 repeats one greedy episode; set --temperature > 0", *group)
		}
		w, mode, err := rw.Parse()
		if err != nil {
			return err
		}
		if err := subsets.Check(); err != nil {
			return cli.Usagef("--val-fraction: %v", err)
		}
		if *subset != "" && *subset != datasets.SubsetTrain && *subset != datasets.SubsetVal {
			return cli.Usagef("--subset %q: want %s or %s", *subset, datasets.SubsetTrain, datasets.SubsetVal)
		}
		if err := tasks.Check(); err != nil {
			return err
		}
		if b, _ := student.ParseBackend(mf.backend); b != student.BackendCPU {
			if err := cuda.Check(b); err != nil {
				return fmt.Errorf("--backend %s: %w", b, err)
			}
		}
		dialects := dialect.List()
		if err := dsns.Check(dialects); err != nil {
			return err
		}
		// The output is checked before anything loads: a file that is not a rollout table is
		// never replaced, and under --serve every request's file stays in one directory.
		var outDir *rollout.OutDir
		var defaultOut string
		if *addr == "" {
			if err := rollout.CheckOut(*out); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
		} else {
			dir := *outDirFlag
			if dir == "" {
				dir = filepath.Dir(*out)
			}
			if outDir, err = rollout.OpenOutDir(dir); err != nil {
				return fmt.Errorf("--out-dir: %w", err)
			}
			defer outDir.Close()
			if *out != "" {
				abs, err := filepath.Abs(*out)
				if err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				if defaultOut, err = outDir.Resolve(abs); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		// The tasks of --subset: every rollout's without --serve, the default of a request.
		picked, indexes, err := rollout.Select(ts, rollout.Selection{Subset: *subset, Subsets: subsets})
		if err != nil {
			return fmt.Errorf("--subset: %w", err)
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects, c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer conn.Close()
		// The chat completions --serve answers take the sampling defaults of student serve's
		// (without its per-field flags: this command's are its rollouts').
		var g serve.GenerationConfig
		if *addr != "" {
			if g, err = gc.read(mf.dir); err != nil {
				return err
			}
		}
		chatDefaults, chatTokens := g.Apply(serve.NeutralDefaults), defaultMaxTokens
		if g.MaxNewTokens != nil {
			chatTokens = *g.MaxNewTokens
		}
		opts := mf.options()
		opts.Sampling = student.Sampling{MaxTokens: chatTokens}
		opts.Generate = generate.Config{MaxBatch: *batch, CacheTokens: *cacheTokens}
		st, err := mf.open(opts)
		if err != nil {
			return err
		}
		var runLog *rundir.Log
		if *logDir != "" {
			eo := episode.Options()
			runLog, err = rundir.OpenLog(*logDir, &rundir.Manifest{
				Format: rundir.RunFormat, Protocol: protocol.ProtocolVersion, Toolkit: buildinfo.Version(), Created: time.Now().UTC(),
				Tasks:    rundir.ManifestTasks{Spec: tasks.Spec(), Limit: tasks.Limit, Count: len(ts), Digest: distill.TasksDigest(ts)},
				Teachers: []rundir.ManifestTeacher{{Name: rollout.LogTeacher, Spec: "student rollout"}},
				Dialects: dialects, Samples: *group, MaxTurns: eo.MaxTurns, Caps: eo.Caps, ExecTimeout: eo.ExecTimeout,
			})
			if err != nil {
				return err
			}
			defer runLog.Close()
			for _, r := range runLog.Repairs() {
				fmt.Fprintf(c.Stderr, "%s: %s: %s\n", c.Name, *logDir, r)
			}
		}
		base := rollout.Config{
			Tasks: ts, Dialect: dialect.One(), Opener: conn, Episode: episode.Options(),
			Group: *group, Temperature: *temperature, TopP: *topP, TopK: *topK, Seed: *seed, MaxTokens: *maxTokens,
			Weights: &w, Mode: mode, Log: runLog,
		}
		// done says where a rollout went and how fast it ran.
		done := func(file string, rep *rollout.Report) {
			fmt.Fprintf(c.Stderr, "%s: %d episodes (%d tasks × %d) to %s; %d tokens generated at %.1f tokens/s (%d in %d decode steps, %.1f a step, at %.1f tokens/s: set against student bench's batched decode at that batch and depth), mean reward %.4g\n",
				c.Name, rep.Episodes, rep.Episodes / *group, *group, file, rep.GeneratedTokens, rep.DecodeTokensPerSec,
				rep.DecodeStepTokens, rep.DecodeSteps, float64(rep.DecodeStepTokens)/float64(max(rep.DecodeSteps, 1)), rep.DecodeStepTokensPerSec, rep.MeanReward)
		}
		if *addr != "" {
			sw, err := newSwap(c, st, mf.dir, *weightsRoot, opts)
			if err != nil {
				st.Close()
				return err
			}
			defer sw.Close()
			rs := &rollout.Server[*student.Student]{
				Swap: sw, Config: base, Subsets: subsets, Subset: *subset, Out: outDir, DefaultOut: defaultOut, Done: done,
				Bind: func(st *student.Student) (*generate.Generator, rollout.Tokenizer) {
					return st.Generator(), st.Tokenizer()
				},
			}
			fmt.Fprintf(c.Stderr, "%s: chat completions' %s\n", c.Name, gc.note(g, chatDefaults, chatTokens, nil))
			return serveHTTP(ctx, c, *addr, guard, *quiet, st.ModelID(), func(logger *log.Logger) http.Handler {
				rs.Log = logger
				mux := http.NewServeMux()
				mux.Handle("/v1/rollouts", rs)
				mux.Handle("/", serve.Handler(sw, logger, serve.Config{MaxN: *maxN, Defaults: &chatDefaults}))
				return mux
			})
		}
		defer st.Close()
		stop, abort, err := startProfile(*profile)
		if err != nil {
			return err
		}
		defer abort()
		cfg := base
		cfg.Tasks, cfg.TaskIndexes = picked, indexes
		cfg.Generator, cfg.Tokenizer, cfg.Model = st.Generator(), st.Tokenizer(), st.ModelID()
		// The weights a process starts with are version 1, as under --serve.
		if cfg.WeightsPath, err = filepath.Abs(mf.dir); err != nil {
			return fmt.Errorf("--model: %w", err)
		}
		cfg.WeightsVersion = 1
		rows, rep, err := rollout.Run(ctx, cfg)
		if err == nil {
			err = rollout.Write(*out, rows)
		}
		if cerr := stop(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		done(*out, rep)
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", " ")
		return enc.Encode(rep)
	}
}
