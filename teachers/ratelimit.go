package teachers

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pacer holds requests back on what the provider's rate-limit headers say, before it has to
// answer 429: OpenAI's x-ratelimit-remaining-requests / -tokens with x-ratelimit-reset-requests /
// -tokens (also the unsuffixed x-ratelimit-remaining / x-ratelimit-reset some gateways send for
// requests). From a provider that sends such headers, a 429's Retry-After / retry-after-ms holds
// back every request of the client, not only the one that got it: its limit is the account's.
// Without them a 429 may be about that request alone (a gateway's concurrency cap, an injected
// fault), and only that request waits. Each response replaces what is known; requests sent
// since are counted against it, so concurrent requests do not all spend the last one. Once a
// reset time passes, the budget is assumed refilled until the next response says otherwise.
type pacer struct {
	mu           sync.Mutex
	seen         bool // the provider sent rate-limit headers
	reqLeft      int
	reqReset     time.Time // zero: nothing known
	tokLeft      int
	tokReset     time.Time
	blockedUntil time.Time // from a 429's Retry-After
}

// observe reads the rate-limit headers of a response received at now.
func (p *pacer) observe(h http.Header, now time.Time) {
	if h == nil {
		return
	}
	reqLeft, reqOK := headerInt(h, "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Remaining")
	reqReset, reqROK := headerReset(h, now, "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset")
	tokLeft, tokOK := headerInt(h, "X-Ratelimit-Remaining-Tokens")
	tokReset, tokROK := headerReset(h, now, "X-Ratelimit-Reset-Tokens")
	if !reqOK && !tokOK {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = true
	if reqOK && reqROK {
		p.reqLeft, p.reqReset = reqLeft, reqReset
	}
	if tokOK && tokROK {
		p.tokLeft, p.tokReset = tokLeft, tokReset
	}
}

// block holds every request back until t (a 429's Retry-After), when the provider sends
// rate-limit headers.
func (p *pacer) block(t time.Time) {
	p.mu.Lock()
	if p.seen && t.After(p.blockedUntil) {
		p.blockedUntil = t
	}
	p.mu.Unlock()
}

// wait returns when a request of about est tokens may go, and how long it waited; it counts
// the request against the known budget.
func (p *pacer) wait(ctx context.Context, est int) (time.Duration, error) {
	var waited time.Duration
	for {
		p.mu.Lock()
		now := time.Now()
		until := p.blockedUntil
		if !p.reqReset.IsZero() {
			if now.Before(p.reqReset) {
				if p.reqLeft <= 0 && p.reqReset.After(until) {
					until = p.reqReset
				}
			} else {
				p.reqReset = time.Time{}
			}
		}
		if !p.tokReset.IsZero() {
			if now.Before(p.tokReset) {
				if p.tokLeft < est && p.tokReset.After(until) {
					until = p.tokReset
				}
			} else {
				p.tokReset = time.Time{}
			}
		}
		if !now.Before(until) {
			if !p.reqReset.IsZero() {
				p.reqLeft--
			}
			if !p.tokReset.IsZero() {
				p.tokLeft -= est
			}
			p.mu.Unlock()
			return waited, nil
		}
		p.mu.Unlock()
		d := until.Sub(now)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return waited, ctx.Err()
		case <-t.C:
			waited += d
		}
	}
}

func headerInt(h http.Header, names ...string) (int, bool) {
	for _, n := range names {
		if v := strings.TrimSpace(h.Get(n)); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
				// Clamped first: a count past int's range converts to anything.
				return int(max(-1e12, min(f, 1e12))), true
			}
		}
	}
	return 0, false
}

// headerReset reads a reset time: a Go-style duration as OpenAI sends ("1s", "6m0s", "20ms"),
// or a number, which is seconds from now below 1e9, Unix seconds below 1e12 and Unix
// milliseconds above (OpenRouter). A reset later than maxServerWait from now is read as then.
func headerReset(h http.Header, now time.Time, names ...string) (time.Time, bool) {
	at, ok := parseReset(h, now, names...)
	if ok {
		if limit := now.Add(maxServerWait); at.After(limit) {
			at = limit
		}
	}
	return at, ok
}

// parseReset is headerReset's reading, not yet bounded.
func parseReset(h http.Header, now time.Time, names ...string) (time.Time, bool) {
	for _, n := range names {
		v := strings.TrimSpace(h.Get(n))
		if v == "" {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && !math.IsInf(f, 0) {
			switch {
			case f < 1e9:
				return now.Add(time.Duration(f * float64(time.Second))), true
			case f < 1e12:
				return time.Unix(int64(f), 0), true
			case f < 1e15:
				return time.UnixMilli(int64(f)), true
			}
			continue // past any date in Unix milliseconds: not a reset time
		}
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return now.Add(d), true
		}
	}
	return time.Time{}, false
}
