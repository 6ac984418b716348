package distill

import (
	"errors"
	"fmt"
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
// StopAfterSameErrors-th permanent failure in a row with one error text stops the run.
type earlyStop struct {
	streak map[string]int    // policy → permanent failures in a row with text[policy]
	text   map[string]string // policy → the error of the streak
	clear  map[string]bool   // policies that had a success or another error: never stopped
}

func newEarlyStop() *earlyStop {
	return &earlyStop{streak: map[string]int{}, text: map[string]string{}, clear: map[string]bool{}}
}

// done records a committed result of policy: p.fail, or a trajectory. It returns the error
// that stops the run, or nil.
func (s *earlyStop) done(policy string, p pending) error {
	if s.clear[policy] {
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
