package distill

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestEarlyStop: only StopAfterSameErrors permanent failures in a row with one error, from a
// policy's first results, stop a run; a success, another error or a transient failure first
// clears the policy for good, and so does an answered request; each policy is counted on its own.
func TestEarlyStop(t *testing.T) {
	fail := func(perm string) pending {
		return pending{fail: &rundir.Failure{}, permanent: perm, hint: "fix it"}
	}
	ok := pending{tr: &rundir.Trajectory{}}
	for _, c := range []struct {
		name  string
		seq   []pending
		stops int // index of the result that stops, -1 for none
	}{
		{"same error", []pending{fail("400 x"), fail("400 x"), fail("400 x"), fail("400 x")}, StopAfterSameErrors - 1},
		{"success first", []pending{ok, fail("400 x"), fail("400 x"), fail("400 x")}, -1},
		{"success between", []pending{fail("400 x"), ok, fail("400 x"), fail("400 x"), fail("400 x")}, -1},
		{"two errors", []pending{fail("400 x"), fail("400 y"), fail("400 x"), fail("400 x")}, -1},
		{"transient first", []pending{fail(""), fail("400 x"), fail("400 x"), fail("400 x")}, -1},
	} {
		s := newEarlyStop()
		stopped := -1
		for i, p := range c.seq {
			if err := s.done("t", p); err != nil && stopped < 0 {
				stopped = i
				if !strings.Contains(err.Error(), "400 x") || !strings.Contains(err.Error(), "fix: fix it") {
					t.Errorf("%s: %v", c.name, err)
				}
			}
		}
		if stopped != c.stops {
			t.Errorf("%s: stopped at %d, want %d", c.name, stopped, c.stops)
		}
	}
	// An answered request, in an episode that has not finished, clears the policy.
	s := newEarlyStop()
	h := s.watch(&episode.PolicyHandle{Name: "t", Policy: chat.PolicyFunc(func(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
		return chat.Reply{Content: "<sql>SELECT 1</sql>"}, nil
	})})
	s.done("t", fail("401"))
	if _, err := h.Policy.Chat(context.Background(), nil, chat.Options{}); err != nil {
		t.Fatal(err)
	}
	for range StopAfterSameErrors {
		if err := s.done("t", fail("401")); err != nil {
			t.Fatalf("stopped after an answered request: %v", err)
		}
	}
	s = newEarlyStop()
	for range StopAfterSameErrors - 1 {
		s.done("a", fail("401"))
		s.done("b", fail("401"))
	}
	if s.done("a", fail("401")) == nil {
		t.Error("policy a not stopped: b's failures were counted with a's")
	}
}
