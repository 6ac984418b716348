package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var serveCmd = &cli.Command{
	Name:    "serve",
	Summary: "serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models, /v1/weights)",
	Help: "Chat completions take n (up to --max-n choices), logprobs with top_logprobs (each token's log-probability under the distribution it was sampled from: " +
		"log-softmax of (logits + logit_bias) / temperature over the whole vocabulary, before top_k and top_p, as student rollout records them) and logit_bias. " +
		"POST /v1/weights {\"path\": DIR} reloads the weights from DIR (a trainer's save_pretrained directory of the same model) while serving: " +
		"they load fully first (a bad or mismatched checkpoint is refused and the old weights keep serving), requests running finish on the old weights, " +
		"which are released after the last of them; GET /v1/weights says which serve. " +
		"Ctrl-C stops taking requests, waits up to 30s for those in flight and exits 0; a second one kills at once.",
	Setup: setupServe,
}

func setupServe(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	id := fs.String("model-id", "", "model id in /v1/models and replies (default the model directory's name)")
	maxBatch := fs.Int("max-batch", 16, "most requests decoded together")
	cacheTokens := fs.Int("cache-tokens", 65536, "tokens of finished conversations' KV caches kept for prefix reuse (negative: none)")
	maxTokens := fs.Int("max-tokens", 2048, "default max_tokens of a reply")
	maxN := fs.Int("max-n", serve.DefaultMaxN, "most choices (n) one request may ask for")
	quiet := fs.Bool("quiet", false, "no request log on stderr")
	guard := cli.AddGuard(fs, true)
	return func(ctx context.Context, c *cli.Call) error {
		if err := mf.check(); err != nil {
			return err
		}
		if *maxBatch < 1 || *maxTokens < 1 || *maxN < 1 {
			return cli.Usagef("--max-batch, --max-tokens and --max-n must be at least 1")
		}
		if err := guard.Check(); err != nil {
			return err
		}
		opts := mf.options()
		opts.ModelID = *id
		opts.Sampling = student.Sampling{MaxTokens: *maxTokens}
		opts.Generate = generate.Config{MaxBatch: *maxBatch, CacheTokens: *cacheTokens}
		st, err := mf.open(opts)
		if err != nil {
			return err
		}
		sw := serve.NewSwap(st, mf.dir, func(_ context.Context, dir string, cur *student.Student) (*student.Student, error) {
			return cur.Successor(dir, opts)
		})
		defer sw.Close()
		return serveHTTP(ctx, c, *addr, guard, *quiet, st.ModelID(), func(logger *log.Logger) http.Handler { return serve.Handler(sw, logger, serve.Config{MaxN: *maxN}) })
	}
}

// serveHTTP serves handler(logger) on addr behind guard's checks until ctx ends (Ctrl-C), then
// waits up to 30s for requests in flight. logger writes the request log to stderr (nil when
// quiet).
func serveHTTP(ctx context.Context, c *cli.Call, addr string, guard *cli.Guard, quiet bool, model string, handler func(logger *log.Logger) http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var logger *log.Logger
	if !quiet {
		logger = log.New(c.Stderr, "", log.LstdFlags)
	}
	g, err := guard.New(ln, c.Name, serve.MaxBodyBytes, c.Stderr)
	if err != nil {
		ln.Close()
		return err
	}
	srv := g.Server(handler(logger), logger)
	fmt.Fprintf(c.Stderr, "%s: model %s on http://%s/v1\n", c.Name, model, ln.Addr())
	return cli.Serve(ctx, srv, ln, 30*time.Second, func() {
		fmt.Fprintf(c.Stderr, "%s: shutting down (waiting up to 30s for requests in flight)\n", c.Name)
	})
}
