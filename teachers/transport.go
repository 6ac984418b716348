package teachers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// sendPlain sends a non-streaming request and folds the response into a. go-openai decodes and
// validates the body; the doer kept it, and it is decoded once more here for the fields
// go-openai does not know (see wire.go).
func (c *Client) sendPlain(ctx context.Context, req *openai.ChatCompletionRequest, cp *capture, a *assembly) error {
	if _, err := c.oc.CreateChatCompletion(ctx, *req); err != nil {
		return err
	}
	var w oai.Completion
	if err := json.Unmarshal(cp.body, &w); err != nil {
		return &errDecode{err}
	}
	a.add(&w)
	return nil
}

// captureKey is the context key of an attempt's capture.
type captureKey struct{}

// capture carries data between Client.attempt and the doer for one request.
type capture struct {
	extra []byte // fields to merge into the request body
	// emptyContent: some message has empty content, which go-openai omits (omitempty); the doer
	// puts `"content":""` back, since servers refuse an assistant message without content.
	emptyContent bool
	// stream: the request streams; the doer hands the body over unread, watched for idleness
	// (idle) by a timer that ends the attempt through cancel.
	stream bool
	idle   time.Duration
	cancel context.CancelCauseFunc
	status int
	header http.Header
	body   []byte
	// bodyRead: a complete 2xx body was read; plainJSON: a stream request got one anyway.
	bodyRead, plainJSON bool
}

var roleOnly = regexp.MustCompile(`\{"role":"([a-z_]+)"\}`)

// doer is the HTTP layer under go-openai. go-openai v1.43 cannot add arbitrary fields to a chat
// request (its extra-body option is internal and only applies to map bodies; Temperature is a
// float32 with omitempty, so 0 and exact values cannot be sent), does not expose the response
// fields of reasoning models (see wire.go), drops response headers on errors, and has no idle
// timeout for streams. The doer therefore splices pre-encoded fields into the request JSON,
// keeps status and headers, reads a plain response's whole body within the attempt's deadline
// and keeps it, and hands a stream's body over behind an idle timer and a size limit.
type doer struct{ hc *http.Client }

// Do implements openai.HTTPDoer.
func (d *doer) Do(req *http.Request) (*http.Response, error) {
	cp, _ := req.Context().Value(captureKey{}).(*capture)
	if cp != nil && (len(cp.extra) > 0 || cp.emptyContent) && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		body = bytes.TrimRight(body, " \n")
		if len(body) < 2 || body[len(body)-1] != '}' {
			return nil, fmt.Errorf("request body is not a JSON object")
		}
		if cp.emptyContent {
			// A message without content marshals as exactly {"role":"R"}; quotes inside JSON
			// strings are escaped, so this pattern can only be such a message.
			body = roleOnly.ReplaceAll(body, []byte(`{"role":"$1","content":""}`))
		}
		merged := body
		if len(cp.extra) > 0 {
			merged = make([]byte, 0, len(body)+len(cp.extra)+1)
			merged = append(merged, body[:len(body)-1]...)
			merged = append(merged, ',')
			merged = append(merged, cp.extra...)
			merged = append(merged, '}')
		}
		req.Body = io.NopCloser(bytes.NewReader(merged))
		req.ContentLength = int64(len(merged))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(merged)), nil }
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if cp != nil {
		cp.status, cp.header = resp.StatusCode, resp.Header
		if cp.stream && ok && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			resp.Body = newIdleBody(resp.Body, cp.idle, func() { cp.cancel(errStreamIdle) })
			return resp, nil
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the response body (HTTP %d): %w", resp.StatusCode, err)
	}
	if len(body) > maxResponseBytes {
		body = body[:maxResponseBytes] // decoding fails: reported as malformed
	}
	if cp != nil {
		cp.body, cp.bodyRead = body, ok
		if cp.stream && ok {
			cp.plainJSON = true
			body = nil // go-openai's stream reader sees an empty stream; sendStream decodes cp.body
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
