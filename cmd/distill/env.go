package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/env"
	"github.com/chainedsql/chainedsql/rewards"
)

// specList is a repeatable --tasks flag.
type specList []string

func (l *specList) String() string { return strings.Join(*l, " ") }
func (l *specList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// runEnv runs "distill env serve": the protocol as an HTTP/JSON RL environment (docs/ENV.md).
func runEnv(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(stderr, "usage: distill env serve --tasks SPEC [--tasks SPEC ...] [--dialects sqlite,postgres,mysql] [DSN flags] [--addr 127.0.0.1:8090]")
		return 2
	}
	fs := flag.NewFlagSet("distill env serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := addDBFlags(fs)
	var specs specList
	fs.Var(&specs, "tasks", "tasks to serve: sample, bird:PATH, minidev:PATH, spider:PATH; repeat for several (e.g. train and dev); default sample")
	var (
		dialectList = fs.String("dialects", "sqlite", "comma-separated dialects served: sqlite, postgres, mysql (the first is the default)")
		addr        = fs.String("addr", "127.0.0.1:8090", "listen address")
		maxTurns    = fs.Int("max-turns", distill.DefaultMaxTurns, "turn budget per episode")
		execTimeout = fs.Duration("exec-timeout", distill.DefaultExecTimeout, "timeout of each SQL statement")
		obsRows     = fs.Int("obs-rows", distill.DefaultObsRows, "rows shown in an observation")
		obsCell     = fs.Int("obs-cell", distill.DefaultObsCellChars, "widest cell shown in an observation (characters)")
		weights     = fs.String("weights", rewards.DefaultWeights.String(), "weights of the rewards in \"total\" (names not listed weigh 0)")
		ttl         = fs.Duration("ttl", env.DefaultTTL, "drop an episode this long after its last step")
		maxEpisodes = fs.Int("max-episodes", env.DefaultMaxEpisodes, "most episodes kept in memory")
		maxBody     = fs.Int64("max-body", env.DefaultMaxBody, "largest request body in bytes")
		maxBatch    = fs.Int("max-batch", env.DefaultMaxBatch, "most steps in one batch-step request, completions in one score request")
		parallel    = fs.Int("parallel", env.DefaultParallel, "steps executing at once")
		drain       = fs.Duration("drain-timeout", 30*time.Second, "after Ctrl-C, how long requests in flight may finish")
	)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "distill env serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "distill env serve: %v\n", err)
		return 1
	}
	if len(specs) == 0 {
		specs = specList{"sample"}
	}
	if *maxTurns < 1 || *maxEpisodes < 1 || *maxBody < 1 || *maxBatch < 1 || *parallel < 1 || *ttl <= 0 || *execTimeout <= 0 {
		return fail(errors.New("--max-turns, --max-episodes, --max-body, --max-batch, --parallel, --ttl and --exec-timeout must be positive"))
	}
	w, err := rewards.ParseWeights(*weights)
	if err != nil {
		return fail(fmt.Errorf("--weights: %w", err))
	}
	dialects, err := parseDialects(*dialectList)
	if err != nil {
		return fail(err)
	}
	var tasks []datasets.Task
	for _, spec := range specs {
		ts, err := datasets.LoadTasks(spec, *db.root)
		if err != nil {
			return fail(fmt.Errorf("tasks %s: %w", spec, err))
		}
		tasks = append(tasks, ts...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := db.connect(ctx, tasks, dialects, stderr, "distill env serve")
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	logger := log.New(stderr, "", log.LstdFlags)
	srv, err := env.New(env.Config{
		Tasks: tasks, Dialects: dialects, Opener: conn, Weights: &w,
		Episode: distill.EpisodeOptions{MaxTurns: *maxTurns, ExecTimeout: *execTimeout, Caps: distill.ObsCaps{MaxRows: *obsRows, MaxCellChars: *obsCell}},
		TTL:     *ttl, MaxEpisodes: *maxEpisodes, MaxBody: *maxBody, MaxBatch: *maxBatch, Parallel: *parallel,
		Logger: logger,
	})
	if err != nil {
		return fail(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second, ErrorLog: logger}
	names := make([]string, len(dialects))
	for i, d := range dialects {
		names[i] = string(d)
	}
	fmt.Fprintf(stderr, "distill env serve: %d tasks (%s), dialects %s, weights %s, on http://%s/v1\n",
		len(tasks), strings.Join(specs, ", "), strings.Join(names, ","), w, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fail(err)
	case <-ctx.Done():
	}
	stop() // a second Ctrl-C kills at once
	fmt.Fprintf(stderr, "distill env serve: shutting down (requests in flight may finish within %s)\n", *drain)
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fail(fmt.Errorf("shutdown: %w", err))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	stored, live := srv.Episodes()
	fmt.Fprintf(stderr, "distill env serve: stopped; %d episodes dropped (%d in play)\n", stored, live)
	return 0
}
