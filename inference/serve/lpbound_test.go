package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
)

// lpBackend answers every choice with up to tokens tokens (fewer when max_tokens says so), each
// with the log-probability entries asked for, as the student fills them; its context leaves room
// tokens after any prompt. It counts the completions it computed.
type lpBackend struct {
	tokens, room int
	calls        atomic.Int64
}

func (*lpBackend) ModelID() string { return "lp" }

func (*lpBackend) Stream(context.Context, []chat.Message, chat.Options, func(string) error) (chat.Reply, error) {
	return chat.Reply{}, fmt.Errorf("lpBackend: no Stream")
}

func (b *lpBackend) Room([]chat.Message) (int, int, error) { return 10, b.room, nil }

// lpVocab gives token id the bytes "tNNN", NNN its last three digits, from a table built once
// (so that writing a reply allocates no token's bytes).
type lpVocab [1000]string

func (v *lpVocab) TokenBytes(id int) string { return v[id%1000] }

var lpTokens = func() *lpVocab {
	var v lpVocab
	for i := range v {
		v[i] = fmt.Sprintf("t%03d", i)
	}
	return &v
}()

// entry is a token as the student records it: an id (whose bytes are a few, lpTokens'), a
// logprob of full precision.
func entry(i int) student.TokenLogProb {
	return student.TokenLogProb{ID: int32(1000 + i%100000), LogProb: -1.2345678 - float32(i%7)}
}

func (b *lpBackend) Complete(ctx context.Context, _ []chat.Message, opts chat.Options, x student.Sample, fn func(student.Delta) error) ([]student.Choice, error) {
	b.calls.Add(1)
	tokens := b.tokens
	if opts.MaxTokens > 0 {
		tokens = min(tokens, opts.MaxTokens)
	}
	choices := make([]student.Choice, max(x.N, 1))
	for c := range choices {
		var lps []student.TokenLogProb
		if x.LogProbs {
			lps = make([]student.TokenLogProb, tokens)
			for i := range lps {
				lps[i] = entry(i)
				for j := range x.TopLogProbs {
					e := entry(i + j)
					lps[i].Top = append(lps[i].Top, student.TopLogProb{ID: e.ID, LogProb: e.LogProb})
				}
			}
		}
		choices[c] = student.Choice{Reply: chat.Reply{Content: strings.Repeat("x", tokens), FinishReason: "length",
			Usage: chat.Usage{PromptTokens: 10, CompletionTokens: tokens}}, LogProbs: lps, Vocab: lpTokens}
		if fn != nil {
			if err := fn(student.Delta{Choice: c, Text: choices[c].Content, LogProbs: lps, Vocab: lpTokens, FinishReason: "length"}); err != nil {
				return nil, err
			}
		}
	}
	return choices, nil
}

