package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/env"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/plural"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/turns"
)

var envCmd = &cli.Command{
	Name:     "env",
	Summary:  "the protocol as an HTTP/JSON RL environment (docs/ENV.md)",
	Commands: []*cli.Command{envServeCmd, envPromptsCmd},
}

var envServeCmd = &cli.Command{
	Name:    "serve",
	Summary: "serve the protocol as an HTTP/JSON RL environment: episodes, steps, rewards (docs/ENV.md)",
	Help:    "Ctrl-C stops taking requests, lets those in flight finish within --drain-timeout and exits 0; a second one kills at once.",
	Setup:   setupEnvServe,
}

// envFlags are the flags env serve and env prompts share: the tasks (--limit included), their
// databases in each dialect, the student's tokenizer and the train/validation subsets.
type envFlags struct {
	tasks    *cli.Tasks
	dsns     *cli.DSNs
	dialects *cli.Dialects
	tokPath  *string
	subsets  datasets.Subsets
}

// addEnvFlags defines the shared flags on fs; what says what is done with the tasks, tokNote
// what the tokenizer is for. --limit takes the first N tasks, as distill load's does, so that
// the tasks of a partial load are served and exported.
func addEnvFlags(fs *flag.FlagSet, what, tokNote string) *envFlags {
	f := &envFlags{
		tasks:    cli.AddTasks(fs, cli.TaskOptions{Default: "sample", Repeat: true, Limit: true, Note: what}),
		dsns:     cli.AddDSNs(fs),
		dialects: cli.AddDialects(fs, what+"; the first is the default"),
		tokPath:  cli.AddTokenizer(fs, tokNote),
		subsets:  datasets.DefaultSubsets,
	}
	fs.Float64Var(&f.subsets.ValFraction, "val-fraction", datasets.DefaultSubsets.ValFraction, "share of the tasks in the validation subset, by a hash of task id and --seed (docs/ENV.md)")
	fs.Int64Var(&f.subsets.Seed, "seed", datasets.DefaultSubsets.Seed, "seed of the train/validation assignment")
	return f
}

