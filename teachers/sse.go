package teachers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// A streamed reply arrives as server-sent events (text/event-stream). Every provider puts one
// JSON chunk on each "data:" line, so each data line is read as one payload (the lines of an
// event are not joined); the stream ends at "data: [DONE]" or, without it, at the end of the
// body (the assembly then tells a finished reply from a cut one). Lines are trimmed; comment
// lines (": keep-alive", ": OPENROUTER PROCESSING"), blank lines and the other fields (event:,
// id:, retry:) carry nothing; a last line without its newline was cut in transit and is
// dropped. A payload {"error": {…}} without choices is an error event: vLLM and OpenRouter send
// one when generation fails after the 200.

// sseReader reads the data payloads of an event stream, the whole stream bounded by a size.
type sseReader struct {
	r     *bufio.Reader
	limit int64 // bytes the whole stream may have
	read  int64
	done  bool
}

// errStreamTooLong fails a stream longer than maxResponseBytes.
var errStreamTooLong = fmt.Errorf("the stream is longer than %d bytes", maxResponseBytes)

func newSSEReader(body io.Reader, limit int64) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(io.LimitReader(body, limit+1), 32<<10), limit: limit}
}

// next returns the next non-empty data payload; io.EOF at [DONE] or the end of the body, the
// transport's error on a failed read, errStreamTooLong past the limit.
func (s *sseReader) next() ([]byte, error) {
	if s.done {
		return nil, io.EOF
	}
	for {
		line, err := s.r.ReadBytes('\n')
		s.read += int64(len(line))
		if s.read > s.limit {
			return nil, errStreamTooLong
		}
		if err != nil {
			return nil, err // io.EOF: the end of the stream; a partial line is dropped
		}
		p, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
		if !ok {
			continue
		}
		p = bytes.TrimSpace(p)
		if string(p) == "[DONE]" {
			s.done = true
			return nil, io.EOF
		}
		if len(p) > 0 {
			return p, nil
		}
	}
}

// streamError is an error event inside a 200 stream; msg is its message, "" when it has none.
type streamError struct{ msg string }

func (e *streamError) Error() string {
	if e.msg == "" {
		return "an error event in the stream"
	}
	return "error event in the stream: " + e.msg
}

// readStream folds a streamed response's chunks into a, until [DONE] or the end of the body. A
// response that is one JSON completion although a stream was asked (the server ignored stream,
// or answered from a cache: Content-Type application/json) is read as that completion, its body
// kept in cp for the error object of a reply without choices.
func readStream(header http.Header, body io.Reader, cp *capture, a *assembly) error {
	if isJSON(header) {
		if err := readPlain(body, cp, a); err != nil {
			return err
		}
		a.finished = true
		return nil
	}
	r := newSSEReader(body, maxResponseBytes)
	for {
		p, err := r.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var ev struct {
			oai.Completion
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(p, &ev); err != nil {
			return &errDecode{err}
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" && ev.Choices == nil {
			msg, _ := errorObjectMessage(ev.Error)
			return &streamError{msg: msg}
		}
		a.add(&ev.Completion)
	}
}

// readPlain reads a whole response body within maxResponseBytes into cp.body and folds the
// completion it holds into a.
func readPlain(body io.Reader, cp *capture, a *assembly) error {
	b, err := readBody(body)
	if err != nil {
		return fmt.Errorf("reading the response body (HTTP %d): %w", cp.status, err)
	}
	cp.body = b
	var w oai.Completion
	if err := json.Unmarshal(b, &w); err != nil {
		return &errDecode{fmt.Errorf("the %d-byte body: %w", len(b), err)}
	}
	a.add(&w)
	return nil
}

// readBody reads a body up to maxResponseBytes; a longer one is cut there (its decoding fails:
// reported as malformed).
func readBody(body io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxResponseBytes+1))
	if len(b) > maxResponseBytes {
		b = b[:maxResponseBytes]
	}
	return b, err
}

// isJSON reports whether a response's Content-Type is application/json.
func isJSON(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "application/json")
}

// errStreamIdle is the cause an idle stream's attempt is cancelled with.
var errStreamIdle = errors.New("stream idle")

// idleBody is a stream's response body that calls onIdle (which cancels the attempt) when no
// byte arrives for d. Keep-alive comments count: they show the provider is alive, and the
// attempt's timeout bounds the whole wait.
type idleBody struct {
	rc io.ReadCloser
	t  *time.Timer
	d  time.Duration
}

func newIdleBody(rc io.ReadCloser, d time.Duration, onIdle func()) *idleBody {
	return &idleBody{rc: rc, d: d, t: time.AfterFunc(d, onIdle)}
}

// Read implements io.Reader.
func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
	}
	return n, err
}

// Close implements io.Closer.
func (b *idleBody) Close() error {
	b.t.Stop()
	return b.rc.Close()
}
