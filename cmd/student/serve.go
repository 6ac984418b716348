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
	"time"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
)

func init() {
	register("serve", "serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models)", runServe)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, mf := newModelFlagSet("serve", stderr)
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	id := fs.String("model-id", "", "model id in /v1/models and replies (default the model directory's name)")
	maxBatch := fs.Int("max-batch", 16, "most requests decoded together")
	cacheTokens := fs.Int("cache-tokens", 65536, "tokens of finished conversations' KV caches kept for prefix reuse (negative: none)")
	maxTokens := fs.Int("max-tokens", 2048, "default max_tokens of a reply")
	quiet := fs.Bool("quiet", false, "no request log on stderr")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if err := mf.check("serve"); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *maxBatch < 1 || *maxTokens < 1 {
		fmt.Fprintln(stderr, "student serve: --max-batch and --max-tokens must be at least 1")
		return 2
	}
	opts := mf.options()
	opts.ModelID = *id
	opts.Sampling = student.Sampling{MaxTokens: *maxTokens}
	opts.Generate = generate.Config{MaxBatch: *maxBatch, CacheTokens: *cacheTokens}
	st, err := student.Open(mf.dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "student serve: %v\n", err)
		return 1
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "student serve: %v\n", err)
		return 1
	}
	var logger *log.Logger
	if !*quiet {
		logger = log.New(stderr, "", log.LstdFlags)
	}
	srv := &http.Server{Handler: serve.Handler(st, logger), ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(stderr, "student serve: model %s on http://%s/v1\n", st.ModelID(), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "student serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "student serve: shutting down (waiting up to 30s for requests in flight)")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "student serve: shutdown: %v\n", err)
		return 1
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "student serve: %v\n", err)
		return 1
	}
	return 0
}

// flagExit is the exit status for a flag parse error: 0 for -h, else 2.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
