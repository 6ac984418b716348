package teachers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// hostileOK is a whole completion whose reply distill would keep.
const hostileOK = `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"<sql>SELECT 1</sql>"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`

// hostileServer answers each request with first(n), n counting from 1.
func hostileServer(t *testing.T, first func(w http.ResponseWriter, n int64)) *httptest.Server {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first(w, n.Add(1))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hostileClient is a client of srv with fast backoff and no deadline from its caller, as distill
// calls it.
func hostileClient(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	c, err := New(Endpoint{Name: "hostile", BaseURL: srv.URL, Model: "m", MaxConcurrency: 2, MaxRetries: 2,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// chatWithin runs c.Chat with a context without a deadline (distill's) and fails the test when it
// has not returned within d.
func chatWithin(t *testing.T, c *Client, d time.Duration) (chat.Reply, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep chat.Reply
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		rep, err := c.Chat(ctx, []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		return r.rep, r.err
	case <-time.After(d):
		cancel()
		<-done
		t.Fatalf("Chat still waiting after %v (the provider's wait is not bounded)", time.Since(start).Round(time.Millisecond))
		return chat.Reply{}, nil
	}
}

// TestHostileWaitsBounded: a provider's Retry-After, retry-after-ms or rate-limit reset time
// asking for years (or past time.Duration's range) is honoured for maxServerWait at most. Before
// the bound, a 429 with "Retry-After: 31536000" held distill's call (no deadline) for a year:
// measured through the built binaries, one request and then nothing until SIGINT; a 200 with
// x-ratelimit-remaining-requests 0 and a reset 99999999 s away held every later request.
func TestHostileWaitsBounded(t *testing.T) {
	old := maxServerWait
	maxServerWait = 200 * time.Millisecond
	t.Cleanup(func() { maxServerWait = old })

	farDate := time.Now().AddDate(50, 0, 0).UTC().Format(http.TimeFormat)
	refusals := []struct {
		name   string
		status int
		header map[string]string
	}{
		{"429 Retry-After a year", 429, map[string]string{"Retry-After": "31536000"}},
		{"503 Retry-After past Duration", 503, map[string]string{"Retry-After": "1e12"}},
		{"429 Retry-After a date in 50 years", 429, map[string]string{"Retry-After": farDate}},
		{"429 retry-after-ms a century", 429, map[string]string{"Retry-After-Ms": "3.2e12"}},
		{"429 Retry-After a year with rate-limit headers", 429, map[string]string{"Retry-After": "31536000",
			"X-Ratelimit-Remaining-Requests": "5", "X-Ratelimit-Reset-Requests": "1s"}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
				if n == 1 {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tc.status)
					fmt.Fprint(w, `{"error":{"message":"slow down"}}`)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, hostileOK)
			})
			c := hostileClient(t, srv)
			for range 2 { // the second call meets what the first left in the pacer
				if rep, err := chatWithin(t, c, 5*time.Second); err != nil || rep.Content == "" {
					t.Fatalf("reply %q, error %v", rep.Content, err)
				}
			}
		})
	}

	// Rate-limit headers saying nothing is left until years from now (seconds, Unix seconds,
	// a Go duration of 2,500,000 hours): the next request waits maxServerWait at most.
	for _, reset := range []string{"99999999", "999999999999", "2500000h"} {
		t.Run("reset "+reset, func(t *testing.T) {
			srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
				w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
				w.Header().Set("X-Ratelimit-Reset-Requests", reset)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, hostileOK)
			})
			c := hostileClient(t, srv)
			for range 3 {
				if _, err := chatWithin(t, c, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestHostileRemainingOverflow: a remaining count past int's range ("1e300") means plenty left,
// never nothing left (before, the conversion wrapped it to the lowest int).
func TestHostileRemainingOverflow(t *testing.T) {
	h := http.Header{}
	h.Set("X-Ratelimit-Remaining-Requests", "1e300")
	if n, ok := headerInt(h, "X-Ratelimit-Remaining-Requests"); !ok || n <= 0 {
		t.Fatalf("remaining 1e300 read as %d", n)
	}
}

// hostileMessage sets HOSTILE_TEST_KEY to key and returns a provider's error message with the
// key straddling textcap.Error (a cut before redaction would keep its first bytes) and more
// bytes after it, and a failure body carrying it.
func hostileMessage(t *testing.T, more int) (key, msg, body string) {
	key = "sk-hostile-0123456789abcdef"
	t.Setenv("HOSTILE_TEST_KEY", key)
	msg = strings.Repeat("E", textcap.Error-40) + key + strings.Repeat("E", more)
	return key, msg, fmt.Sprintf(`{"error":{"message":%q}}`, msg)
}

// TestHostileErrorMessageBounded: a provider's error message is cut at textcap.Error in the
// *Error, after the key is redacted (so no prefix of a key straddling the cut survives). Before,
// a 400 whose error.message was 60 MiB came back whole: distill's early stop printed 62,915,178
// bytes on stderr.
func TestHostileErrorMessageBounded(t *testing.T) {
	key, _, body := hostileMessage(t, 4<<20)
	for _, tc := range []struct {
		name   string
		stream bool
		reply  func(w http.ResponseWriter)
	}{
		{"400", false, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			fmt.Fprint(w, body)
		}},
		{"500", false, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			fmt.Fprint(w, body)
		}},
		{"stream error event", true, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", body)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := hostileServer(t, func(w http.ResponseWriter, n int64) { tc.reply(w) })
			c, err := New(Endpoint{Name: "hostile", BaseURL: srv.URL, Model: "m", APIKeyEnv: "HOSTILE_TEST_KEY",
				MaxConcurrency: 1, MaxRetries: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
				Timeout: 5 * time.Second, Stream: tc.stream})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if n := len(err.(*Error).Message); n > textcap.Error {
				t.Errorf("the message is %d bytes, over %d", n, textcap.Error)
			}
			if s := err.Error(); strings.Contains(s, key[:8]) {
				t.Errorf("a prefix of the key is in the error: %q", s[max(0, strings.Index(s, key[:8])-20):])
			}
		})
	}
}

