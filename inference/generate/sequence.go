package generate

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Sequence is a running request.
type Sequence struct {
	ctx     context.Context
	cancel  context.CancelFunc
	req     Request
	stops   []int
	sampler *sampler
	start   time.Time

	// Scheduler state.
	cache    lm.Cache
	capacity int
	fed      []int // tokens in cache
	todo     []int // tokens still to feed
	logits   []float32
	cached   int
	first    time.Time
	leader   *Sequence // a running request computing the prefix this one waits for
	waitFor  int       // the length of that prefix
	waited   bool

	mu       sync.Mutex
	toks     []int
	logprobs []float32 // with req.LogProbs: one per sampled token, the stop token included
	read     int
	ended    bool
	res      Result
	err      error
	notify   chan struct{}
	doneCh   chan struct{}
}

// Cancel ends the request early; Wait then returns context.Canceled.
func (s *Sequence) Cancel() { s.cancel() }

// Next blocks until the sequence has tokens not yet returned and returns them, or returns
// io.EOF once the sequence has ended and all its tokens were returned, or the request's error.
// ctx bounds only the wait.
func (s *Sequence) Next(ctx context.Context) ([]int, error) {
	for {
		s.mu.Lock()
		if s.read < len(s.toks) {
			out := append([]int(nil), s.toks[s.read:]...)
			s.read = len(s.toks)
			s.mu.Unlock()
			return out, nil
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Wait blocks until the sequence ends and returns its result.
func (s *Sequence) Wait() (Result, error) {
	<-s.doneCh
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.err
}

// Done is closed when the sequence has ended.
func (s *Sequence) Done() <-chan struct{} { return s.doneCh }

// isEnded reports whether s has ended.
func (s *Sequence) isEnded() bool {
	select {
	case <-s.doneCh:
		return true
	default:
		return false
	}
}

// emit appends tok to s's output and wakes a waiting Next.
func (s *Sequence) emit(tok int) {
	s.mu.Lock()
	s.toks = append(s.toks, tok)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// end finishes s with reason, stopID and err: it fills the Result, cancels s's context, wakes
// Next and closes Done.
func (s *Sequence) end(reason string, stopID int, err error) {
	s.mu.Lock()
	s.ended = true
	s.err = err
	s.res = Result{
		Tokens:       append([]int(nil), s.toks...),
		FinishReason: reason,
		StopID:       stopID,
		LogProbs:     s.logprobs,
		PromptTokens: len(s.req.Prompt),
		CachedTokens: s.cached,
		Duration:     time.Since(s.start),
	}
	if !s.first.IsZero() {
		s.res.TimeToFirstToken = s.first.Sub(s.start)
	}
	s.mu.Unlock()
	s.cancel()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	close(s.doneCh)
}
