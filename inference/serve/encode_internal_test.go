package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/oai"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// textVocab gives token id the bytes textVocab[id % its length].
type textVocab []string

func (v textVocab) TokenBytes(id int) string { return v[id%len(v)] }

// TestLogprobsEncodedAsBefore: writeCompletion writes the bytes writeJSON writes for the
// completion with each choice's logprobs encoded whole by logprobs, for entries whose tokens
// need escaping (quotes, HTML's <>&, control characters, bytes outside UTF-8, non-ASCII), whose
// log-probabilities are -Inf, NaN-free extremes, tiny (exponent form) or 0, with and without
// top entries and token ids, choices without entries, logprobs not asked for, and replies longer
// than encodeChunk.
func TestLogprobsEncodedAsBefore(t *testing.T) {
	vocab := textVocab{"t", `"q"`, `a\b`, "<|im_end|>", "&amp;", "\n\t\x01", "\xff\xfe", "é", "日本", "", " SELECT", "\xe6\x97"}
	lps := []float32{-1.2345678, 0, float32(math.Inf(-1)), -1e-7, -3e-12, -9999.5, -0.5, -1e-6, -123456.78}
	id := func(i int) int32 { return int32(i * 7919 % 151000) }
	mk := func(n, top int) student.Choice {
		out := make([]student.TokenLogProb, n)
		for i := range out {
			out[i] = student.TokenLogProb{ID: id(i), LogProb: lps[i%len(lps)]}
			for j := range top {
				out[i].Top = append(out[i].Top, student.TopLogProb{ID: id(i + j + 1), LogProb: lps[(i+j+1)%len(lps)]})
			}
		}
		return student.Choice{LogProbs: out, Vocab: vocab}
	}
	for _, c := range []struct {
		name       string
		asked, ids bool
		choices    []student.Choice
		usage      bool
	}{
		{"one choice, no top", true, false, []student.Choice{mk(50, 0)}, true},
		{"two choices, top 3, ids", true, true, []student.Choice{mk(40, 3), mk(7, 3)}, true},
		{"not asked", false, false, []student.Choice{{}, {}}, true},
		{"a choice without entries", true, false, []student.Choice{mk(3, 1), {}, mk(0, 0)}, false},
		{"over encodeChunk", true, false, []student.Choice{mk(3000, 5), mk(2000, 0)}, true},
	} {
		out := oai.Completion{ID: "chatcmpl-x", Object: oai.ObjectCompletion, Created: 1700000000, Model: "m<&>", SystemFingerprint: "weights-v2"}
		if c.usage {
			out.Usage = toUsage(chat.Usage{PromptTokens: 10, CompletionTokens: 20, CachedTokens: 3})
		}
		whole := out
		for i := range c.choices {
			fr, content := "length", fmt.Sprintf("reply %d \"<x>\"", i)
			ch := oai.Choice{Index: i, Message: &oai.Message{Role: chat.RoleAssistant, Content: &content}, FinishReason: &fr}
			out.Choices = append(out.Choices, ch)
			ch.Logprobs = logprobs(c.asked, c.ids, c.choices[i].Vocab, c.choices[i].LogProbs)
			whole.Choices = append(whole.Choices, ch)
		}
		want := httptest.NewRecorder()
		writeJSON(want, 200, whole)
		got := httptest.NewRecorder()
		if err := writeCompletion(got, out, c.asked, c.ids, c.choices); err != nil {
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
		lps[i] = student.TokenLogProb{ID: int32(i), LogProb: -1}
	}
	fr, content := "length", strings.Repeat("x", 10)
	out := oai.Completion{Model: "m", Choices: []oai.Choice{{Message: &oai.Message{Content: &content}, FinishReason: &fr}}}
	w := &failWriter{ResponseRecorder: httptest.NewRecorder()}
	if err := writeCompletion(w, out, true, false, []student.Choice{{LogProbs: lps, Vocab: textVocab{"tok"}}}); err == nil || w.writes != 2 {
		t.Errorf("error %v after %d writes; want client gone after 2", err, w.writes)
	}
}

// stringEntry is a log-probability entry as the student held it before it held ids only: the
// token's bytes and its text (the tokenizer's decoding of the token alone) as strings.
type stringEntry struct {
	ID          int
	Bytes, Text string
	LogProb     float32
	Top         []stringEntry
}

// stringLogprobs is choice.logprobs as logprobs encoded it from stringEntry values.
func stringLogprobs(ids bool, entries []stringEntry) json.RawMessage {
	name := func(e stringEntry) string {
		if ids {
			return "token_id:" + strconv.Itoa(e.ID)
		}
		return e.Text
	}
	lp := oai.Logprobs{Content: make([]oai.TokenLogprob, len(entries))}
	for i, e := range entries {
		lp.Content[i] = oai.TokenLogprob{Token: name(e), Logprob: max(e.LogProb, minLogprob), Bytes: byteList(e.Bytes), TopLogprobs: []oai.TopLogprob{}}
		for _, a := range e.Top {
			lp.Content[i].TopLogprobs = append(lp.Content[i].TopLogprobs, oai.TopLogprob{Token: name(a), Logprob: max(a.LogProb, minLogprob), Bytes: byteList(a.Bytes)})
		}
	}
	b, err := json.Marshal(lp)
	if err != nil {
		panic(err)
	}
	return b
}

// TestLogprobsCompactAsStrings: a reply whose entries hold ids only, their bytes and text taken
// from the tokenizer as the reply is written, is byte for byte the reply the entries holding
// each token's bytes and text (tokenizer.Decode of the token alone) as strings gave, for every
// id of the Qwen2.5 tokenizer (byte-level pieces that are part of a UTF-8 character, whose
// text is U+FFFD per maximal ill-formed subpart; added tokens; ids past the vocabulary, with
// no bytes) as tokens and as top alternatives, with and without token ids, written whole
// (writeCompletion) and as a stream's chunk (logprobs).
func TestLogprobsCompactAsStrings(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	n := tok.VocabSize() + 3
	lp := func(id int) float32 { return -float32(id%977) / 7 }
	compact := make([]student.TokenLogProb, n)
	strs := make([]stringEntry, n)
	str := func(id int) stringEntry {
		return stringEntry{ID: id, Bytes: tok.TokenBytes(id), Text: tok.Decode([]int{id}), LogProb: lp(id)}
	}
	for id := range n {
		compact[id] = student.TokenLogProb{ID: int32(id), LogProb: lp(id)}
		strs[id] = str(id)
		a := (id + 7919) % n // every id an alternative too
		compact[id].Top = []student.TopLogProb{{ID: int32(a), LogProb: lp(a)}}
		strs[id].Top = []stringEntry{str(a)}
	}
	fr, content := "length", "reply"
	for _, ids := range []bool{false, true} {
		out := oai.Completion{ID: "chatcmpl-x", Object: oai.ObjectCompletion, Created: 1700000000, Model: "m",
			Choices: []oai.Choice{{Message: &oai.Message{Role: chat.RoleAssistant, Content: &content}, FinishReason: &fr}}}
		whole := out
		whole.Choices = []oai.Choice{out.Choices[0]}
		whole.Choices[0].Logprobs = stringLogprobs(ids, strs)
		want := httptest.NewRecorder()
		writeJSON(want, 200, whole)
		got := httptest.NewRecorder()
		if err := writeCompletion(got, out, true, ids, []student.Choice{{LogProbs: compact, Vocab: tok}}); err != nil {
			t.Fatal(err)
		}
		if g, w := got.Body.String(), want.Body.String(); g != w {
			i := 0
			for i < min(len(g), len(w)) && g[i] == w[i] {
				i++
			}
			t.Errorf("ids %v: written whole, %d bytes, want %d; first difference at %d:\n got %.200q\nwant %.200q", ids, len(g), len(w), i, g[max(i-40, 0):], w[max(i-40, 0):])
		}
		if g, w := logprobs(true, ids, tok, compact), stringLogprobs(ids, strs); !bytes.Equal(g, w) {
			t.Errorf("ids %v: a stream's chunk differs (%d bytes, want %d)", ids, len(g), len(w))
		}
	}
}