// TestHostileErrorMessageHeldCut: an attempt's fault keeps a provider's error message already
// cut as the *Error shows it (redacted, then cut at textcap.Error), so a call waiting to retry
// (a 429 or 503 with a Retry-After of up to a minute, outside the concurrency slots and the
// reply budget: any number of callers wait at once) holds 16 KiB of it, not the message whole;
// the *Error that ends the call says the same as before. Before, each waiting call held the
// message as sent, up to the 4 MiB a reply keeps (3 MiB here).
func TestHostileErrorMessageHeldCut(t *testing.T) {
	key, msg, body := hostileMessage(t, 3<<20)
	for _, tc := range []struct {
		name   string
		stream bool
		status int
	}{{"429", false, 429}, {"503", false, 503}, {"stream error event", true, 200}} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			if tc.stream {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: %s\n\n", body)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.status)
			fmt.Fprint(w, body)
		})
		c, err := New(Endpoint{Name: "hostile", BaseURL: srv.URL, Model: "m", APIKeyEnv: "HOSTILE_TEST_KEY",
			MaxConcurrency: 1, MaxRetries: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
			Timeout: 5 * time.Second, Stream: tc.stream})
		if err != nil {
			t.Fatal(err)
		}
		req, est, f := c.request([]chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		if f != nil {
			t.Fatal(f.msg)
		}
		if _, f = c.attempt(context.Background(), req, est, maxResponseBytes, 0); f == nil || !f.retry || len(f.msg) > textcap.Error {
			n := -1
			if f != nil {
				n = len(f.msg)
			}
			t.Errorf("%s: the fault waiting for its retry holds a message of %d bytes, want at most %d", tc.name, n, textcap.Error)
		}
		_, err = c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		full := msg
		if tc.stream {
			full = (&streamError{msg: msg}).Error()
		}
		var e *Error
		if want := textcap.Cut(strings.ReplaceAll(full, key, "[redacted]"), textcap.Error); !errors.As(err, &e) || e.Message != want {
			t.Errorf("%s: the call's error %T is not the message cut as before", tc.name, err)
		}
		c.Close()
	}
}

