package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/generate"
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
	Help:    "All episodes are decoded together (--batch at once) and the file is written when all are done; Ctrl-C writes nothing. --log-dir also writes every episode to a run dir (curate build, stats and view read it), appending to one of the same tasks and options.",
	Setup:   setupRollout,
}

func setupRollout(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true})
	dsns := cli.AddDSNs(fs)
	dialect := cli.AddDialect(fs, datasets.SQLite, "the engine the tasks run on")
	episode := cli.AddEpisode(fs, false)
	rw := cli.AddRewards(fs)
	var (
		out         = fs.String("out", "", "Parquet file to write (required)")
		group       = fs.Int("group", 8, "G: episodes per task")
		temperature = fs.Float64("temperature", 1, "sampling temperature (0 = greedy)")
		topP        = fs.Float64("top-p", 1, "nucleus sampling mass (1 = off)")
		topK        = fs.Int("top-k", 0, "keep the k most likely tokens (0 = off)")
		seed        = fs.Int64("seed", 0, "seed of the sampling (each turn of each episode draws from its own seed derived from it; bit-for-bit repeats need --batch 1 --cache-tokens -1)")
		maxTokens   = fs.Int("max-tokens", 1024, "completion token limit per turn")
		batch       = fs.Int("batch", 256, "most sequences decoded together")
		cacheTokens = fs.Int("cache-tokens", 65536, "tokens of finished requests' KV caches kept for prefix reuse (negative: none)")
		logDir      = fs.String("log-dir", "", "also write every episode as a trajectory to this run dir, keyed TASK/seedSEED/gGROUP/sSAMPLE (a run dir of the same tasks and options is appended to)")
	)
	return func(ctx context.Context, c *cli.Call) error {
		if err := mf.check(); err != nil {
			return err
		}
		if *out == "" {
			return cli.Usagef("--out FILE is required")
		}
		if *group < 1 || *maxTokens < 1 || *batch < 1 || episode.MaxTurns < 1 || *temperature < 0 || *topP < 0 || *topP > 1 || *topK < 0 {
			return cli.Usagef("--group %d, --max-tokens %d, --batch %d, --max-turns %d, --temperature %g, --top-p %g, --top-k %d: out of range",
				*group, *maxTokens, *batch, episode.MaxTurns, *temperature, *topP, *topK)
		}
		if *group > 1 && *temperature == 0 {
			return cli.Usagef("--group %d at --temperature 0 repeats one greedy episode; set --temperature > 0", *group)
		}
		w, mode, err := rw.Parse()
		if err != nil {
			return err
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
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects, c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer conn.Close()
		opts := mf.options()
		opts.Generate = generate.Config{MaxBatch: *batch, CacheTokens: *cacheTokens}
		st, err := student.Open(mf.dir, opts)
		if err != nil {
			return err
		}
		defer st.Close()
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
		rows, rep, err := rollout.Run(ctx, rollout.Config{
			Tasks: ts, Dialect: dialect.One(), Opener: conn, Episode: episode.Options(),
			Generator: st.Generator(), Tokenizer: st.Tokenizer(), Model: st.ModelID(),
			Group: *group, Temperature: *temperature, TopP: *topP, TopK: *topK, Seed: *seed, MaxTokens: *maxTokens,
			Weights: &w, Mode: mode, Log: runLog,
		})
		if err != nil {
			return err
		}
		if err := rollout.Write(*out, rows); err != nil {
			return err
		}
		fmt.Fprintf(c.Stderr, "%s: %d episodes (%d tasks × %d) to %s; %d tokens generated at %.1f tokens/s, mean reward %.4g\n",
			c.Name, rep.Episodes, len(ts), *group, *out, rep.GeneratedTokens, rep.DecodeTokensPerSec, rep.MeanReward)
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", " ")
		return enc.Encode(rep)
	}
}
