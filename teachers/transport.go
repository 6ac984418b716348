package teachers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// sendPlain sends cp's request, not streamed, and folds the response into a. go-openai decodes
// and validates the body; the doer kept it, and it is decoded once more here for the fields
// go-openai does not know (see wire.go).
func (c *Client) sendPlain(ctx context.Context, cp *capture, a *assembly) error {
	if _, err := c.oc.CreateChatCompletion(ctx, c.call()); err != nil {
		return err
	}
	var w oai.Completion
	if err := json.Unmarshal(cp.body, &w); err != nil {
		return &errDecode{err}
	}
	a.add(&w)
	return nil
}

// call is the go-openai request that carries an attempt through go-openai's client: only the
// model, which go-openai checks. The body sent is the capture's, which the doer puts in place of
// the one go-openai encodes.
func (c *Client) call() openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: c.ep.Model}
}

// captureKey is the context key of an attempt's capture.
type captureKey struct{}

// capture carries data between Client.attempt and the doer for one request.
type capture struct {
	// request is the request body to send (Client.request): an oai.Request with the provider's
	// fields appended.
	request []byte
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

// doer is the HTTP layer under go-openai. go-openai v1.43 cannot add arbitrary fields to a chat
// request (its extra-body option is internal and only applies to map bodies; Temperature is a
// float32 with omitempty, so 0 and exact values cannot be sent), omits empty message content,
// does not expose the response fields of reasoning models (see wire.go), drops response headers
// on errors, and has no idle timeout for streams. The doer therefore sends the capture's request
// body (internal/oai's Request with the provider's fields) in place of go-openai's, keeps status
// and headers, reads a plain response's whole body within the attempt's deadline and keeps it,
// and hands a stream's body over behind an idle timer and a size limit.
type doer struct{ hc *http.Client }

// Do implements openai.HTTPDoer.
func (d *doer) Do(req *http.Request) (*http.Response, error) {
	cp, _ := req.Context().Value(captureKey{}).(*capture)
	if cp != nil && cp.request != nil && req.Body != nil {
		req.Body.Close() // go-openai's encoding of the placeholder request (Client.call)
		body := cp.request
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
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