// TestHostileRedirects: the client follows a redirect only when it repeats the request (307,
// 308) to the same scheme, host and port. Before, a 307 to another port of the same host got
// the request with its Authorization header (Go keeps it for the same host name), and a 302
// turned into a GET without the prompt whose 200 reply was kept as the teacher's.
func TestHostileRedirects(t *testing.T) {
	const key = "sk-redirect-secret"
	t.Setenv("HOSTILE_TEST_KEY", key)
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("another port got the key: %s %s", r.Method, r.URL)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, hostileOK)
	}))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions": // the redirect the case names
			switch r.URL.Query().Get("to") {
			case "other":
				http.Redirect(w, r, other.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
			case "get":
				http.Redirect(w, r, srv.URL+"/landing", http.StatusFound)
			case "same":
				http.Redirect(w, r, srv.URL+"/moved/chat/completions", http.StatusPermanentRedirect)
			}
		case "/landing": // a GET without the prompt, answered as if it had one
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, hostileOK)
		case "/moved/chat/completions":
			b, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+key || !strings.Contains(string(b), `"messages"`) {
				t.Errorf("the repeated request lost its method, key or body: %s, %d bytes", r.Method, len(b))
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, hostileOK)
		}
	}))
	defer srv.Close()
	chatTo := func(to string) (chat.Reply, error) {
		// The case rides on the query string, which a base URL cannot carry (the client appends
		// /chat/completions to it), so it is added to the client's URL.
		c, err := New(Endpoint{Name: "hostile", BaseURL: srv.URL + "/v1", Model: "m", APIKeyEnv: "HOSTILE_TEST_KEY",
			MaxConcurrency: 1, MaxRetries: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.url += "?to=" + to
		return c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
	}
	for _, to := range []string{"other", "get"} {
		rep, err := chatTo(to)
		var te *Error
		if err == nil || !errors.As(err, &te) {
			t.Fatalf("redirect %s: reply %q kept, error %v", to, rep.Content, err)
		}
		if !te.Permanent() || te.Status/100 != 3 || te.Attempts != 1 || !strings.Contains(te.Message, "redirects to") {
			t.Errorf("redirect %s: %+v", to, te)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other port got %d requests", n)
	}
	if rep, err := chatTo("same"); err != nil || rep.Content == "" {
		t.Fatalf("a 308 to the same origin: %q %v", rep.Content, err)
	}
}

// TestRedirectOrigin: a redirect's origin is compared with the scheme's default port filled in
// and names lower-cased, so https://host and https://HOST:443 are one origin, another port or
// scheme is not.
func TestRedirectOrigin(t *testing.T) {
	parse := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"https://api.example/v1", "https://API.example:443/v2", true},
		{"http://127.0.0.1/v1", "http://127.0.0.1:80/x", true},
		{"https://api.example/v1", "https://api.example:8443/v1", false},
		{"http://api.example/v1", "https://api.example/v1", false},
		{"https://api.example/v1", "https://other.example/v1", false},
	} {
		if got := origin(parse(c.a)) == origin(parse(c.b)); got != c.same {
			t.Errorf("%s and %s: same origin %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

// TestRetryAfterOn503: a 503's Retry-After, in seconds or as an HTTP date, is waited out before
// the retry (the backoff alone is at most 5 ms here), and a caller's deadline that the wait
// would pass ends the call at once with the 503 itself, from a net/http server.
func TestRetryAfterOn503(t *testing.T) {
	for _, after := range []string{"1", "date"} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			w.Header().Set("Content-Type", "application/json")
			if n%2 == 1 {
				w.Header().Set("Retry-After", after)
				if after == "date" { // whole seconds: 2 s from now is more than 1 s away
					w.Header().Set("Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"error":{"message":"overloaded"}}`)
				return
			}
			fmt.Fprint(w, hostileOK)
		})
		c := hostileClient(t, srv)
		start := time.Now()
		if rep, err := chatWithin(t, c, 10*time.Second); err != nil || rep.Attempts != 2 {
			t.Errorf("Retry-After %s: reply %+v, error %v", after, rep, err)
		} else if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("Retry-After %s: retried after %v", after, d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start = time.Now()
		_, err := c.Chat(ctx, []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		cancel()
		var te *Error
		if !errors.As(err, &te) || te.Reason != ReasonServer || te.Status != 503 || time.Since(start) > 300*time.Millisecond {
			t.Errorf("Retry-After %s past the caller's deadline: %v after %v, want the 503 at once", after, err, time.Since(start))
		}
	}
}

// TestHostileResponseHeadersBounded: a response's headers are read up to maxResponseHeader
// bytes, held by each attempt beside the reply budget: a reply whose headers run past it fails
// as a connection fault (retried), one with headers of half of it is read. Before, net/http's
// default let each attempt hold 10 MB of headers (a 2 MiB header was read).
func TestHostileResponseHeadersBounded(t *testing.T) {
	for _, tc := range []struct {
		pad  int
		fail bool
	}{{maxResponseHeader / 2, false}, {2 * maxResponseHeader, true}} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			w.Header().Set("X-Pad", strings.Repeat("p", tc.pad))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, hostileOK)
		})
		c := hostileClient(t, srv)
		_, err := chatWithin(t, c, 10*time.Second)
		if got := Reason(err) == ReasonConnection; got != tc.fail || (!tc.fail && err != nil) {
			t.Errorf("headers of %d bytes: %v (reason %q), want a connection fault %v", tc.pad, err, Reason(err), tc.fail)
		}
	}
}