// lpPost posts a chat request of extra's fields to h and returns the status, the body and the
// bytes allocated meanwhile.
func lpPost(t *testing.T, h http.Handler, extra map[string]any) (int, string, uint64) {
	t.Helper()
	req := map[string]any{"messages": []map[string]string{{"role": "user", "content": "How many?"}}, "logprobs": true}
	for k, v := range extra {
		req[k] = v
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	return w.Code, w.Body.String(), after.TotalAlloc - before.TotalAlloc
}

// TestLogprobsBounded: a request with logprobs is refused (400, before anything is computed)
// when n × max_tokens × (1 + top_logprobs) is over serve.MaxLogprobEntries, max_tokens being
// the context's room when it gives none, streamed or not, naming the three; at the bound it is
// answered. It measures a non-streamed reply: about 60 bytes of JSON per entry (what it
// allocates is mostly the recorder's copy of the body; TestLogprobsReplyStreamed measures the
// server's own), so n 16 × 32,768 tokens × (1 + 20), which it answered before, is 0.7 GB of JSON.
func TestLogprobsBounded(t *testing.T) {
	b := &lpBackend{tokens: 1000, room: 1 << 20}
	h := serve.Handler(b, nil, serve.Config{})

	// What a reply holds: 2 choices of 1,000 tokens with 20 top_logprobs each, 42,000 entries.
	code, body, alloc := lpPost(t, h, map[string]any{"n": 2, "max_tokens": 1000, "top_logprobs": 20})
	if code != 200 {
		t.Fatalf("2 × 1,000 × 21: %d %.300s", code, body)
	}
	const entries = 2 * 1000 * 21
	// The server's share: less what building the choices alone allocates.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := b.Complete(context.Background(), nil, chat.Options{MaxTokens: 1000}, student.Sample{N: 2, LogProbs: true, TopLogProbs: 20}, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc -= after.TotalAlloc - before.TotalAlloc
	perEntry, allocPerEntry := len(body)/entries, int(alloc)/entries
	big := int64(16) * 32768 * 21
	t.Logf("%d entries: %d bytes of JSON (%d per entry), %d bytes allocated serving them (%d per entry); n 16 × 32,768 × 21 = %d entries would be %.1f GB of JSON, %.1f GB allocated",
		entries, len(body), perEntry, alloc, allocPerEntry, big, float64(big*int64(perEntry))/1e9, float64(big*int64(allocPerEntry))/1e9)
	if perEntry < 30 || perEntry > 100 {
		t.Errorf("%d bytes of JSON per entry, want about 60", perEntry)
	}

	calls := b.calls.Load()
	for _, c := range []struct {
		name  string
		extra map[string]any
		param string
	}{
		{"n 16, max_tokens 32768, top_logprobs 20", map[string]any{"n": 16, "max_tokens": 32768, "top_logprobs": 20}, "top_logprobs"},
		{"n 16, top_logprobs 20, no max_tokens", map[string]any{"n": 16, "top_logprobs": 20}, "top_logprobs"},
		{"streamed", map[string]any{"n": 16, "max_tokens": 32768, "top_logprobs": 20, "stream": true}, "top_logprobs"},
		{"one entry over, no top_logprobs", map[string]any{"n": 16, "max_tokens": serve.MaxLogprobEntries/16 + 1}, "max_tokens"},
	} {
		code, body, _ := lpPost(t, h, c.extra)
		var e struct {
			Error struct {
				Message string
				Param   *string
			}
		}
		json.Unmarshal([]byte(body), &e)
		if code != 400 || e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, "n × max_tokens × (1 + top_logprobs)") {
			t.Errorf("%s: %d %.300s; want 400 with param %s naming n, max_tokens and top_logprobs", c.name, code, body, c.param)
		}
	}
	if n := b.calls.Load() - calls; n != 0 {
		t.Errorf("%d refused requests were computed", n)
	}
	// At the bound, and without logprobs, answered (the backend's replies are shorter).
	for _, extra := range []map[string]any{
		{"n": 16, "max_tokens": serve.MaxLogprobEntries / 16},
		{"n": 16, "max_tokens": serve.MaxLogprobEntries / 16 / 21, "top_logprobs": 20},
		{"n": 16, "max_tokens": 32768, "logprobs": false},
	} {
		if code, body, _ := lpPost(t, h, extra); code != 200 {
			t.Errorf("%v: %d %.300s", extra, code, body)
		}
	}
}

// fixedBackend answers every completion with the same choices, built once, so that what a
// request allocates is the server's own.
type fixedBackend struct {
	lpBackend
	choices []student.Choice
}

func (b *fixedBackend) Complete(context.Context, []chat.Message, chat.Options, student.Sample, func(student.Delta) error) ([]student.Choice, error) {
	return b.choices, nil
}

// countWriter is a ResponseWriter that keeps only the count of the bytes written; with fail,
// every write after the first fails, as to a client gone.
type countWriter struct {
	h      http.Header
	code   int
	n      int64
	writes int
	fail   bool
}

func (c *countWriter) Header() http.Header  { return c.h }
func (c *countWriter) WriteHeader(code int) { c.code = code }
func (c *countWriter) Write(p []byte) (int, error) {
	c.writes++
	if c.fail && c.writes > 1 {
		return 0, errors.New("reply cut: the client is gone")
	}
	c.n += int64(len(p))
	return len(p), nil
}

