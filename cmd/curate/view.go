package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/view"
)

var viewCmd = &cli.Command{
	Name:    "view",
	Summary: "browse a dataset dir, a run dir (live) or eval dirs (compare) in a local web app",
	Args:    "PATH...",
	Help:    "PATH is a dataset dir, a run dir (read live while distill writes it) or eval dirs (two or more: the compare view).",
	Setup:   setupView,
}

func setupView(fs *flag.FlagSet) cli.Func {
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (loopback unless told otherwise; port 0 picks a free one)")
	tokPath := cli.AddTokenizer(fs, "for the loss-mask view")
	poll := fs.Duration("poll", 2*time.Second, "shortest period between re-reads of live run and eval dirs")
	guard := cli.AddGuard(fs, false)
	return func(ctx context.Context, c *cli.Call) error {
		if err := guard.Check(); err != nil {
			return err
		}
		var tok curate.Tokenizer
		var tokName string
		if p, err := cli.TokenizerPath(*tokPath); err == nil { // none: the mask view says so
			if tok, tokName, err = loadTokenizer(p); err != nil {
				return err
			}
		}
		began := time.Now()
		srv, err := view.Open(ctx, view.Options{Paths: c.Args, Tokenizer: tok, TokenizerName: tokName, Poll: *poll})
		if err != nil {
			return err
		}
		defer srv.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%s is in use (another curate view?); pick another --addr, e.g. 127.0.0.1:0 for any free port", *addr)
			}
			return fmt.Errorf("listen on %s: %w", *addr, err)
		}
		host := ln.Addr().String()
		g, err := guard.New(ln, c.Name, 0, c.Stderr)
		if err != nil {
			ln.Close()
			return err
		}
		if tok == nil {
			fmt.Fprintf(c.Stderr, "%s: no tokenizer (--tokenizer or $%s): the loss-mask view is off\n", c.Name, cli.TokenizerEnv)
		}
		fmt.Fprintf(c.Stdout, "%s: %d rows of %s %v indexed in %s; serving http://%s/\n",
			c.Name, srv.Rows(), srv.Kind(), c.Args, time.Since(began).Round(time.Millisecond), host)
		hs := g.Server(srv.Handler(), nil)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go srv.Watch(wctx)
		return cli.Serve(ctx, hs, ln, 5*time.Second, nil)
	}
}
