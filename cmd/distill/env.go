package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/env"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/rewards"
)

var envCmd = &cli.Command{
	Name:     "env",
	Summary:  "the protocol as an HTTP/JSON RL environment (docs/ENV.md)",
	Commands: []*cli.Command{envServeCmd},
}

var envServeCmd = &cli.Command{
	Name:    "serve",
	Summary: "serve the protocol as an HTTP/JSON RL environment: episodes, steps, rewards (docs/ENV.md)",
	Help:    "Ctrl-C stops taking requests, lets those in flight finish within --drain-timeout and exits 0; a second one kills at once.",
	Setup:   setupEnvServe,
}

func setupEnvServe(fs *flag.FlagSet) cli.Func {
	tasks := cli.AddTasks(fs, cli.TaskOptions{Default: "sample", Repeat: true, Note: "served"})
	dsns := cli.AddDSNs(fs)
	dialects := cli.AddDialects(fs, "served; the first is the default")
	episode := cli.AddEpisode(fs, true)
	var (
		addr        = fs.String("addr", "127.0.0.1:8090", "listen address")
		weights     = fs.String("weights", rewards.DefaultWeights.String(), "weights of the rewards in \"total\" (names not listed weigh 0)")
		penalty     = fs.Float64("format-penalty", 0, "subtracted from \"total\" once per malformed reply")
		rewardMode  = fs.String("reward-mode", string(rewards.ModeFinal), "how an episode's total is spread over its steps: final (all on the last) or delta (each step's change; they sum to the final reward)")
		ttl         = fs.Duration("ttl", env.DefaultTTL, "drop an episode this long after its last step")
		maxEpisodes = fs.Int("max-episodes", env.DefaultMaxEpisodes, "most episodes kept in memory")
		maxBody     = fs.Int64("max-body", env.DefaultMaxBody, "largest request body in bytes")
		maxBatch    = fs.Int("max-batch", env.DefaultMaxBatch, "most steps in one batch-step request, completions in one score request")
		parallel    = fs.Int("parallel", env.DefaultParallel, "steps executing at once")
		drain       = fs.Duration("drain-timeout", 30*time.Second, "after Ctrl-C, how long requests in flight may finish")
	)
	return func(ctx context.Context, c *cli.Call) error {
		if episode.MaxTurns < 1 || *maxEpisodes < 1 || *maxBody < 1 || *maxBatch < 1 || *parallel < 1 || *ttl <= 0 || episode.ExecTimeout <= 0 {
			return cli.Usagef("--max-turns, --max-episodes, --max-body, --max-batch, --parallel, --ttl and --exec-timeout must be positive")
		}
		w, err := rewards.ParseWeights(*weights)
		if err != nil {
			return cli.Usagef("--weights: %v", err)
		}
		if math.IsNaN(*penalty) || math.IsInf(*penalty, 0) {
			return cli.Usagef("--format-penalty must be a finite number")
		}
		w.FormatPenalty = *penalty
		mode, err := rewards.ParseMode(*rewardMode)
		if err != nil {
			return cli.Usagef("--reward-mode: %v", err)
		}
		if err := dsns.Check(dialects.List()); err != nil {
			return err
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects.List(), c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer conn.Close()
		logger := log.New(c.Stderr, "", log.LstdFlags)
		srv, err := env.New(env.Config{
			Tasks: ts, Dialects: dialects.List(), Opener: conn, Weights: &w, RewardMode: mode,
			Episode: episode.Options(),
			TTL:     *ttl, MaxEpisodes: *maxEpisodes, MaxBody: *maxBody, MaxBatch: *maxBatch, Parallel: *parallel,
			Logger: logger,
		})
		if err != nil {
			return err
		}
		defer srv.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second, ErrorLog: logger}
		fmt.Fprintf(c.Stderr, "%s: %d tasks (%s), dialects %s, weights %s, format penalty %g, reward mode %s, on http://%s/v1\n",
			c.Name, len(ts), strings.Join(tasks.Specs(), ", "), dialects, w, w.FormatPenalty, mode, ln.Addr())
		err = cli.Serve(ctx, hs, ln, *drain, func() {
			fmt.Fprintf(c.Stderr, "%s: shutting down (requests in flight may finish within %s)\n", c.Name, *drain)
		})
		if err != nil {
			return err
		}
		stored, live := srv.Episodes()
		fmt.Fprintf(c.Stderr, "%s: stopped; %d episodes dropped (%d in play)\n", c.Name, stored, live)
		return nil
	}
}
