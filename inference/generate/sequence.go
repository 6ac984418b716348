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
	logprobs []float32     // with req.LogProbs: one per sampled token, the stop token included
	tops     [][]TokenProb // with req.TopLogProbs: one per entry of logprobs
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
	toks, err := s.NextTokens(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids, nil
}

// Token is a generated token and, when the request asked for them, its log-probability and
// the most likely tokens of its step (as Result.LogProbs and Result.TopLogProbs define them).
type Token struct {
	ID      int
	LogProb float32
	Top     []TokenProb
}

// NextTokens is Next with each token's log-probabilities (zero and nil unless the request
// asked for them). It shares Next's place in the output: a token either returns is not
// returned again by the other.
func (s *Sequence) NextTokens(ctx context.Context) ([]Token, error) {
	for {
		s.mu.Lock()
		if s.read < len(s.toks) {
			out := make([]Token, 0, len(s.toks)-s.read)
			for i := s.read; i < len(s.toks); i++ {
				t := Token{ID: s.toks[i]}
				if i < len(s.logprobs) {
					t.LogProb = s.logprobs[i]
				}
				if i < len(s.tops) {
					t.Top = s.tops[i]
				}
				out = append(out, t)
			}
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
		TopLogProbs:  s.tops,
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
