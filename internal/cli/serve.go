package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
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
