package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// tinyLP is student serve on ../shared/models/tiny-qwen2-f32 with what the tests need to check
// its replies independently: the tokenizer, the ids of every token's bytes and a second copy of
// the model computing logits on its own.
type tinyLP struct {
	url  string
	st   *student.Student
	tok  *tokenizer.Tokenizer
	ids  map[string]int // a token's bytes → its id
	ref  *qwen2.Model
	msgs []chat.Message
}

// newTinyLP starts the server with gcfg and loads the rest.
func newTinyLP(t *testing.T, gcfg generate.Config) *tinyLP {
	t.Helper()
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	tokPath := shared.Path(t, "tokenizer/qwen2.5")
	st, err := student.Open(dir, student.Options{Tokenizer: tokPath, ModelID: "tiny", Generate: gcfg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serve.Handler(st, nil, serve.Config{}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	ref, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	tok := st.Tokenizer().(*tokenizer.Tokenizer)
	ids := make(map[string]int, tok.VocabSize())
	for id := range tok.VocabSize() {
		if b := tok.TokenBytes(id); b != "" {
			if _, dup := ids[b]; !dup {
				ids[b] = id
			}
		}
	}
	msgs := []chat.Message{
		{Role: chat.RoleSystem, Content: "You write one SQLite query for the question, inside <sql> tags, after thinking briefly."},
		{Role: chat.RoleUser, Content: "How many singers are there?"},
	}
	return &tinyLP{url: srv.URL, st: st, tok: tok, ids: ids, ref: ref, msgs: msgs}
}

// lpEntry is an entry of choices[i].logprobs.content as the wire has it.
type lpEntry struct {
	Token   string   `json:"token"`
	Logprob *float64 `json:"logprob"`
	Bytes   []int    `json:"bytes"`
	Top     []struct {
		Token   string   `json:"token"`
		Logprob *float64 `json:"logprob"`
		Bytes   []int    `json:"bytes"`
	} `json:"top_logprobs"`
}

// lpChoice is a choice as the tests read it, from a completion or gathered from a stream.
type lpChoice struct {
	Index   int
	Content string
	Finish  string
	Entries []lpEntry
	null    bool // logprobs was null (a completion's choice)
}

type lpUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// body is a chat request for msgs with the extra fields.
func (e *tinyLP) body(t *testing.T, extra map[string]any) string {
	t.Helper()
	m := map[string]any{"messages": e.msgs, "max_tokens": 10}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// complete posts body (not streamed) and returns its choices and usage.
func (e *tinyLP) complete(t *testing.T, body string) ([]lpChoice, lpUsage) {
	t.Helper()
	resp, err := http.Post(e.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Index        int
			Message      struct{ Content string }
			FinishReason string          `json:"finish_reason"`
			Logprobs     json.RawMessage `json:"logprobs"`
		}
		Usage lpUsage
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	var cs []lpChoice
	for _, c := range out.Choices {
		lc := lpChoice{Index: c.Index, Content: c.Message.Content, Finish: c.FinishReason, null: string(c.Logprobs) == "null"}
		var lp struct{ Content []lpEntry }
		if !lc.null {
			if err := json.Unmarshal(c.Logprobs, &lp); err != nil {
				t.Fatalf("logprobs %s: %v", c.Logprobs, err)
			}
		}
		lc.Entries = lp.Content
		cs = append(cs, lc)
	}
	return cs, out.Usage
}

// stream posts body with stream true and include_usage, and gathers each choice's text, finish
// reason and logprobs entries from its chunks in order; it checks that each choice starts with
// a role chunk and ends with its finish chunk.
func (e *tinyLP) stream(t *testing.T, body string) ([]lpChoice, lpUsage) {
	t.Helper()
	var m map[string]any
	json.Unmarshal([]byte(body), &m)
	m["stream"], m["stream_options"] = true, map[string]bool{"include_usage": true}
	b, _ := json.Marshal(m)
	resp, err := http.Post(e.url+"/v1/chat/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	byIndex := map[int]*lpChoice{}
	var usage lpUsage
	for _, l := range sseEvents(t, resp.Body) {
		var c struct {
			Choices []struct {
				Index int
				Delta struct {
					Role    string
					Content *string
				}
				FinishReason *string `json:"finish_reason"`
				Logprobs     *struct{ Content []lpEntry }
			}
			Usage *lpUsage
		}
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		if c.Usage != nil {
			usage = *c.Usage
		}
		for _, ch := range c.Choices {
			lc := byIndex[ch.Index]
			switch {
			case lc == nil && ch.Delta.Role != "assistant":
				t.Fatalf("choice %d starts with %q", ch.Index, l)
			case lc == nil:
				lc = &lpChoice{Index: ch.Index}
				byIndex[ch.Index] = lc
			case lc.Finish != "":
				t.Fatalf("choice %d: a chunk after its finish: %q", ch.Index, l)
			}
			if ch.Delta.Content != nil {
				lc.Content += *ch.Delta.Content
			}
			if ch.Logprobs != nil {
				lc.Entries = append(lc.Entries, ch.Logprobs.Content...)
			}
			if ch.FinishReason != nil {
				lc.Finish = *ch.FinishReason
			}
		}
	}
	out := make([]lpChoice, len(byIndex))
	for i := range out {
		if byIndex[i] == nil || byIndex[i].Finish == "" {
			t.Fatalf("streamed choices %v: choice %d missing or unfinished", byIndex, i)
		}
		out[i] = *byIndex[i]
	}
	return out, usage
}

// sseEvents reads a stream's events: the data of each "data: " line before "data: [DONE]",
// which must end it.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if l == "[DONE]" {
			return events
		}
		events = append(events, l)
	}
	t.Fatalf("stream without [DONE] after %d events (%v)", len(events), sc.Err())
	return nil
}

// bytesOf returns an entry's bytes as a string and its id, checking that its token is their
// text as the tokenizer decodes that token alone (ill-formed UTF-8 as U+FFFD).
func (e *tinyLP) bytesOf(t *testing.T, token string, list []int) (string, int) {
	t.Helper()
	b := make([]byte, len(list))
	for i, v := range list {
		b[i] = byte(v)
	}
	id, ok := e.ids[string(b)]
	if !ok {
		t.Fatalf("entry %q: no token has the bytes %v", token, list)
	}
	if text := e.tok.Decode([]int{id}); token != text || (utf8.Valid(b) && token != string(b)) || !utf8.ValidString(token) {
		t.Fatalf("token %q for bytes %v (decoded %q)", token, list, text)
	}
	return string(b), id
}

// check checks a choice's logprobs against the reference model: the entries' bytes name the
// completion's ids (their text the content, up to a stop token); each log-probability and top
// entry is the log-softmax of the reference's logits for the prompt and the ids before it,
// plus bias, divided by temp (1 when greedy) over the whole vocabulary, within 1e-4; the top
// entries fall, hold the sampled token with its very value when it ranks there, and no token
// outside them is more likely than the last. It returns the ids.
func (e *tinyLP) check(t *testing.T, c lpChoice, temp float64, top int, bias map[int]float32) []int {
	t.Helper()
	prompt, err := e.st.Prompt(e.msgs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	var text []int
	for _, en := range c.Entries {
		_, id := e.bytesOf(t, en.Token, en.Bytes)
		ids = append(ids, id)
		if !e.tok.IsSpecial(id) {
			text = append(text, id)
		}
	}
	if got := e.tok.Decode(text); got != c.Content {
		t.Fatalf("entries spell %q, content %q", got, c.Content)
	}
	all := append(slices.Clone(prompt), ids...)
	cache, err := e.ref.NewCache(len(all))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Release()
	st := []lm.Step{{Cache: cache, Tokens: all, AllLogits: true}}
	if err := e.ref.Forward(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	v := e.ref.VocabSize()
	if temp <= 0 {
		temp = 1
	}
	for i, en := range c.Entries {
		row := st[0].Logits[(len(prompt)-1+i)*v : (len(prompt)+i)*v]
		want := make([]float64, v)
		mx := math.Inf(-1)
		for id, l := range row {
			want[id] = (float64(l) + float64(bias[id])) / temp
			mx = max(mx, want[id])
		}
		z := 0.0
		for _, w := range want {
			z += math.Exp(w - mx)
		}
		for id := range want {
			want[id] -= mx + math.Log(z)
		}
		if d := math.Abs(*en.Logprob - want[ids[i]]); d > 1e-4 {
			t.Fatalf("token %d (%q): logprob %v, log-softmax %v", i, en.Token, *en.Logprob, want[ids[i]])
		}
		if len(en.Top) != top {
			t.Fatalf("token %d: %d top_logprobs, want %d", i, len(en.Top), top)
		}
		in := map[int]bool{}
		for j, a := range en.Top {
			_, id := e.bytesOf(t, a.Token, a.Bytes)
			in[id] = true
			if math.Abs(*a.Logprob-want[id]) > 1e-4 || (j > 0 && *a.Logprob > *en.Top[j-1].Logprob) {
				t.Fatalf("token %d top %d: %q %v, log-softmax %v", i, j, a.Token, *a.Logprob, want[id])
			}
			if id == ids[i] && *a.Logprob != *en.Logprob {
				t.Fatalf("token %d: logprob %v, %v among the top", i, *en.Logprob, *a.Logprob)
			}
		}
		if top > 0 {
			floor := *en.Top[top-1].Logprob
			for id, lp := range want {
				if !in[id] && lp > floor+1e-4 && e.tok.TokenBytes(id) != "" {
					t.Fatalf("token %d: id %d (log-prob %v) missing from the top %d", i, id, lp, top)
				}
			}
		}
	}
	return ids
}

// sameEntries compares two choices' entries: tokens, bytes and top tokens equal, log-probs
// within tol (a kept KV cache may compute the prompt's last position in another batch shape).
func sameEntries(t *testing.T, what string, a, b lpChoice, tol float64) {
	t.Helper()
	if a.Content != b.Content || a.Finish != b.Finish || len(a.Entries) != len(b.Entries) {
		t.Fatalf("%s: %q %s (%d entries) and %q %s (%d)", what, a.Content, a.Finish, len(a.Entries), b.Content, b.Finish, len(b.Entries))
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if x.Token != y.Token || !slices.Equal(x.Bytes, y.Bytes) || math.Abs(*x.Logprob-*y.Logprob) > tol || len(x.Top) != len(y.Top) {
			t.Fatalf("%s: entry %d %+v and %+v", what, i, x, y)
		}
		for j := range x.Top {
			if x.Top[j].Token != y.Top[j].Token || math.Abs(*x.Top[j].Logprob-*y.Top[j].Logprob) > tol {
				t.Fatalf("%s: entry %d top %d differs", what, i, j)
			}
		}
	}
}

// TestLogprobsTiny: logprobs and top_logprobs, greedy and sampled at temperatures (with top_p,
// which changes the draw but not the values: they are of the whole distribution), are the
// log-softmax of the model's logits divided by the temperature, computed by a second copy of
// the model; one entry per completion token (usage), the stop token last when one ended the
// reply; the streamed chunks carry the same entries as the completion; without logprobs the
// choice's logprobs is null.
func TestLogprobsTiny(t *testing.T) {
	e := newTinyLP(t, generate.Config{})
	for _, c := range []struct {
		temp, topP float64
		top        int
	}{{0, 1, 0}, {0, 1, 5}, {0.7, 0.9, 3}, {1.5, 1, 20}} {
		body := e.body(t, map[string]any{"temperature": c.temp, "top_p": c.topP, "seed": 3, "logprobs": true, "top_logprobs": c.top})
		plain, u := e.complete(t, body)
		if len(plain) != 1 || plain[0].null || len(plain[0].Entries) != u.CompletionTokens {
			t.Fatalf("T=%g: %d choices, %d entries for %d completion tokens", c.temp, len(plain), len(plain[0].Entries), u.CompletionTokens)
		}
		ids := e.check(t, plain[0], c.temp, c.top, nil)
		if stop, _ := e.tok.TokenID("<|im_end|>"); plain[0].Finish == "stop" && ids[len(ids)-1] != stop {
			t.Fatalf("T=%g: finished on stop, last entry %d", c.temp, ids[len(ids)-1])
		}
		streamed, su := e.stream(t, body)
		if len(streamed) != 1 || su != u {
			t.Fatalf("T=%g: streamed %d choices, usage %+v (completion %+v)", c.temp, len(streamed), su, u)
		}
		sameEntries(t, "stream and completion", streamed[0], plain[0], 1e-5)
	}
	plain, _ := e.complete(t, e.body(t, nil))
	if !plain[0].null {
		t.Fatal("logprobs not null without logprobs")
	}
}

// TestChoicesTiny: n choices at a temperature come back with index 0..n-1, independent draws
// (choice 0 the one-choice reply with the same seed), usage counting the prompt once and every
// choice's completion; the prompt is computed once for all of them (the others start from its
// KV cache); streamed, each choice's chunks carry what the completion has. Greedy, n choices
// are the same reply.
func TestChoicesTiny(t *testing.T) {
	e := newTinyLP(t, generate.Config{MaxBatch: 8})
	body := e.body(t, map[string]any{"temperature": 1, "seed": 11, "n": 4, "logprobs": true, "top_logprobs": 2})
	before := e.st.Generator().Stats()
	choices, u := e.complete(t, body)
	after := e.st.Generator().Stats()
	one, u1 := e.complete(t, e.body(t, map[string]any{"temperature": 1, "seed": 11, "logprobs": true, "top_logprobs": 2}))
	if len(choices) != 4 || u.PromptTokens != u1.PromptTokens || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("%d choices, usage %+v (one choice: %+v)", len(choices), u, u1)
	}
	sum, distinct := 0, map[string]bool{}
	for i, c := range choices {
		if c.Index != i {
			t.Fatalf("choice %d has index %d", i, c.Index)
		}
		sum += len(c.Entries)
		distinct[c.Content] = true
		e.check(t, c, 1, 2, nil)
	}
	if sum != u.CompletionTokens || len(distinct) < 3 {
		t.Fatalf("completion tokens %d, entries %d; %d distinct replies of 4", u.CompletionTokens, sum, len(distinct))
	}
	sameEntries(t, "choice 0 and the one-choice reply", choices[0], one[0], 1e-5)
	prompt := int64(u.PromptTokens)
	t.Logf("prompt %d, 4 choices: prompt tokens %d, cached %d", prompt, after.PromptTokens-before.PromptTokens, after.CachedTokens-before.CachedTokens)
	if computed := (after.PromptTokens - before.PromptTokens) - (after.CachedTokens - before.CachedTokens); computed > prompt+3 {
		t.Fatalf("4 choices computed %d prompt tokens, want the %d of the prompt once and one each for the others", computed, prompt)
	}
	streamed, su := e.stream(t, body)
	if len(streamed) != 4 || su.PromptTokens != u.PromptTokens || su.CompletionTokens != u.CompletionTokens {
		t.Fatalf("streamed %d choices, usage %+v, completion's %+v", len(streamed), su, u)
	}
	for i := range streamed {
		sameEntries(t, "streamed choice", streamed[i], choices[i], 1e-5)
	}
	greedy, gu := e.complete(t, e.body(t, map[string]any{"temperature": 0, "n": 3}))
	g1, gu1 := e.complete(t, e.body(t, map[string]any{"temperature": 0}))
	if len(greedy) != 3 || greedy[1].Content != greedy[0].Content || greedy[2].Content != greedy[0].Content || greedy[0].Content != g1[0].Content ||
		gu.CompletionTokens != 3*gu1.CompletionTokens || gu.PromptTokens != gu1.PromptTokens {
		t.Fatalf("greedy n=3: %+v usage %+v; n=1: %+v %+v", greedy, gu, g1, gu1)
	}
}

// TestLogitBiasTiny: a bias of -100 on the greedy reply's first token makes the reply start
// otherwise; +100 on a token makes every token of the reply that token, greedy and sampled,
// streamed or not, with a log-probability of about 0 under the biased distribution the server
// reports (checked against the model's logits plus the bias).
func TestLogitBiasTiny(t *testing.T) {
	e := newTinyLP(t, generate.Config{})
	plain, _ := e.complete(t, e.body(t, map[string]any{"temperature": 0, "logprobs": true}))
	first := e.check(t, plain[0], 0, 0, nil)[0]
	pushed, _ := e.complete(t, e.body(t, map[string]any{"temperature": 0, "logprobs": true, "logit_bias": map[string]float64{itoa(first): -100}}))
	if ids := e.check(t, pushed[0], 0, 0, map[int]float32{first: -100}); ids[0] == first {
		t.Fatalf("-100 on %d: the reply still starts with it", first)
	}
	sel, ok := e.tok.TokenID("SELECT")
	if !ok {
		t.Fatal("no token SELECT")
	}
	for _, temp := range []float64{0, 1} {
		body := e.body(t, map[string]any{"temperature": temp, "seed": 2, "max_tokens": 6, "logprobs": true, "top_logprobs": 1,
			"logit_bias": map[string]float64{itoa(sel): 100}})
		for _, cs := range [][]lpChoice{first2(e.complete(t, body)), first2(e.stream(t, body))} {
			if cs[0].Content != strings.Repeat("SELECT", 6) {
				t.Fatalf("T=%g, +100 on SELECT: %q", temp, cs[0].Content)
			}
			e.check(t, cs[0], temp, 1, map[int]float32{sel: 100})
			for _, en := range cs[0].Entries {
				if *en.Logprob < -1e-3 {
					t.Fatalf("T=%g: forced token's logprob %v", temp, *en.Logprob)
				}
			}
		}
	}
}

func first2(c []lpChoice, _ lpUsage) []lpChoice { return c }

func itoa(id int) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// TestLogprobsStopToken: a reply that ends on <|im_end|> has it as its last entry (counted in
// usage, not in the content); streamed, it rides on the finish chunk, after the entries of
// the content chunks, each chunk's entries spelling its text.
func TestLogprobsStopToken(t *testing.T) {
	srv, _ := newServer(t, 0)
	e := &tinyLP{url: srv.URL, msgs: []chat.Message{{Role: chat.RoleUser, Content: "How many?"}}}
	body := `{"messages":[{"role":"user","content":"How many?"}],"logprobs":true}`
	spell := func(c lpChoice) string {
		var b []byte
		for _, en := range c.Entries {
			for _, v := range en.Bytes {
				b = append(b, byte(v))
			}
		}
		return string(b)
	}
	plain, u := e.complete(t, body)
	streamed, _ := e.stream(t, body)
	for _, c := range []lpChoice{plain[0], streamed[0]} {
		if c.Content != reply || c.Finish != "stop" || spell(c) != reply+"<|im_end|>" || len(c.Entries) != u.CompletionTokens {
			t.Fatalf("choice %q %s: entries spell %q (%d for %d completion tokens)", c.Content, c.Finish, spell(c), len(c.Entries), u.CompletionTokens)
		}
	}
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"How many?"}],"logprobs":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := sseEvents(t, resp.Body)
	for i, l := range events {
		var c struct {
			Choices []struct {
				Delta        struct{ Content *string }
				FinishReason *string         `json:"finish_reason"`
				Logprobs     json.RawMessage `json:"logprobs"`
			}
		}
		json.Unmarshal([]byte(l), &c)
		ch := c.Choices[0]
		var lp struct{ Content []lpEntry }
		json.Unmarshal(ch.Logprobs, &lp)
		var text strings.Builder
		for _, en := range lp.Content {
			text.WriteString(en.Token)
		}
		switch {
		case i == 0 && string(ch.Logprobs) != "null":
			t.Fatalf("role chunk with logprobs: %s", l)
		case i == len(events)-1 && (ch.FinishReason == nil || text.String() != "<|im_end|>"):
			t.Fatalf("finish chunk: %s", l)
		case i > 0 && i < len(events)-1 && (ch.Delta.Content == nil || text.String() != *ch.Delta.Content):
			t.Fatalf("content chunk's entries spell %q: %s", text.String(), l)
		}
	}
}

// TestOfficialNodeClientLogprobs runs the official OpenAI Node client (scripts/
// check_serve_logprobs.mjs) with n 2, logprobs, top_logprobs 2 and a logit_bias, plain and
// streamed through the client's stream helper, which gathers the chunks' logprobs: both give
// two choices whose entries spell the reply and its <|im_end|>, the same numbers both ways, and
// usage counting both choices; then plain with return_tokens_as_token_ids, whose tokens and
// top tokens are "token_id:ID" of the bytes they carry, the rest as plain. It skips unless node
// is on PATH and CHAINEDSQL_NODE_MODULES names a node_modules folder holding the npm package
// openai.
func TestOfficialNodeClientLogprobs(t *testing.T) {
	mods := os.Getenv("CHAINEDSQL_NODE_MODULES")
	node, err := exec.LookPath("node")
	if mods == "" || err != nil {
		t.Skip("set CHAINEDSQL_NODE_MODULES to a node_modules folder with the npm package openai (and have node on PATH)")
	}
	srv, _ := newServer(t, 0)
	script, _ := filepath.Abs(filepath.Join("..", "..", "scripts", "check_serve_logprobs.mjs"))
	cmd := exec.Command(node, script, srv.URL+"/v1", "toy-student")
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	raw, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	var runs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Mode    string
			Usage   lpUsage
			Choices []struct {
				Index    int
				Content  string
				Finish   string
				Logprobs []lpEntry
			}
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if len(r.Choices) != 2 || r.Usage.CompletionTokens != 2*(len(reply)+1) {
			t.Fatalf("%s: %d choices, usage %+v", r.Mode, len(r.Choices), r.Usage)
		}
		if r.Mode == "ids" {
			for _, c := range r.Choices {
				for j := range c.Logprobs {
					e := &c.Logprobs[j]
					e.Token = toyToken(t, e.Token, e.Bytes)
					for k := range e.Top {
						e.Top[k].Token = toyToken(t, e.Top[k].Token, e.Top[k].Bytes)
					}
				}
			}
		}
		for i, c := range r.Choices {
			var spelt strings.Builder
			for _, e := range c.Logprobs {
				spelt.WriteString(e.Token)
				if len(e.Top) != 2 || *e.Logprob > 0 {
					t.Fatalf("%s choice %d: entry %+v", r.Mode, i, e)
				}
			}
			if c.Index != i || c.Content != reply || c.Finish != "stop" || spelt.String() != reply+"<|im_end|>" {
				t.Fatalf("%s choice %d: index %d %q %s, entries spell %q", r.Mode, i, c.Index, c.Content, c.Finish, spelt.String())
			}
		}
		b, _ := json.Marshal(r.Choices)
		runs = append(runs, string(b))
	}
	if len(runs) != 3 || runs[0] != runs[1] || runs[0] != runs[2] {
		t.Fatalf("plain, streamed and with token ids differ:\n%s", raw)
	}
}

// toyToken checks that token is "token_id:ID" with ID the toy byte tokenizer's id of bytes, and
// returns ID's text.
func toyToken(t *testing.T, token string, bytes []int) string {
	t.Helper()
	b := make([]byte, len(bytes))
	for i, v := range bytes {
		b[i] = byte(v)
	}
	id, ok := gentest.ByteTokenizer{}.TokenID(string(b))
	if len(b) == 1 {
		id, ok = int(b[0]), true
	}
	if !ok || token != "token_id:"+strconv.Itoa(id) {
		t.Fatalf("token %q with bytes %v: want token_id:%d", token, bytes, id)
	}
	return gentest.ByteTokenizer{}.Decode([]int{id})
}
