package serve

import (
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// TestLogprobsEncodedAsBefore: writeCompletion writes the bytes writeJSON writes for the
// completion with each choice's logprobs encoded whole by logprobs, for entries whose tokens
// need escaping (quotes, HTML's <>&, control characters, bytes outside UTF-8, non-ASCII), whose
// log-probabilities are -Inf, NaN-free extremes, tiny (exponent form) or 0, with and without
// top entries and token ids, choices without entries, logprobs not asked for, and replies longer
// than encodeChunk.
func TestLogprobsEncodedAsBefore(t *testing.T) {
	texts := []string{"t", `"q"`, `a\b`, "<|im_end|>", "&amp;", "\n\t\x01", "\xff\xfe", "é", "日本", "", " SELECT"}
	lps := []float32{-1.2345678, 0, float32(math.Inf(-1)), -1e-7, -3e-12, -9999.5, -0.5, -1e-6, -123456.78}
	entry := func(i int) student.TokenLogProb {
		s := texts[i%len(texts)]
		return student.TokenLogProb{ID: i * 7919 % 151000, Bytes: s, Text: s, LogProb: lps[i%len(lps)]}
	}
	mk := func(n, top int) []student.TokenLogProb {
		out := make([]student.TokenLogProb, n)
		for i := range out {
			out[i] = entry(i)
			for j := range top {
				out[i].Top = append(out[i].Top, entry(i+j+1))
			}
		}
		return out
	}
	for _, c := range []struct {
		name       string
		asked, ids bool
		lps        [][]student.TokenLogProb
		usage      bool
	}{
		{"one choice, no top", true, false, [][]student.TokenLogProb{mk(50, 0)}, true},
		{"two choices, top 3, ids", true, true, [][]student.TokenLogProb{mk(40, 3), mk(7, 3)}, true},
		{"not asked", false, false, [][]student.TokenLogProb{nil, nil}, true},
		{"a choice without entries", true, false, [][]student.TokenLogProb{mk(3, 1), nil, {}}, false},
		{"over encodeChunk", true, false, [][]student.TokenLogProb{mk(3000, 5), mk(2000, 0)}, true},
	} {
		out := oai.Completion{ID: "chatcmpl-x", Object: oai.ObjectCompletion, Created: 1700000000, Model: "m<&>", SystemFingerprint: "weights-v2"}
		if c.usage {
			out.Usage = toUsage(chat.Usage{PromptTokens: 10, CompletionTokens: 20, CachedTokens: 3})
		}
		whole := out
		for i := range c.lps {
			fr, content := "length", fmt.Sprintf("reply %d \"<x>\"", i)
			ch := oai.Choice{Index: i, Message: &oai.Message{Role: chat.RoleAssistant, Content: &content}, FinishReason: &fr}
			out.Choices = append(out.Choices, ch)
			ch.Logprobs = logprobs(c.asked, c.ids, c.lps[i])
			whole.Choices = append(whole.Choices, ch)
		}
		want := httptest.NewRecorder()
		writeJSON(want, 200, whole)
		got := httptest.NewRecorder()
		if err := writeCompletion(got, out, c.asked, c.ids, c.lps); err != nil {
			t.Fatal(err)
		}
		if got.Code != 200 || got.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", c.name, got.Code, got.Header().Get("Content-Type"))
		}
		if g, w := got.Body.String(), want.Body.String(); g != w {
			i := 0
			for i < min(len(g), len(w)) && g[i] == w[i] {
				i++
			}
			t.Errorf("%s: %d bytes, want %d; first difference at %d:\n got %.200q\nwant %.200q", c.name, len(g), len(w), i, g[max(i-40, 0):], w[max(i-40, 0):])
		}
	}
}

// failWriter is a ResponseWriter whose writes fail after the first.
type failWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (f *failWriter) Write(p []byte) (int, error) {
	f.writes++
	if f.writes > 1 {
		return 0, errors.New("client gone")
	}
	return f.ResponseRecorder.Write(p)
}

// TestLogprobsReplyStopsAtWriteError: once a write fails (the client gone) writeCompletion
// returns the error and writes no more.
func TestLogprobsReplyStopsAtWriteError(t *testing.T) {
	lps := make([]student.TokenLogProb, 100000)
	for i := range lps {
		lps[i] = student.TokenLogProb{ID: i, Bytes: "tok", Text: "tok", LogProb: -1}
	}
	fr, content := "length", strings.Repeat("x", 10)
	out := oai.Completion{Model: "m", Choices: []oai.Choice{{Message: &oai.Message{Content: &content}, FinishReason: &fr}}}
	w := &failWriter{ResponseRecorder: httptest.NewRecorder()}
	if err := writeCompletion(w, out, true, false, [][]student.TokenLogProb{lps}); err == nil || w.writes != 2 {
		t.Errorf("error %v after %d writes; want client gone after 2", err, w.writes)
	}
}
