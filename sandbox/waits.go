package sandbox

import (
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
