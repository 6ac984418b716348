package distill

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
)

// StopAfterSameErrors is how many failures in a row, from a policy's first episodes of a run
// and with the same permanent error, stop the run: a request refused for what it is (a 4xx
// other than 408 and 429: a bad key, a model id, a field the provider refuses) fails the same
// way for every key, and going on would only fill failures.jsonl one episode at a time.
//
// The results are counted in commit order (the order episodes finish), from the invocation's
// first committed result of the policy. Episodes run concurrently and the writer commits behind
// them, so by the third failure's commit more of the policy's episodes may have sent their
// request: more than StopAfterSameErrors requests, and failures committed in the same batch
// after the third are kept. The stop cancels the run's work: episodes in flight are abandoned,
// not written.
//
// A request of the policy that was answered, in any episode, finished or not, proves that the
// key and model work: the policy is never stopped after it. Failures commit as soon as their one
// request is refused while an answered episode commits only after all its turns, so without this
// a run whose provider refuses a few requests at random could stop on its first three.
const StopAfterSameErrors = 3

// permanent is a policy error that the same request would meet again (teachers.Error is one).
type permanent interface {
	Permanent() bool
}

// hinter says how to fix an error.
type hinter interface {
	Hint() string
}

// permanentText returns err's text when it is a permanent policy error, else "", and the fix
// it suggests.
func permanentText(err error) (text, hint string) {
	var p permanent
	if !errors.As(err, &p) || !p.Permanent() {
		return "", ""
	}
	var h hinter
	if errors.As(err, &h) {
		hint = h.Hint()
	}
	return err.Error(), hint
}

// earlyStop watches each policy's results in commit order until its first success: the
// StopAfterSameErrors-th permanent failure in a row with one error text stops the run, unless
// one of the policy's requests was answered.
type earlyStop struct {
	streak   map[string]int          // policy → permanent failures in a row with text[policy]
	text     map[string]string       // policy → the error of the streak
	clear    map[string]bool         // policies that had a success or another error: never stopped
	answered map[string]*atomic.Bool // policy → one of its requests was answered (see watch)
}

func newEarlyStop() *earlyStop {
	return &earlyStop{streak: map[string]int{}, text: map[string]string{}, clear: map[string]bool{}, answered: map[string]*atomic.Bool{}}
}

// watch returns a copy of p whose policy records each answered request for done. Call it for
// every policy before the run's episodes start.
func (s *earlyStop) watch(p *episode.PolicyHandle) *episode.PolicyHandle {
	ok := &atomic.Bool{}
	s.answered[p.Name] = ok
	w := *p
	w.Policy = watched{p.Policy, ok}
	return &w
}

// watchAll is watch of each of policies, in order.
func (s *earlyStop) watchAll(policies []*episode.PolicyHandle) []*episode.PolicyHandle {
	out := make([]*episode.PolicyHandle, len(policies))
	for i, p := range policies {
		out[i] = s.watch(p)
	}
	return out
}

// watched is a policy that sets ok when a request is answered. It is episode.TaskAware, so the
// policy a TaskAware policy returns for a task is watched too.
type watched struct {
	inner chat.Policy
	ok    *atomic.Bool
}

// Chat implements chat.Policy.
func (w watched) Chat(ctx context.Context, msgs []chat.Message, opts chat.Options) (chat.Reply, error) {
	r, err := w.inner.Chat(ctx, msgs, opts)
	if err == nil {
		w.ok.Store(true)
	}
	return r, err
}

// ForTask implements episode.TaskAware.
func (w watched) ForTask(t datasets.Task, d datasets.Dialect) (chat.Policy, error) {
	ta, ok := w.inner.(episode.TaskAware)
	if !ok {
		return w, nil
	}
	p, err := ta.ForTask(t, d)
	if err != nil {
		return nil, err
	}
	return watched{p, w.ok}, nil
}

// done records a committed result of policy: p.fail, or a trajectory. It returns the error
// that stops the run, or nil.
func (s *earlyStop) done(policy string, p pending) error {
	if s.clear[policy] {
		return nil
	}
	if a := s.answered[policy]; a != nil && a.Load() {
		s.clear[policy] = true
		return nil
	}
	if p.fail == nil || p.permanent == "" || (s.streak[policy] > 0 && s.text[policy] != p.permanent) {
		s.clear[policy] = true
		return nil
	}
	s.text[policy] = p.permanent
	s.streak[policy]++
	if s.streak[policy] < StopAfterSameErrors {
		return nil
	}
	msg := fmt.Sprintf("%s: the first %d episodes all failed with the same error, which every request will meet; stopping (what was written is kept): %s",
		policy, s.streak[policy], p.permanent)
	if p.hint != "" {
		msg += "; fix: " + p.hint
	}
	return errors.New(msg + "; then rerun with --retry-failed (distill) or into a new --out (student eval) to redo the failed keys")
}
