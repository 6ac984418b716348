package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/view"
)

func cmdView(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("curate view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (loopback unless told otherwise; port 0 picks a free one)")
	tokPath := fs.String("tokenizer", "", "tokenizer.json or its directory, for the loss-mask view (default $"+TokenizerEnv+", else ../shared/tokenizer/qwen2.5 when present)")
	poll := fs.Duration("poll", 2*time.Second, "shortest period between re-reads of live run and eval dirs")
	paths, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return errors.New("view: no PATH given (a dataset dir, a run dir, or eval dirs)")
	}
	var tok curate.Tokenizer
	var tokName string
	if *tokPath != "" || defaultTokenizer() != "" {
		if tok, tokName, err = loadTokenizer(*tokPath); err != nil {
			return fmt.Errorf("view: %w", err)
		}
	}
	began := time.Now()
	srv, err := view.Open(ctx, view.Options{Paths: paths, Tokenizer: tok, TokenizerName: tokName, Poll: *poll})
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("view: %s is in use (another curate view?); pick another --addr, e.g. 127.0.0.1:0 for any free port", *addr)
		}
		return fmt.Errorf("view: listen on %s: %w", *addr, err)
	}
	host := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(stderr, "curate view: listening on %s, which is not loopback: anyone who can reach it can read the data (there is no login)\n", host)
	}
	if tok == nil {
		fmt.Fprintf(stderr, "curate view: no tokenizer (--tokenizer or $%s): the loss-mask view is off\n", TokenizerEnv)
	}
	fmt.Fprintf(stdout, "curate view: %d rows of %s %v indexed in %s; serving http://%s/\n",
		srv.Rows(), srv.Kind(), paths, time.Since(began).Round(time.Millisecond), host)
	hs := &http.Server{Handler: srv.Handler(host), ReadHeaderTimeout: 10 * time.Second}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Watch(wctx)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("view: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	hs.Shutdown(sctx)
	return nil
}