// TestLogprobsReplyStreamed: a non-streamed reply at MaxLogprobEntries (16 choices × 3,120
// tokens × 21, about 64 MB of JSON) is written in pieces, the server allocating well under 1 MB
// beyond the choices the backend gave it (0.2 MB measured); built and encoded whole it
// allocated 415 MB (about 400 bytes an entry) and held its 64 MB body at once.
func TestLogprobsReplyStreamed(t *testing.T) {
	const n, tokens, top = 16, serve.MaxLogprobEntries / 16 / 21, 20
	lb := lpBackend{tokens: tokens, room: 1 << 20}
	choices, err := lb.Complete(context.Background(), nil, chat.Options{}, student.Sample{N: n, LogProbs: true, TopLogProbs: top}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := serve.Handler(&fixedBackend{lpBackend: lpBackend{room: 1 << 20}, choices: choices}, nil, serve.Config{})
	body := fmt.Sprintf(`{"messages": [{"role": "user", "content": "How many?"}], "logprobs": true, "n": %d, "max_tokens": %d, "top_logprobs": %d}`, n, tokens, top)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := &countWriter{h: http.Header{}}
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	entries := int64(n * tokens * (1 + top))
	t.Logf("%d entries: %d bytes of JSON in %d writes, %d bytes allocated (%.2f an entry)", entries, w.n, w.writes, alloc, float64(alloc)/float64(entries))
	if w.code != 200 || w.n < 30*entries {
		t.Fatalf("%d, %d bytes; want 200 with about 60 bytes an entry", w.code, w.n)
	}
	if alloc > 1<<20 {
		t.Errorf("%d bytes allocated serving a reply of %d entries; want under 1 MiB (the reply written as it is encoded)", alloc, entries)
	}
}

// TestLogprobsReplyWriteFailureLogged: a non-streamed reply whose write fails is logged as
// such (499 with the error), not as answered, and its encoding stops at the failed write.
func TestLogprobsReplyWriteFailureLogged(t *testing.T) {
	lb := lpBackend{tokens: 2000, room: 1 << 20}
	choices, err := lb.Complete(context.Background(), nil, chat.Options{}, student.Sample{N: 4, LogProbs: true, TopLogProbs: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logged lockedLog
	h := serve.Handler(&fixedBackend{lpBackend: lpBackend{room: 1 << 20}, choices: choices}, log.New(&logged, "", 0), serve.Config{})
	w := &countWriter{h: http.Header{}, fail: true}
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"messages": [{"role": "user", "content": "How many?"}], "logprobs": true, "n": 4, "max_tokens": 2000, "top_logprobs": 5}`))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(w, r)
	got := logged.take()
	if !strings.Contains(got, ": 499 reply cut: the client is gone (10+8000 tokens computed") || w.writes != 2 {
		t.Errorf("log %q after %d writes; want 499 with the write's error after 2", got, w.writes)
	}
}

// goneWriter is a ResponseWriter whose writes after the first ok fail, as to a client gone.
type goneWriter struct {
	h          http.Header
	ok, writes int
}

func (g *goneWriter) Header() http.Header { return g.h }
func (g *goneWriter) WriteHeader(int)     {}
func (g *goneWriter) Flush()              {}
func (g *goneWriter) Write(p []byte) (int, error) {
	g.writes++
	if g.writes > g.ok {
		return 0, errors.New("client gone")
	}
	return len(p), nil
}

// TestStreamEndWriteFailureLogged: a streamed reply whose usage chunk or "data: [DONE]" fails
// to write is logged once, as 499 with the write's error; before, a failed usage chunk logged
// nothing and a failed [DONE] logged the reply as answered. A reply written whole is logged as
// answered.
func TestStreamEndWriteFailureLogged(t *testing.T) {
	lb := lpBackend{tokens: 3, room: 1 << 20}
	choices, err := lb.Complete(context.Background(), nil, chat.Options{}, student.Sample{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		usage bool
		ok    int
		want  string
	}{
		{true, 0, "(stream): 499 client gone (10+3 tokens computed"},
		{true, 1, "(stream): 499 client gone (10+3 tokens computed"},
		{false, 0, "(stream): 499 client gone (10+3 tokens computed"},
		{false, 1, "(stream): 10+3 tokens, "},
		{true, 2, "(stream): 10+3 tokens, "},
	} {
		var logged lockedLog
		h := serve.Handler(&fixedBackend{lpBackend: lpBackend{room: 1 << 20}, choices: choices}, log.New(&logged, "", 0), serve.Config{})
		body := `{"messages": [{"role": "user", "content": "How many?"}], "stream": true, "max_tokens": 3}`
		if c.usage {
			body = `{"messages": [{"role": "user", "content": "How many?"}], "stream": true, "max_tokens": 3, "stream_options": {"include_usage": true}}`
		}
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(&goneWriter{h: http.Header{}, ok: c.ok}, r)
		got := logged.take()
		if !strings.Contains(got, c.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("usage %v, %d writes ok: logged %q; want one line with %q", c.usage, c.ok, got, c.want)
		}
	}
}
