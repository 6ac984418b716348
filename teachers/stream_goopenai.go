package teachers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// sendStream sends cp's streaming request through go-openai's stream API and folds every chunk
// into a. The chunks are read with RecvRaw and decoded here, since go-openai's delta type drops
// reasoning, reasoning_details and the usage extras (see wire.go). A server that answers a
// stream request with one JSON completion (ignoring stream) is read as that completion.
func (c *Client) sendStream(ctx context.Context, cp *capture, a *assembly) error {
	st, err := c.oc.CreateChatCompletionStream(ctx, c.call())
	if err != nil {
		return err
	}
	defer st.Close()
	if cp.plainJSON {
		var w oai.Completion
		if err := json.Unmarshal(cp.body, &w); err != nil {
			return &errDecode{err}
		}
		a.add(&w)
		a.finished = true
		return nil
	}
	for {
		raw, err := st.RecvRaw()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw == nil {
			// go-openai saw a `data: {"error": …}` event but could not decode it: it decodes
			// every non-data line of the stream so far together with the event, and keep-alive
			// comments (DeepSeek, OpenRouter) make that invalid JSON; it then returns (nil, nil).
			return errStreamEvent
		}
		if len(raw) == 0 {
			continue // an empty data line carries nothing
		}
		var w oai.Completion
		if err := json.Unmarshal(raw, &w); err != nil {
			return &errDecode{err}
		}
		a.add(&w)
	}
}

// errStreamIdle is the cause an idle stream's attempt is cancelled with.
var errStreamIdle = errors.New("stream idle")

// idleBody is a stream's response body that cancels the attempt when no byte arrives for d
// (keep-alive comments count: they show the provider is alive, and the attempt's timeout
// bounds the whole wait) and fails past maxResponseBytes.
type idleBody struct {
	rc io.ReadCloser
	t  *time.Timer
	d  time.Duration
	n  int64
}

func newIdleBody(rc io.ReadCloser, d time.Duration, onIdle func()) *idleBody {
	return &idleBody{rc: rc, d: d, t: time.AfterFunc(d, onIdle)}
}

// Read implements io.Reader.
func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
		b.n += int64(n)
		if b.n > maxResponseBytes {
			return n, fmt.Errorf("the stream is longer than %d bytes", maxResponseBytes)
		}
	}
	return n, err
}

// Close implements io.Closer.
func (b *idleBody) Close() error {
	b.t.Stop()
	return b.rc.Close()
}
