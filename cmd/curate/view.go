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
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/sandbox"
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
	tasks := cli.AddTasks(fs, cli.TaskOptions{Repeat: true, Note: "the row pages run each row's gold SQL and final SQL on its task's database and show both results; without it they say why they are absent"})
	dsns := cli.AddDSNs(fs)
	execTimeout := fs.Duration("exec-timeout", episode.DefaultExecTimeout, "timeout of each SQL statement the row pages run (with --tasks)")
	return func(ctx context.Context, c *cli.Call) error {
		if err := guard.Check(); err != nil {
			return err
		}
		if *execTimeout <= 0 {
			return cli.Usagef("--exec-timeout %s: want a positive duration", *execTimeout)
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
		if len(tasks.Specs()) > 0 {
			conn, dialects, err := connectTasks(ctx, c, srv, tasks, dsns, *execTimeout)
			if err != nil {
				return err
			}
			defer cli.Disconnect(conn, dialects, c.Stderr, c.Name)
		}
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

// connectTasks loads the tasks of --tasks, connects to their databases in the dialects of the
// viewed rows that the flags reach (a file engine such as SQLite always, a server dialect with
// its DSN flag; a live dir without rows yet: every registered dialect) through the screened,
// bounded execution distill uses, checking first the databases of the tasks the rows indexed
// so far came from, and gives them to srv for the row pages' results (a row a live dir adds
// later opens its database when its page asks).
func connectTasks(ctx context.Context, c *cli.Call, srv *view.Server, tasks *cli.Tasks, dsns *cli.DSNs, timeout time.Duration) (*sandbox.Connector, []datasets.Dialect, error) {
	ts, err := tasks.Load()
	if err != nil {
		return nil, nil, err
	}
	reach := func(d datasets.Dialect) bool {
		x, ok := sandbox.Lookup(d)
		if !ok {
			return false
		}
		if x.Server() == nil {
			return true // a file engine: the databases are under --db-root
		}
		p := dsns.DSN[d]
		return p != nil && *p != ""
	}
	want := srv.Dialects()
	if len(want) == 0 {
		want = sandbox.Names()
	}
	var dialects, missed []datasets.Dialect
	for _, d := range want {
		if reach(d) {
			dialects = append(dialects, d)
		} else {
			missed = append(missed, d)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(c.Stderr, "%s: no DSN for the %v rows (--pg-dsn, --mysql-dsn): their pages show no results\n", c.Name, missed)
	}
	// Only the databases the rows use are checked: tasks loaded in part (distill load --limit)
	// serve the rows distilled from them.
	tasksIn := func(d datasets.Dialect) []datasets.Task { return srv.TasksOf(ts, d) }
	conn, err := dsns.ConnectFor(ctx, tasks.DBRoot, tasksIn, dialects, c.Stderr, c.Name)
	if err != nil {
		return nil, nil, err
	}
	srv.SetExecutor(view.Executor{Tasks: ts, Opener: conn, Dialects: dialects, Timeout: timeout})
	return conn, dialects, nil
}
