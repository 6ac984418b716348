package sandbox

import (
	"testing"
	"time"
)

// TestWaitClock: the waits told add up, a wait under way counts while it lasts, and a repeated
// Tell changes nothing.
func TestWaitClock(t *testing.T) {
	var c WaitClock
	if w, on := c.Waited(); w != 0 || on {
		t.Fatalf("a new clock: %s, %v", w, on)
	}
	c.Tell(true)
	c.Tell(true) // still the first wait
	time.Sleep(30 * time.Millisecond)
	if w, on := c.Waited(); w < 30*time.Millisecond || !on {
		t.Fatalf("during a wait: %s, %v; want at least 30ms, waiting", w, on)
	}
	c.Tell(false)
	c.Tell(false)
	first, on := c.Waited()
	if on || first < 30*time.Millisecond {
		t.Fatalf("after the wait: %s, %v", first, on)
	}
	time.Sleep(20 * time.Millisecond) // not a wait
	if w, _ := c.Waited(); w != first {
		t.Fatalf("time outside a wait counted: %s, want %s", w, first)
	}
	c.Tell(true)
	time.Sleep(10 * time.Millisecond)
	c.Tell(false)
	if w, _ := c.Waited(); w < first+10*time.Millisecond || w > first+200*time.Millisecond {
		t.Fatalf("two waits: %s, want about %s", w, first+10*time.Millisecond)
	}
}