// open checks the flags, loads the tokenizer (a missing one is an error when needTok, else
// nil) and the tasks, and connects to their databases, which the caller disconnects.
func (f *envFlags) open(ctx context.Context, c *cli.Call, needTok bool) ([]datasets.Task, *sandbox.Connector, *tokenizer.Tokenizer, error) {
	if err := f.subsets.Check(); err != nil {
		return nil, nil, nil, cli.Usagef("--val-fraction: %v", err)
	}
	var tok *tokenizer.Tokenizer
	p, err := cli.TokenizerPath(*f.tokPath)
	switch {
	case err == nil:
		if tok, err = loadChatMLTokenizer(p); err != nil {
			return nil, nil, nil, err
		}
	case needTok:
		return nil, nil, nil, err
	default:
		fmt.Fprintf(c.Stderr, "%s: WARNING: %v: responses carry texts only, without token ids or loss masks (docs/trainers/trl_rollout_func.py needs them)\n", c.Name, err)
	}
	if err := f.dsns.Check(f.dialects.List()); err != nil {
		return nil, nil, nil, err
	}
	ts, err := f.tasks.Load()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := f.dsns.Connect(ctx, f.tasks.DBRoot, ts, f.dialects.List(), c.Stderr, c.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	return ts, conn, tok, nil
}

// close disconnects conn.
func (f *envFlags) close(conn *sandbox.Connector, c *cli.Call) {
	cli.Disconnect(conn, f.dialects.List(), c.Stderr, c.Name)
}

func setupEnvServe(fs *flag.FlagSet) cli.Func {
	ef := addEnvFlags(fs, "served", "the student's, for token ids and loss masks in the responses (none found: texts only)")
	episode := cli.AddEpisode(fs, true)
	guard := cli.AddGuard(fs, true)
	rw := cli.AddRewards(fs)
	var (
		addr        = fs.String("addr", "127.0.0.1:8090", "listen address")
		ttl         = fs.Duration("ttl", env.DefaultTTL, "drop an episode this long after its last step")
		maxEpisodes = fs.Int("max-episodes", env.DefaultMaxEpisodes, "most episodes kept in memory")
		maxStoreMiB = fs.Int64("max-store-mib", env.DefaultMaxStoreBytes>>20, "MiB the episodes kept in memory may hold, finished ones included: new episodes are refused past three quarters of it, and a step that could pass it")
		clientMiB   = fs.Int64("max-client-store-mib", 0, "MiB the episodes of one client (an API key, else a remote address, all of loopback one) may hold, finished ones included: its new episodes are refused past three quarters of it, and its step that could pass it; 0: half of --max-store-mib")
		perClient   = fs.Int("max-episodes-per-client", 0, "most episodes in play for one client (an API key, else a remote address, all of loopback one); 0: half of --max-episodes")
		maxBody     = fs.Int64("max-body", env.DefaultMaxBody, "largest request body in bytes")
		maxBatch    = fs.Int("max-batch", env.DefaultMaxBatch, "most steps in one batch-step request, completions in one score request")
		parallel    = fs.Int("parallel", env.DefaultParallel, "steps executing at once")
		goldMiB     = fs.Int64("gold-cache-mib", env.DefaultGoldCacheBytes>>20, "MiB of gold results kept for later episodes of their tasks (the least recently used go first)")
		drain       = fs.Duration("drain-timeout", 30*time.Second, "after Ctrl-C, how long requests in flight may finish")
		logDir      = fs.String("log-dir", "", "write every finished episode to this run dir (curate build, stats and view read it); an existing one of the same tasks and options is appended to")
	)
	return func(ctx context.Context, c *cli.Call) error {
		if episode.MaxTurns < 1 || *maxEpisodes < 1 || *maxBody < 1 || *maxBatch < 1 || *parallel < 1 || *ttl <= 0 || episode.ExecTimeout <= 0 || *goldMiB < 1 || *maxStoreMiB < 1 {
			return cli.Usagef("--max-turns, --max-episodes, --max-store-mib, --max-body, --max-batch, --parallel, --gold-cache-mib, --ttl and --exec-timeout must be positive")
		}
		if *goldMiB > 1<<20 || *maxStoreMiB > 1<<20 {
			return cli.Usagef("--gold-cache-mib %d, --max-store-mib %d: want at most %d (1 TiB)", *goldMiB, *maxStoreMiB, 1<<20)
		}
		if *clientMiB < 0 || *clientMiB > *maxStoreMiB {
			return cli.Usagef("--max-client-store-mib %d: want 0 (half of --max-store-mib) up to --max-store-mib (%d)", *clientMiB, *maxStoreMiB)
		}
		if *perClient < 0 || *perClient > *maxEpisodes {
			return cli.Usagef("--max-episodes-per-client %d: want 0 (half of --max-episodes) up to --max-episodes (%d)", *perClient, *maxEpisodes)
		}
		if err := guard.Check(); err != nil {
			return err
		}
		w, mode, err := rw.Parse()
		if err != nil {
			return err
		}
		ts, conn, tok, err := ef.open(ctx, c, false)
		if err != nil {
			return err
		}
		defer ef.close(conn, c)
		logger := log.New(c.Stderr, "", log.LstdFlags)
		var runLog *rundir.Log
		if *logDir != "" {
			opts := episode.Options()
			runLog, err = rundir.OpenLog(*logDir, &rundir.Manifest{
				Format: rundir.RunFormat, Protocol: protocol.ProtocolVersion, Toolkit: buildinfo.Version(), Created: time.Now().UTC(),
				Tasks:    rundir.ManifestTasks{Spec: strings.Join(ef.tasks.Specs(), ","), Limit: ef.tasks.Limit, Count: len(ts), Digest: distill.TasksDigest(ts)},
				Teachers: []rundir.ManifestTeacher{{Name: env.LogTeacher, Spec: "distill env serve"}},
				Dialects: ef.dialects.List(), Samples: 1, MaxTurns: opts.MaxTurns, Caps: opts.Caps, ExecTimeout: opts.ExecTimeout,
			})
			if err != nil {
				return err
			}
			defer runLog.Close()
			for _, r := range runLog.Repairs() {
				fmt.Fprintf(c.Stderr, "%s: %s: %s\n", c.Name, *logDir, r)
			}
		}
		srv, err := env.New(env.Config{
			Tasks: ts, Dialects: ef.dialects.List(), Opener: conn, Weights: &w, RewardMode: mode, Subsets: &ef.subsets,
			Episode: episode.Options(), Tokenizer: encoderOf(tok),
			TTL: *ttl, MaxEpisodes: *maxEpisodes, MaxEpisodesPerClient: *perClient, MaxStoreBytes: *maxStoreMiB << 20, MaxClientStoreBytes: *clientMiB << 20, MaxBody: *maxBody, MaxBatch: *maxBatch, Parallel: *parallel,
			GoldCacheBytes: *goldMiB << 20, Logger: logger, Log: runLog,
		})
		if err != nil {
			return err
		}
		defer srv.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		g, err := guard.New(ln, c.Name, *maxBody, c.Stderr)
		if err != nil {
			ln.Close()
			return err
		}
		hs := g.Server(srv.Handler(), logger)
		fmt.Fprintf(c.Stderr, "%s: %s (%s), dialects %s, validation fraction %g (seed %d), weights %s, format penalty %g, reward mode %s, token ids %v, on http://%s/v1\n",
			c.Name, plural.Count(len(ts), "task"), strings.Join(ef.tasks.Specs(), ", "), ef.dialects, ef.subsets.ValFraction, ef.subsets.Seed, w, w.FormatPenalty, mode, tok != nil, ln.Addr())
		err = cli.Serve(ctx, hs, ln, *drain, func() {
			fmt.Fprintf(c.Stderr, "%s: shutting down (requests in flight may finish within %s)\n", c.Name, *drain)
		})
		if err != nil {
			return err
		}
		stored, live := srv.Episodes()
		fmt.Fprintf(c.Stderr, "%s: stopped; %s dropped (%d in play)\n", c.Name, plural.Count(stored, "episode"), live)
		return nil
	}
}

// loadChatMLTokenizer loads the tokenizer at path and checks it has the ChatML markers the
// student's chat template is made of.
func loadChatMLTokenizer(path string) (*tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	for _, special := range []string{"<|im_start|>", "<|im_end|>"} {
		if _, ok := tok.TokenID(special); !ok {
			return nil, fmt.Errorf("tokenizer %s has no %s token: not a ChatML (Qwen2) tokenizer", path, special)
		}
	}
	return tok, nil
}

// encoderOf is tok as the environment's encoder; nil (a nil interface, not a nil pointer)
// without one.
func encoderOf(tok *tokenizer.Tokenizer) turns.Encoder {
	if tok == nil {
		return nil
	}
	return tok
}
