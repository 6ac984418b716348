package teachers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// fault is why one attempt did not produce an acceptable reply.
type fault struct {
	reason     string
	status     int
	msg        string
	retryAfter time.Duration
	retry      bool  // worth another attempt
	cause      error // context error, for canceled
	floor      int64 // the floor of the reply budget the next attempt takes (0: the budget's)
}

// backoff is the wait before retry number n (1-based): full jitter over an exponentially growing
// ceiling, but never shorter than the server's Retry-After.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	ceil := c.ep.BackoffMax
	if n-1 < 40 {
		if b := c.ep.BackoffBase << (n - 1); b > 0 && b < ceil {
			ceil = b
		}
	}
	var d time.Duration
	if ceil > 0 {
		d = time.Duration(rand.Int64N(int64(ceil) + 1))
	}
	return max(d, retryAfter)
}

func (c *Client) canceled(ctx context.Context, what string, err error) *fault {
	cause := ctx.Err()
	if cause == nil {
		// rate.Limiter refuses a wait that would pass the deadline before it happens.
		cause = context.DeadlineExceeded
	}
	return &fault{reason: ReasonCanceled, cause: cause, msg: fmt.Sprintf("%s: %v", what, err)}
}

// MaxServerWait is the longest a provider's word makes a request wait: a Retry-After or
// retry-after-ms, or an x-ratelimit reset time, asking for longer is honoured for this long (a
// retry then asks again, within max_retries). Without it a provider's "Retry-After: 31536000",
// or a reset time years away with nothing left, held the call (and, with rate-limit headers,
// every call of the client) for that long: distill has no deadline of its own on a call.
const MaxServerWait = 10 * time.Minute

// maxServerWait is MaxServerWait; tests shorten it.
var maxServerWait = MaxServerWait

// serverSeconds converts a provider's count of seconds to a wait within [0, maxServerWait];
// the conversion is done in floating point first, so a count past time.Duration's range waits
// maxServerWait instead of overflowing.
func serverSeconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	if s >= maxServerWait.Seconds() {
		return maxServerWait
	}
	return time.Duration(s * float64(time.Second))
}

// retryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or an HTTP date); 0 if absent,
// at most maxServerWait.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 {
			return serverSeconds(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return serverSeconds(s)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(0, time.Until(t)), maxServerWait)
	}
	return 0
}

// waitRetry waits before retrying attempt's fault f and returns nil, or returns the fault that
// ends the call: f itself when it is not worth a retry, the retries are spent or the caller's
// deadline would pass while waiting, a cancellation when the context ends during the wait.
func (c *Client) waitRetry(ctx context.Context, attempt int, f *fault) *fault {
	if !f.retry || attempt > c.ep.MaxRetries {
		return f
	}
	wait := c.backoff(attempt, f.retryAfter)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		// The caller's deadline would pass while waiting: report the fault itself.
		return f
	}
	c.mu.Lock()
	c.st.Retries++
	inc(&c.st.RetriesByReason, f.reason)
	c.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		t.Stop()
		return &fault{reason: ReasonCanceled, cause: ctx.Err(),
			msg: fmt.Sprintf("while waiting to retry after %s: %v", f.reason, ctx.Err())}
	case <-t.C:
		return nil
	}
}
