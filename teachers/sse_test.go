package teachers

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// TestReadStream reads event streams and the bodies a stream request may get instead, line by
// line: what the reply assembles to, whether it finished, and how the read ends.
func TestReadStream(t *testing.T) {
	chunk := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return `data: {"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + "}]}\n\n"
	}
	hello := chunk(`{"role":"assistant","content":"hel"}`, "") + chunk(`{"content":"lo"}`, "") + chunk(`{}`, "stop")
	usage := `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n"
	sse := "text/event-stream"
	for _, tc := range []struct {
		name, ctype, body  string
		content, reasoning string
		finished           bool
		prompt             int    // usage.prompt_tokens read, 0 = none
		err                string // "" none; "decode", "event:<msg>", "transport"
	}{
		{name: "done", ctype: sse, body: hello + usage + "data: [DONE]\n\n", content: "hello", finished: true, prompt: 3},
		{name: "no space, CRLF", ctype: sse, body: strings.ReplaceAll(strings.ReplaceAll(hello, "data: ", "data:"), "\n", "\r\n") + "data:[DONE]\r\n\r\n", content: "hello", finished: true},
		{name: "comments, fields, blank lines", ctype: sse,
			body: ": keep-alive\n\n" + "event: message\nid: 1\nretry: 100\n" + chunk(`{"reasoning_content":"th"}`, "") + ": OPENROUTER PROCESSING\n\n\n" +
				chunk(`{"reasoning_content":"ink"}`, "") + hello + "   \n" + "data: [DONE]\n\n",
			content: "hello", reasoning: "think", finished: true},
		{name: "empty data line", ctype: sse, body: "data:\n\ndata: \n\n" + hello + "data: [DONE]\n\n", content: "hello", finished: true},
		{name: "no [DONE]", ctype: sse, body: hello + usage, content: "hello", finished: true, prompt: 3},
		{name: "after [DONE]", ctype: sse, body: hello + "data: [DONE]\n\n" + chunk(`{"content":"!"}`, "") + "data: {bad\n\n", content: "hello", finished: true},
		{name: "cut clean", ctype: sse, body: chunk(`{"content":"hel"}`, ""), content: "hel"},
		{name: "cut mid-line", ctype: sse, body: chunk(`{"content":"hel"}`, "") + `data: {"choices":[{"delta":{"content":"lo"`, content: "hel"},
		{name: "error event", ctype: sse, body: chunk(`{"content":"hel"}`, "") + ": ping\n\n" + `data: {"error":{"message":"Internal error","type":"server_error","code":500}}` + "\n\n",
			content: "hel", err: "event:Internal error"},
		{name: "error event without message", ctype: sse, body: `data: {"error":"boom"}` + "\n\n", err: "event:"},
		{name: "error beside choices", ctype: sse, body: chunk(`{"content":"hel"}`, "") + `data: {"error":{"message":"upstream"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}` + "\n\n",
			content: "hel", finished: true},
		{name: "null error", ctype: sse, body: `data: {"error":null,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}` + "\n\n", content: "x", finished: true},
		{name: "malformed chunk", ctype: sse, body: chunk(`{"content":"hel"}`, "") + "data: {\"choices\": [}\n\n", content: "hel", err: "decode"},
		{name: "plain JSON", ctype: "application/json; charset=utf-8", body: "\n\n" + `{"model":"m","choices":[{"index":0,"message":{"content":"hello","reasoning":"think"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`,
			content: "hello", reasoning: "think", finished: true, prompt: 3},
		{name: "plain JSON cut", ctype: "application/json", body: `{"choices":[{"index":0,"message":{"content":"hel`, err: "decode"},
		{name: "plain JSON without choices", ctype: "application/json", body: `{"error":{"message":"overloaded"}}`, finished: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a assembly
			cp := &capture{status: 200}
			err := readStream(http.Header{"Content-Type": {tc.ctype}}, strings.NewReader(tc.body), cp, &a)
			var de *errDecode
			var se *streamError
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("err %v", err)
			case tc.err == "decode" && !errors.As(err, &de):
				t.Fatalf("err %v, want a decoding error", err)
			case strings.HasPrefix(tc.err, "event:") && (!errors.As(err, &se) || se.msg != strings.TrimPrefix(tc.err, "event:")):
				t.Fatalf("err %v, want an error event %q", err, strings.TrimPrefix(tc.err, "event:"))
			}
			reasoning, _ := a.pickReasoning(fieldOrder)
			if a.content.String() != tc.content || reasoning != tc.reasoning || a.finished != tc.finished {
				t.Errorf("content %q reasoning %q finished %v, want %q %q %v", a.content.String(), reasoning, a.finished, tc.content, tc.reasoning, tc.finished)
			}
			if got := 0; a.usage != nil {
				got = a.usage.PromptTokens
				if got != tc.prompt {
					t.Errorf("usage prompt tokens %d, want %d", got, tc.prompt)
				}
			} else if tc.prompt != 0 {
				t.Errorf("no usage, want prompt tokens %d", tc.prompt)
			}
			if strings.HasPrefix(tc.ctype, "application/json") != (cp.body != nil) {
				t.Errorf("body kept: %q", cp.body)
			}
		})
	}
}

