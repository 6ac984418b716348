package teachers_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/teachers"
)

// TestFaultMixManyRequests drives 2000 distinct conversations through a 30% mix of every
// transient fault plus hangs: each call ends in a reply or an *Error with a reason, attempts are
// bounded, and the server saw no request the client did not make (no hidden duplicates).
func TestFaultMixManyRequests(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	kinds := append(append([]oaitest.Fault{}, oaitest.TransientFaults...), oaitest.Hang, oaitest.EmptyContent)
	srv := oaitest.NewServer(t, nil, oaitest.WithFaultRate(0.3, 2024, kinds...),
		oaitest.WithRetryAfter(0), oaitest.WithSlowDelay(time.Millisecond), oaitest.WithoutBodies())
	const maxRetries = 4
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
		e.MaxRetries = maxRetries
		e.MaxConcurrency = 64
		e.Timeout = 250 * time.Millisecond
	}))
	type outcome struct {
		attempts int
		reason   string
	}
	results := make([]outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("question %d", i)}}
			rep, err := c.Chat(context.Background(), msgs, chat.Options{})
			if err != nil {
				te, ok := err.(*teachers.Error)
				if !ok || te.Reason == "" {
					t.Errorf("call %d: error without a reason: %v", i, err)
					return
				}
				results[i] = outcome{te.Attempts, te.Reason}
				return
			}
			results[i] = outcome{rep.Attempts, ""}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	sent, failed := 0, map[string]int{}
	for i, r := range results {
		if r.attempts < 1 || r.attempts > maxRetries+1 {
			t.Fatalf("call %d: %d attempts", i, r.attempts)
		}
		sent += r.attempts
		if r.reason != "" {
			failed[r.reason]++
		}
	}
	st := c.Stats()
	// An attempt that timed out or lost its connection before the server had read the body is
	// not recorded there; nothing else may differ, and the server may never see more.
	lost := st.RetriesByReason[teachers.ReasonTimeout] + st.RetriesByReason[teachers.ReasonConnection] +
		st.FailuresByReason[teachers.ReasonTimeout] + st.FailuresByReason[teachers.ReasonConnection]
	if got := srv.Count(); got > sent || int64(sent-got) > lost {
		t.Fatalf("server saw %d requests, clients made %d (%d timeouts/connection faults)", got, sent, lost)
	}
	if int(st.Requests) != sent || int(st.Succeeded)+int(st.Failed) != n {
		t.Fatalf("stats %+v", st)
	}
	fc := srv.FaultCounts()
	keys := make([]string, 0, len(fc))
	for k := range fc {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	summary := ""
	for _, k := range keys {
		name := k
		if name == "" {
			name = "none"
		}
		summary += fmt.Sprintf(" %s=%d", name, fc[oaitest.Fault(k)])
	}
	t.Logf("%d calls, %d requests (%d seen by the server) in %v; succeeded %d, failed %v; retries %v; server faults:%s",
		n, sent, srv.Count(), wall.Round(time.Millisecond), st.Succeeded, failed, st.RetriesByReason, summary)
}
