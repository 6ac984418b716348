package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// TestWaitTeller: Acquire tells nothing when a unit is free (even past its context's end),
// tells true then false around a wait that a released unit or the context's end ends, and a
// closed or nil teller tells nothing; a teller travels in a context.
func TestWaitTeller(t *testing.T) {
	var mu sync.Mutex
	var told []bool
	log := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(told)
	}
	w := NewWaitTeller(func(b bool) {
		mu.Lock()
		told = append(told, b)
		mu.Unlock()
	})
	units := make(chan struct{}, 1)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Acquire(ended, units); err != nil || log() != "[]" {
		t.Fatalf("a free unit past the context's end: %v, told %s; want it taken, nothing told", err, log())
	}
	got := make(chan error, 1)
	go func() { got <- w.Acquire(context.Background(), units) }()
	time.Sleep(30 * time.Millisecond)
	if log() != "[true]" {
		t.Fatalf("while waiting for a unit: told %s, want [true]", log())
	}
	<-units
	if err := <-got; err != nil || log() != "[true false]" {
		t.Fatalf("after the unit came free: %v, told %s; want [true false]", err, log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Acquire(ctx, units); !errors.Is(err, context.DeadlineExceeded) || log() != "[true false true false]" {
		t.Fatalf("no unit by the deadline: %v, told %s; want the deadline, [true false true false]", err, log())
	}
	w.Start()
	w.Close()
	w.Start()
	w.End()
	if log() != "[true false true false true false]" {
		t.Fatalf("Close during a wait, then more: told %s; want the wait ended, nothing after", log())
	}
	if got := WaitTellerFrom(WithWaitTeller(context.Background(), w)); got != w {
		t.Errorf("WaitTellerFrom gave %p, want %p", got, w)
	}
	var none *WaitTeller
	if WaitTellerFrom(context.Background()) != none {
		t.Error("a context without a teller gave one")
	}
	none.Start()
	none.End()
	none.Close()
	if err := none.Acquire(ctx, make(chan struct{}, 1)); err != nil {
		t.Errorf("a nil teller's Acquire of a free unit: %v", err)
	}
}
