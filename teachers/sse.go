package teachers

import (
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
// body (the assembly then tells a finished reply from a cut one). A line ends at "\n" (a "\r"
// alone does not end one); a byte order mark that begins the stream is ignored, as the format
// and the official OpenAI client ignore it. Lines are trimmed; comment lines (": keep-alive",
// ": OPENROUTER PROCESSING"), blank lines and the other fields (event:, id:, retry:) carry
// nothing; a last line without its newline was cut in transit and is dropped. A payload {"error": {…}} without choices is an error event: vLLM and OpenRouter send
// one when generation fails after the 200.

// sseReader reads the data payloads of an event stream, the whole stream bounded by a size.
// Each payload is reduced as it is read (scan.go: the fields the client does not read are
// dropped), so neither a line nor a payload is ever held whole.
type sseReader struct {
	s    *src
	d    reducer
	done bool
}

// errStreamTooLong fails a stream longer than its limit (streamLimit).
var errStreamTooLong = errors.New("the stream is longer than its limit")

func newSSEReader(body io.Reader, limit int64, m *meter) *sseReader {
	s := newSrc(body, limit, true)
	return &sseReader{s: s, d: reducer{s: s, m: m}}
}

// next returns the next non-empty data payload, reduced under chunkShape (valid until the next
// call); io.EOF at [DONE] or the end of the body, the transport's error on a failed read,
// errStreamTooLong past the limit, an *errDecode for a payload that is not JSON, a
// *tooLongError (or the reply budget's error) for one past what a reply may hold.
func (r *sseReader) next() ([]byte, error) {
	if r.done {
		return nil, io.EOF
	}
	for {
		p, err := r.line()
		if p != nil || err != nil {
			return p, err
		}
	}
}

// line reads one line: its reduced payload, or nil for a line without one. A byte order mark
// that begins the stream is not part of its first line (the event-stream format ignores it).
func (r *sseReader) line() ([]byte, error) {
	s := r.s
	if s.n == 0 && s.has("\ufeff") {
		s.skip(len("\ufeff"))
	}
	s.lineSpace()
	if !s.has("data:") {
		return nil, r.end(nil)
	}
	s.skip(len("data:"))
	s.lineSpace()
	if c, ok := s.peek(); !ok || c == '\n' {
		return nil, r.end(nil) // an empty payload
	}
	if s.has("[DONE]") {
		s.skip(len("[DONE]"))
		s.lineSpace()
		if c, ok := s.peek(); !ok || c == '\n' {
			if err := r.end(nil); err != nil {
				return nil, err
			}
			r.done = true
			return nil, io.EOF
		}
		return nil, r.end(&errDecode{fmt.Errorf("byte %d: invalid character 'D' looking for beginning of value", s.n)})
	}
	r.d.reset()
	err := r.d.value(chunkShape, 0)
	var tl *tooLongError
	if errors.As(err, &tl) || errors.Is(err, errReplyBudget) {
		return nil, err // over what a reply may hold, whether or not its line ends
	}
	if err == nil {
		s.lineSpace()
		if c, ok := s.peek(); ok && c != '\n' {
			err = r.d.syntax("invalid character %q after top-level value", c)
		}
	}
	if errors.Is(err, errEnd) {
		err = &errDecode{fmt.Errorf("byte %d: unexpected end of the line", s.n)}
	}
	if err := r.end(err); err != nil {
		return nil, err
	}
	return r.d.out, nil
}

// end consumes the rest of the line and returns what ends it: errStreamTooLong past the limit;
// for a last line without its newline (cut in transit, dropped whatever it holds) the
// transport's error, else io.EOF; else err.
func (r *sseReader) end(err error) error {
	newline := r.s.endLine()
	switch {
	case r.s.over:
		return fmt.Errorf("%w, %d bytes (%d for each token the request allows, at least %d)",
			errStreamTooLong, r.s.limit, streamTokenBytes, maxResponseBytes)
	case !newline && r.s.err != nil:
		return r.s.err
	case !newline:
		return io.EOF
	}
	return err
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
// or answered from a cache: Content-Type application/json) is read as that completion, its
// reduced body kept in cp for the error object of a reply without choices.
func readStream(header http.Header, body io.Reader, cp *capture, a *assembly) error {
	if isJSON(header) {
		if err := readPlain(body, cp, a); err != nil {
			return err
		}
		a.finished = true
		return nil
	}
	limit := cp.limit
	if limit <= 0 {
		limit = maxResponseBytes
	}
	r := newSSEReader(body, limit, cp.meter)
	r.d.limit = a.limit
	for {
		p, err := r.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := foldChunk(p, &r.d, cp.meter, a); err != nil {
			return err
		}
		// What the chunk held is given back: between chunks a stream holds its texts.
		r.d.done()
	}
}

// foldChunk decodes a stream's chunk p, reduced by d, and folds it into a.
func foldChunk(p []byte, d *reducer, m *meter, a *assembly) error {
	if err := m.need(slotDecode, 2*len(p)+d.decoded); err != nil {
		return err
	}
	defer func() { _ = m.set(slotDecode, 0) }() // a fall: never refused
	var ev streamEvent
	if err := json.Unmarshal(p, &ev); err != nil {
		return &errDecode{err}
	}
	if ev.Error != nil && ev.Choices == nil {
		return &streamError{msg: ev.Error.msg}
	}
	return a.fold(&ev.Completion, d, m)
}

// readPlain reads a whole response body within maxResponseBytes, reduced under
// completionShape into cp.body, and folds the completion it holds into a.
func readPlain(body io.Reader, cp *capture, a *assembly) error {
	s := newSrc(body, maxResponseBytes, false)
	d := reducer{s: s, m: cp.meter, out: []byte{}, limit: a.limit}
	err := d.reduce(completionShape)
	cp.body = d.out // what was kept, a failure's too (its texts stand as their numbers)
	if err != nil {
		var de *errDecode
		var tl *tooLongError
		if errors.As(err, &de) || errors.As(err, &tl) || errors.Is(err, errReplyBudget) {
			return err
		}
		return fmt.Errorf("reading the response body (HTTP %d): %w", cp.status, err)
	}
	if err := foldCompletion(&d, cp.meter, a); err != nil {
		return err
	}
	// The texts are folded: their pieces are given back (the kept body stays, for the error
	// object of a reply without choices).
	d.heads, d.pieces = [textOuts][]byte{}, nil
	return cp.meter.set(slotPieces, 0)
}

// foldCompletion decodes a plain completion, reduced by d, and folds it into a.
func foldCompletion(d *reducer, m *meter, a *assembly) error {
	if err := m.need(slotDecode, 2*len(d.out)+d.decoded); err != nil {
		return err
	}
	defer func() { _ = m.set(slotDecode, 0) }() // a fall: never refused
	var w oai.Completion
	if err := json.Unmarshal(d.out, &w); err != nil {
		return &errDecode{fmt.Errorf("the %d-byte body: %w", d.s.n, err)}
	}
	return a.fold(&w, d, m)
}

// readFailure reads a failure response's body and returns its message (statusMessage): a body
// of up to failureHead bytes is read whole, as it is; a longer one is reduced under
// errorBodyShape, its first failureHead bytes kept for a message that is not the provider's.
// Without room in the reply budget the body is left unread: the status still tells the fault.
func readFailure(body io.Reader, status string, m *meter) (string, error) {
	if err := m.need(slotHead, failureHead); err != nil {
		return status + " (its body left unread: " + err.Error() + ")", nil
	}
	head := make([]byte, failureHead)
	n, err := io.ReadFull(body, head)
	head = head[:n]
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return statusMessage(status, head), nil
	}
	if err != nil {
		return "", err
	}
	s := newSrc(io.MultiReader(bytes.NewReader(head), body), maxResponseBytes, false)
	d := reducer{s: s, m: m}
	if err := d.reduce(errorBodyShape); err != nil {
		if s.err != nil {
			return "", s.err
		}
		return bodyMessage(status, head), nil
	}
	if msg, ok := providerError(d.out); ok {
		return msg, nil
	}
	return bodyMessage(status, head), nil
}

// failureHead is how much of a failure response's body is read as it is.
const failureHead = 64 << 10

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
