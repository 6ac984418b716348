package teachers

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
)

// TestStatusMessage: a failure response's message is the provider's error message (a string or
// a list of strings), else its body cut at 500 bytes, else the status line.
func TestStatusMessage(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"message":"Rate limit reached","type":"rate_limit_exceeded","param":null,"code":null}}`, "Rate limit reached"},
		{`{"error":{"message":"bad","code":1211}}`, "bad"},
		{`{"error":{"message":["field a","field b"],"type":"invalid_request_error"}}`, "field a, field b"},
		{`{"error":{"message":""}}`, ""},
		{`{"error":{"code":500}}`, `{"error":{"code":500}}`},
		{`{"error":"model not found"}`, `{"error":"model not found"}`},
		{`{"detail":"Not Found"}` + "\n", `{"detail":"Not Found"}`},
		{"<html><body><h1>502 Bad Gateway</h1></body></html>\n", "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		{long, long[:500] + "…"},
		{"  \n", "503 Service Unavailable"},
	} {
		if got := statusMessage("503 Service Unavailable", []byte(tc.body)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.body, got, tc.want)
		}
	}
}

// silentListener takes connections and reads them, and never sends a byte back.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

// TestSilentServer: an endpoint that takes the connection and says nothing fails as a timeout
// naming its URL and saying it sent nothing, plain and streamed, and the caller's deadline
// passing while it is silent says so too (still canceled: the caller ended it); one that sent
// its headers and then stalled is told apart. Before, each was "no complete response within
// 300ms" (or "context deadline exceeded"), naming neither the endpoint nor what came back.
func TestSilentServer(t *testing.T) {
	silent := silentListener(t)
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"model":"m",`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(stalled.Close)
	for _, tc := range []struct {
		name, base string
		stream     bool
		deadline   bool // the caller's, shorter than the attempt's timeout
		reason     string
		says       string
	}{
		{"silent", silent, false, false, ReasonTimeout, "took the connection and sent nothing within the attempt's timeout (300ms): the server is silent"},
		{"silent stream", silent, true, false, ReasonTimeout, "took the connection and sent nothing within the attempt's timeout (300ms): the server is silent"},
		{"silent past the caller's deadline", silent, false, true, ReasonCanceled, "context deadline exceeded; http://" + strings.TrimPrefix(silent, "http://") + "/chat/completions took the connection and sent nothing by the caller's deadline"},
		{"stalled body", stalled.URL + "/v1", false, false, ReasonTimeout, "answered HTTP 200 but its reply was not complete within the attempt's timeout (300ms)"},
	} {
		timeout := 300 * time.Millisecond
		if tc.deadline {
			timeout = time.Minute
		}
		c, err := New(Endpoint{Name: "quiet", BaseURL: tc.base, Model: "m", Timeout: timeout, Stream: tc.stream})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if tc.deadline {
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
		start := time.Now()
		_, err = c.Chat(ctx, []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		cancel()
		c.Close()
		var te *Error
		if !errors.As(err, &te) || te.Reason != tc.reason || !strings.Contains(te.Message, redactURL(c.url)) || !strings.Contains(te.Message, tc.says) {
			t.Errorf("%s: %v, want %s saying %q", tc.name, err, tc.reason, tc.says)
		}
		if tc.deadline && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v is not context.DeadlineExceeded", tc.name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: returned after %v", tc.name, d)
		}
	}
}

// TestErrorsHideURLSecrets: a base URL that carries credentials (user:password, a key in its
// query) never shows them in an attempt's error, whatever ended it: no connection (Go's
// *url.Error names the whole request URL, the query and the user kept, only the password
// masked), a silent server past the attempt's timeout, the caller's deadline.
func TestErrorsHideURLSecrets(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	silent := strings.TrimPrefix(silentListener(t), "http://")
	secrets := []string{"alice", "pa55word", "qs3cret"}
	for _, tc := range []struct {
		name, host string
		deadline   bool
		reason     string
	}{
		{"no connection", refused, false, ReasonConnection},
		{"silent", silent, false, ReasonTimeout},
		{"silent past the caller's deadline", silent, true, ReasonCanceled},
	} {
		base := "http://alice:pa55word@" + strings.TrimSuffix(tc.host, "/v1") + "/v1?key=qs3cret"
		c, err := New(Endpoint{Name: "creds", BaseURL: base, Model: "m", Timeout: 300 * time.Millisecond, MaxRetries: 1,
			BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if tc.deadline {
			c.ep.Timeout = time.Minute
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
		_, err = c.Chat(ctx, []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		cancel()
		c.Close()
		var te *Error
		if !errors.As(err, &te) || te.Reason != tc.reason {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.reason)
			continue
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q shows %q from the base URL", tc.name, err, s)
			}
		}
		if !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: %q does not name the endpoint", tc.name, err)
		}
	}
}

// TestBaseURLQueryKept: a base URL with a query (Azure's api-version, a gateway's key) posts to
// its path's /chat/completions with that query, and an error names neither. Before, the path
// was appended to the query: the request went to /v1 with the query
// "api-version=2024-10-21/chat/completions".
func TestBaseURLQueryKept(t *testing.T) {
	type seen struct{ path, query string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.RawQuery}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"m","choices":[{"index":0,"message":{"content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{srv.URL + "/v1?api-version=2024-10-21", srv.URL + "/v1/?api-version=2024-10-21", srv.URL + "/v1/#frag"} {
		c, err := New(Endpoint{Name: "q", BaseURL: base, Model: "m", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		c.Close()
		want := seen{"/v1/chat/completions", ""}
		if strings.Contains(base, "?") {
			want.query = "api-version=2024-10-21"
		}
		if s := <-got; err != nil || rep.Content != "ok" || s != want {
			t.Errorf("%s: %v, %q; posted to %+v, want %+v", base, err, rep.Content, s, want)
		}
	}
}
