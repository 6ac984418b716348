package teachers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chainedsql/chainedsql/internal/textcap"
)

// capture holds what one attempt's exchange saw, for the reply and the fault classification.
type capture struct {
	// stream: the request streams; its body is read behind an idle timer (idle) that ends the
	// attempt through cancel.
	stream bool
	idle   time.Duration
	cancel context.CancelCauseFunc
	// limit bounds the bytes of an event stream (streamLimit; 0: maxResponseBytes).
	limit int64
	// status and header are the response's (0 and nil without a response).
	status int
	header http.Header
	// body is a plain response's body as the client decodes it (reduced: scan.go; each text
	// of the reply stands in it as its number), nil for an event stream.
	body []byte
	// meter holds the attempt's share of the reply budget, nil for none.
	meter *meter
	// connected and answered: the request got a connection to the endpoint, and the first
	// byte of a response came back on it (httptrace), for the message of an attempt that ran
	// out of time (Client.waited).
	connected, answered atomic.Bool
}

// statusError is a response with a failure status (below 200, or 400 and up); msg is the
// provider's error message, else its body (cut at 500 bytes), else the status line.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.msg) }

// exchange POSTs the encoded request body to {base_url}/chat/completions and folds the response
// into a: a plain body decoded as an internal/oai completion, or an event stream read by the
// SSE reader (sse.go) behind the idle timer. The headers are the ones OpenAI's clients send:
// Authorization: Bearer (when there is a key), Content-Type: application/json, and Accept:
// application/json, or for a stream Accept: text/event-stream, Cache-Control: no-cache and
// Connection: keep-alive. ctx bounds the whole exchange, reading the body included.
func (c *Client) exchange(ctx context.Context, body []byte, cp *capture, a *assembly) error {
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { cp.connected.Store(true) },
		GotFirstResponseByte: func() { cp.answered.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	h := req.Header
	if c.key != "" {
		h.Set("Authorization", "Bearer "+c.key)
	}
	h.Set("Content-Type", "application/json")
	if cp.stream {
		h.Set("Accept", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
	} else {
		h.Set("Accept", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	cp.status, cp.header = resp.StatusCode, resp.Header
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// A redirect sameOriginRepost does not follow.
		return &statusError{status: resp.StatusCode, msg: "the endpoint redirects to " +
			textcap.Cut(redactURL(resp.Header.Get("Location")), 500) + ", which is not followed"}
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		msg, err := readFailure(resp.Body, resp.Status, cp.meter)
		if err != nil {
			return fmt.Errorf("reading the response body (HTTP %d): %w", resp.StatusCode, err)
		}
		return &statusError{status: resp.StatusCode, msg: msg}
	}
	if !cp.stream {
		return readPlain(resp.Body, cp, a)
	}
	ib := newIdleBody(resp.Body, cp.idle, func() { cp.cancel(errStreamIdle) })
	defer ib.Close()
	return readStream(resp.Header, ib, cp, a)
}

// waited says, naming the endpoint's URL, what an attempt that ran out of time (when, "within
// 2m0s") had got from it: a silent server (one that took the connection and sent nothing)
// told apart from a slow reply and from no connection at all.
func (c *Client) waited(cp *capture, when string) string {
	u := redactURL(c.url)
	switch {
	case cp.status != 0:
		return fmt.Sprintf("%s answered HTTP %d but its reply was not complete %s", u, cp.status, when)
	case cp.answered.Load():
		return fmt.Sprintf("%s began to answer but sent no complete response headers %s", u, when)
	case cp.connected.Load():
		return fmt.Sprintf("%s took the connection and sent nothing %s: the server is silent (a busy one answers 429 or 503)", u, when)
	}
	return fmt.Sprintf("no connection to %s %s", u, when)
}

// sameOriginRepost is the client's redirect policy: a redirect is followed only when it sends
// the same request again (307, 308: the method and body kept) to the same scheme, host and port,
// at most 10 times; any other comes back as the 3xx it is, a failure (exchange). Go's default
// followed every redirect: it sent the Authorization header to any port of the same host name,
// over http from an https base URL too, and turned a 302 or 303 into a GET without the prompt,
// whose 200 would have been kept as the teacher's reply.
func sameOriginRepost(req *http.Request, via []*http.Request) error {
	first := via[0]
	if len(via) >= 10 || req.Method != first.Method || origin(req.URL) != origin(first.URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// origin is u's scheme, host name and port, the scheme's default port where u names none (so
// https://host and https://host:443 are one origin).
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// statusMessage is the message of a failure response: the provider's error message when the
// body has one, else the body itself (cut at 500 bytes), else the status line.
func statusMessage(status string, body []byte) string {
	if msg, ok := providerError(body); ok {
		return msg
	}
	return bodyMessage(status, body)
}

// bodyMessage is the message of a failure response without the provider's: its body (cut at
// 500 bytes), else the status line.
func bodyMessage(status string, body []byte) string {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	if msg == "" {
		msg = status
	}
	return msg
}
