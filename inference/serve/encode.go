package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// encodeChunk is how many bytes of a reply writeCompletion gathers before it writes them.
const encodeChunk = 64 << 10

// writeCompletion writes out, a non-streamed chat completion, as a 200 JSON reply, with choice
// i's logprobs those of choices[i] (as logprobs(asked, ids, choices[i].Vocab,
// choices[i].LogProbs) encodes them) in place of its Logprobs field. The log-probability entries, which may be tens of MB of JSON, are encoded a
// piece at a time into a buffer of encodeChunk bytes written as it fills, never the whole body
// at once: encoding/json builds a value's whole encoding before it writes a byte, and with the
// intermediate oai values a reply at MaxLogprobEntries took some 650 MB
// (TestLogprobsReplyStreamed). The bytes are those writeJSON writes for out with the choices'
// Logprobs filled (TestLogprobsEncodedAsBefore). Each entry's bytes and text are taken from the
// choice's Vocab as it is written (the choices hold ids and log-probabilities only). It returns the first write error (the client
// gone), after which it writes nothing more.
func writeCompletion(w http.ResponseWriter, out oai.Completion, asked, ids bool, choices []student.Choice) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	e := &encoder{w: w, buf: make([]byte, 0, encodeChunk+4096)}

	// The envelope, its choices left empty: every field but usage comes before choices.
	head, usage := out, out.Usage
	head.Choices, head.Usage = []oai.Choice{}, nil
	e.raw(marshalTrim(head, `[]}`))
	e.str(`[`)
	for i, c := range out.Choices {
		if i > 0 {
			e.str(`,`)
		}
		c.Logprobs = nil // omitted: the last field, written below
		e.raw(marshalTrim(c, `}`))
		e.str(`,"logprobs":`)
		if !asked || choices[i].LogProbs == nil {
			e.raw(nullLogprobs)
		} else {
			e.logprobs(ids, choices[i].Vocab, choices[i].LogProbs)
		}
		e.str(`}`)
	}
	e.str(`]`)
	if usage != nil {
		e.str(`,"usage":`)
		e.raw(marshalTrim(usage, ``))
	}
	e.str("}\n")
	e.flush()
	return e.err
}

// marshalTrim is v's JSON less its suffix (which it must end with).
func marshalTrim(v any, suffix string) []byte {
	b, err := json.Marshal(v)
	if err != nil || !bytes.HasSuffix(b, []byte(suffix)) { // no value writeCompletion passes can fail
		panic(fmt.Sprintf("serve: encoding %T: %v %.100q", v, err, b))
	}
	return b[:len(b)-len(suffix)]
}

// encoder appends a reply's JSON to buf and writes buf to w whenever it holds encodeChunk bytes.
type encoder struct {
	w   io.Writer
	buf []byte
	err error
}

func (e *encoder) str(s string) { e.buf = append(e.buf, s...); e.fill() }
func (e *encoder) raw(b []byte) { e.buf = append(e.buf, b...); e.fill() }
func (e *encoder) fill() {
	if len(e.buf) >= encodeChunk {
		e.flush()
	}
}
func (e *encoder) flush() {
	if e.err == nil && len(e.buf) > 0 {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

// logprobs writes entries, their tokens' bytes those v gives, as logprobs would encode them:
// an oai.Logprobs.
func (e *encoder) logprobs(ids bool, v student.Vocab, entries []student.TokenLogProb) {
	e.str(`{"content":[`)
	for i, t := range entries {
		if e.err != nil {
			return // the client is gone: stop encoding
		}
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.entry(t.ID, t.LogProb, v, ids)
		e.buf = append(e.buf, `,"top_logprobs":[`...)
		for j, a := range t.Top {
			if j > 0 {
				e.buf = append(e.buf, ',')
			}
			e.entry(a.ID, a.LogProb, v, ids)
			e.buf = append(e.buf, '}')
		}
		e.buf = append(e.buf, "]}"...)
		e.fill()
	}
	e.str(`],"refusal":null}`)
}

// entry appends the token, logprob and bytes fields of token id (its bytes those v gives) with
// log-probability lp, opening its object but leaving it open (oai.TokenLogprob and
// oai.TopLogprob differ in what follows).
func (e *encoder) entry(id int32, lp float32, v student.Vocab, ids bool) {
	tb := v.TokenBytes(int(id))
	b := append(e.buf, `{"token":`...)
	if ids {
		b = append(b, `"token_id:`...)
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, '"')
	} else {
		b = appendString(b, student.TokenText(tb))
	}
	b = append(b, `,"logprob":`...)
	b = appendFloat32(b, max(lp, minLogprob))
	b = append(b, `,"bytes":[`...)
	for k := range len(tb) {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(tb[k]), 10)
	}
	e.buf = append(b, ']')
}

// appendString appends s as encoding/json writes a string: quoted, with '"', '\\', control
// characters and, as it escapes HTML by default, '<', '>' and '&' escaped, and a byte outside
// UTF-8 as U+FFFD. The common token (printable ASCII needing no escape) is copied as it is; any
// other goes through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always encodes
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat32 appends f as encoding/json writes a float32 (ECMAScript's number format: the
// shortest decimal that reads back as f, in exponent form below 1e-6 and from 1e21, the
// exponent without leading zeros). max with minLogprob takes -Inf to -9999; a NaN, which JSON
// cannot carry either (json.Marshal fails on it), is written as minLogprob too.
func appendFloat32(b []byte, f float32) []byte {
	if math.IsNaN(float64(f)) {
		f = minLogprob
	}
	abs := math.Abs(float64(f))
	format := byte('f')
	if abs != 0 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, float64(f), format, -1, 32)
	if format == 'e' { // e-07 as e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