// TestSSEReaderEnds: a transport error mid-stream is returned as it is, and a stream past the
// size limit fails, a long line included.
func TestSSEReaderEnds(t *testing.T) {
	reset := errors.New("connection reset by peer")
	r := newSSEReader(io.MultiReader(strings.NewReader("data: {\"model\":1}\n\ndata: {\"b\""), iotest.ErrReader(reset)), 1<<20, nil)
	if p, err := r.next(); err != nil || string(p) != `{"model":1}` {
		t.Fatalf("first payload %q, %v", p, err)
	}
	if _, err := r.next(); !errors.Is(err, reset) {
		t.Fatalf("after the reset: %v", err)
	}
	for name, body := range map[string]string{
		"many lines": strings.Repeat("data: {\"x\":1}\n\n", 100),
		"one line":   "data: " + strings.Repeat("x", 2000) + "\n",
		"comments":   strings.Repeat(": keep-alive\n\n", 200),
	} {
		r := newSSEReader(strings.NewReader(body), 1000, nil)
		var err error
		for n := 0; err == nil && n < 1000; n++ {
			_, err = r.next()
		}
		if !errors.Is(err, errStreamTooLong) {
			t.Errorf("%s: %v, want errStreamTooLong", name, err)
		}
	}
	exact := "data: {\"model\":1}\n\n"
	r = newSSEReader(strings.NewReader(exact), int64(len(exact)), nil)
	if p, err := r.next(); err != nil || string(p) != `{"model":1}` {
		t.Errorf("a stream of exactly the limit: %v", err)
	}
}

// TestIdleBody: the idle callback fires after d without a byte, and not while bytes keep coming
// (keep-alive comments count); Close stops the timer.
func TestIdleBody(t *testing.T) {
	const d = 200 * time.Millisecond
	pr, pw := io.Pipe()
	fired := make(chan struct{}, 1)
	b := newIdleBody(pr, d, func() { fired <- struct{}{} })
	go func() {
		for range 8 {
			time.Sleep(d / 10)
			pw.Write([]byte(": keep-alive\n\n"))
		}
	}()
	buf := make([]byte, 64)
	for range 8 {
		if _, err := b.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-fired:
		t.Fatal("fired while bytes arrived")
	default:
	}
	select {
	case <-fired:
	case <-time.After(20 * d):
		t.Fatal("did not fire on a silent stream")
	}
	b.Close()
	pw.Close()
	quiet := newIdleBody(io.NopCloser(strings.NewReader("")), d, func() { fired <- struct{}{} })
	quiet.Close()
	select {
	case <-fired:
		t.Fatal("fired after Close")
	case <-time.After(3 * d):
	}
}

// TestSSELeadingBOM: a byte order mark before a stream's first line is not part of the line
// (the event-stream format ignores one there, as the official OpenAI client does): before, the
// first line read as one without data and was dropped, and the reply was kept without its
// first chunk. A mark anywhere else is still part of its line.
func TestSSELeadingBOM(t *testing.T) {
	chunk := func(text, finish string) string {
		return `data: {"model":"m","choices":[{"index":0,"delta":{"content":"` + text + `"},"finish_reason":` + finish + "}]}\n\n"
	}
	for _, tc := range []struct{ body, want string }{
		{"\ufeff" + chunk("A", "null") + chunk("B", `"stop"`) + "data: [DONE]\n\n", "AB"},
		{chunk("A", "null") + "\ufeff" + chunk("B", "null") + chunk("C", `"stop"`), "AC"},
	} {
		var a assembly
		err := readStream(http.Header{"Content-Type": {"text/event-stream"}}, strings.NewReader(tc.body), &capture{status: 200}, &a)
		if err != nil || a.content.String() != tc.want || a.finish != "stop" {
			t.Errorf("%q: content %q, finish %q, %v; want %q", tc.body, a.content.String(), a.finish, err, tc.want)
		}
	}
}
