package sandbox

import (
	"context"
	"sync"
	"time"
)

// WaitClock adds up the time executions wait for execution slots, from what they tell
// ExecOptions.Waiting (its Tell), so that a caller can count their running time only: the env's
// shared gold against each request's limit, the judge's budget for a prediction and its gold.
// The zero value is ready; safe for concurrent use.
type WaitClock struct {
	mu     sync.Mutex
	since  time.Time // when the wait under way began; zero when none is
	waited time.Duration
}

// Tell is an execution's ExecOptions.Waiting.
func (c *WaitClock) Tell(waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case waiting && c.since.IsZero():
		c.since = time.Now()
	case !waiting && !c.since.IsZero():
		c.waited += time.Since(c.since)
		c.since = time.Time{}
	}
}

// Waited returns the time waited so far, a wait under way included, and whether one is.
func (c *WaitClock) Waited() (waited time.Duration, waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		return c.waited, false
	}
	return c.waited + time.Since(c.since), true
}

// WaitTeller tells an execution's ExecOptions.Waiting of the waits that happen only, so that an
// execution that finds its engine's slots and connections free tells nothing and its
// connection's setup is not taken off its running time: Start when the execution finds none
// free and blocks, End when that wait ends, once for each Start; Close ends a wait under way and
// tells nothing more. The engines' wait points take their units with Acquire; a wait deeper down
// (a dial in a full share) finds the execution's teller in its context (WithWaitTeller). Safe
// for concurrent use; a nil *WaitTeller tells nothing.
type WaitTeller struct {
	mu      sync.Mutex
	tell    func(bool)
	waiting bool
}

// NewWaitTeller returns the teller of an execution whose ExecOptions.Waiting is tell (nil:
// nobody is told).
func NewWaitTeller(tell func(bool)) *WaitTeller { return &WaitTeller{tell: tell} }

// Start tells the start of a wait, unless one is under way or the teller is closed.
func (w *WaitTeller) Start() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tell != nil && !w.waiting {
		w.waiting = true
		w.tell(true)
	}
}

// End tells the end of the wait under way, if any.
func (w *WaitTeller) End() { w.stop(false) }

// Close ends the wait under way, if any, and tells nothing more.
func (w *WaitTeller) Close() { w.stop(true) }

// stop ends a wait under way, and with closing tells nothing more.
func (w *WaitTeller) stop(closing bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting {
		w.waiting = false
		w.tell(false)
	}
	if closing {
		w.tell = nil
	}
}

// Acquire puts a unit into units, a semaphore of capacity units: a free one is taken at once,
// without telling and even past ctx's end (a tiny deadline); otherwise the wait for one is told
// (Start, then End once it ends, with a unit or without) and lasts until one is free or ctx ends,
// whose error it then returns.
func (w *WaitTeller) Acquire(ctx context.Context, units chan<- struct{}) error {
	select {
	case units <- struct{}{}:
		return nil
	default:
	}
	w.Start()
	defer w.End()
	select {
	case units <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitTellerKey carries an execution's WaitTeller in a context.
type waitTellerKey struct{}

// WithWaitTeller returns ctx carrying w, for the waits that happen below a call given ctx (a
// connector's or a dialer's: WaitTellerFrom).
func WithWaitTeller(ctx context.Context, w *WaitTeller) context.Context {
	return context.WithValue(ctx, waitTellerKey{}, w)
}

// WaitTellerFrom returns the WaitTeller ctx carries, or nil (which tells nothing).
func WaitTellerFrom(ctx context.Context) *WaitTeller {
	w, _ := ctx.Value(waitTellerKey{}).(*WaitTeller)
	return w
}
