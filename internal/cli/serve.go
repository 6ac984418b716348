package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/internal/httpguard"
)

// Serve serves hs on ln until the server fails or ctx ends (Ctrl-C); then it calls stopping
// (when not nil) and shuts the server down, letting requests in flight finish within drain. A
// shutdown that completes is a nil error: stopping a server is how it ends.
func Serve(ctx context.Context, hs *http.Server, ln net.Listener, drain time.Duration, stopping func()) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if stopping != nil {
		stopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Guard is the flags --allow-host, --body-timeout and, for a server that takes one, --api-key:
// whom a server answers and how long it waits for a body (package httpguard).
type Guard struct {
	hosts       names
	keys        names
	apiKey      bool
	bodyTimeout time.Duration
}

// AddGuard defines --allow-host and --body-timeout on fs, and --api-key when apiKey is true.
func AddGuard(fs *flag.FlagSet, apiKey bool) *Guard {
	g := &Guard{hosts: names{what: "NAME"}, keys: names{what: "KEY", secret: true}, apiKey: apiKey}
	fs.Var(&g.hosts, "allow-host", "also answer requests whose Host is NAME, on any port (repeatable or comma-separated; * for any): by default only localhost and loopback addresses (127.0.0.0/8, [::1]) with the listening port are answered, so that no web page can drive the server")
	fs.DurationVar(&g.bodyTimeout, "body-timeout", httpguard.DefaultBodyTimeout, "longest wait for a request body (408 past it); request headers get "+httpguard.HeaderTimeout.String())
	if apiKey {
		fs.Var(&g.keys, "api-key", "require \"Authorization: Bearer KEY\" on every request (repeatable or comma-separated: each key is its own client; default $"+httpguard.KeyEnv+")")
	}
	return g
}

// Check refuses a --body-timeout that is not positive and an empty key in --api-key or
// $CHAINEDSQL_API_KEY, before the server opens anything.
func (g *Guard) Check() error {
	if g.bodyTimeout <= 0 {
		return Usagef("--body-timeout must be positive")
	}
	if g.apiKey && !g.keys.set {
		if v := os.Getenv(httpguard.KeyEnv); v != "" {
			g.keys.list = splitNames(v)
			if slices.Contains(g.keys.list, "") {
				return fmt.Errorf("$%s: an empty key in %d comma-separated ones", httpguard.KeyEnv, len(g.keys.list))
			}
		}
	}
	return nil
}

// New returns the guard of a server named name listening on ln, with the API keys of
// --api-key, else of $CHAINEDSQL_API_KEY (Check reads it). It writes a warning to stderr when
// ln is not on loopback: the names clients use must be allowed, and without a key anyone who
// reaches the port can use the server.
func (g *Guard) New(ln net.Listener, name string, maxBody int64, stderr io.Writer) (*httpguard.Guard, error) {
	if err := g.Check(); err != nil {
		return nil, err
	}
	hg, err := httpguard.New(ln.Addr(), httpguard.Options{Name: name, AllowHosts: g.hosts.list, APIKeys: g.keys.list, MaxBody: maxBody, BodyTimeout: g.bodyTimeout})
	if err != nil {
		return nil, Usage(err)
	}
	if !httpguard.Loopback(ln.Addr()) {
		if len(g.hosts.list) == 0 {
			fmt.Fprintf(stderr, "%s: listening on %s, which is not loopback, but answering only requests for localhost: add --allow-host NAME for each name clients use\n", name, ln.Addr())
		}
		switch {
		case !g.apiKey:
			fmt.Fprintf(stderr, "%s: listening on %s, which is not loopback: anyone who can reach it can read what it serves (there is no login)\n", name, ln.Addr())
		case !hg.Keys():
			fmt.Fprintf(stderr, "%s: listening on %s, which is not loopback, without an API key (--api-key or $%s): anyone who can reach it can use it\n", name, ln.Addr(), httpguard.KeyEnv)
		}
	}
	return hg, nil
}

// names is a repeatable, comma-separated list flag.
type names struct {
	list   []string
	set    bool
	secret bool
	what   string // the placeholder in -h
}

func (n *names) String() string {
	if n == nil || n.secret {
		return "" // a key never shows in -h
	}
	return strings.Join(n.list, ",")
}

func (n *names) placeholder() string { return n.what }

// Set adds the comma-separated names of v, refusing an empty one.
func (n *names) Set(v string) error {
	n.set = true
	for _, s := range splitNames(v) {
		if s == "" {
			return fmt.Errorf("empty %s in %q", strings.ToLower(n.what), v)
		}
		n.list = append(n.list, s)
	}
	return nil
}

// splitNames splits a comma-separated list, trimming spaces.
func splitNames(v string) []string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}
