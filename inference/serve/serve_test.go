package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/teachers"
)

const reply = "<think>count them</think>\n<sql>SELECT count(*) FROM t</sql>"

func newServer(t *testing.T, delay time.Duration) (*httptest.Server, *student.Student) {
	t.Helper()
	toy := gentest.Scripted(reply)
	toy.Delay = delay
	st, err := student.New(toy, gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serve.Handler(st, nil, serve.Config{}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv, st
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	return postJSON(t, url+"/v1/chat/completions", "", body)
}

// postJSON posts a JSON body to url, with "Authorization: Bearer key" when key is set, and
// returns the status and the JSON body of the answer.
func postJSON(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	r, _ := http.NewRequest("POST", url, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("status %d: body is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func TestNonStreaming(t *testing.T) {
	srv, _ := newServer(t, 0)
	code, out := post(t, srv.URL, `{"model":"toy-student","messages":[{"role":"user","content":"How many?"}],"temperature":0}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	if msg["content"] != reply || msg["role"] != "assistant" || ch["finish_reason"] != "stop" {
		t.Fatalf("choice %v", ch)
	}
	u := out["usage"].(map[string]any)
	if u["completion_tokens"].(float64) != float64(len(reply)+1) || u["total_tokens"].(float64) != u["prompt_tokens"].(float64)+u["completion_tokens"].(float64) {
		t.Fatalf("usage %v", u)
	}
	if out["object"] != "chat.completion" || !strings.HasPrefix(out["id"].(string), "chatcmpl-") || out["model"] != "toy-student" {
		t.Fatalf("envelope %v", out)
	}
	// Content as a list of text parts; max_tokens cuts with finish_reason length.
	code, out = post(t, srv.URL, `{"messages":[{"role":"user","content":[{"type":"text","text":"How "},{"type":"text","text":"many?"}]}],"max_tokens":7}`)
	ch = out["choices"].([]any)[0].(map[string]any)
	if code != 200 || ch["message"].(map[string]any)["content"] != reply[:7] || ch["finish_reason"] != "length" {
		t.Fatalf("parts + max_tokens: %d %v", code, out)
	}
}

func TestErrors(t *testing.T) {
	srv, _ := newServer(t, 0)
	cases := []struct {
		body, code, want string
		status           int
	}{
		{`{"messages":`, "", "not a valid", 400},
		{`{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, "model_not_found", `"gpt-9"`, 404},
		{`{"messages":[]}`, "", "messages", 400},
		{`{"messages":[{"role":"user","content":"x"}],"n":0}`, "integer_below_min_value", "n: 0", 400},
		{`{"messages":[{"role":"user","content":"x"}],"n":17}`, "integer_above_max_value", "maximum of 16", 400},
		{`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, "", "top_logprobs: 21", 400},
		{`{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, "", "needs logprobs", 400},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"x":1}}`, "", "logit_bias", 400},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"5":101}}`, "", "outside [-100, 100]", 400},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"5":"up"}}`, "", "logit_bias", 400},
		{`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"259":1}}`, "", "outside the model's vocabulary [0, 259)", 400},
		{`{"messages":[{"role":"user","content":"x"}],"temperature":3}`, "", "temperature", 400},
		{`{"messages":[{"role":"user","content":"x"}],"stop":[""]}`, "", "stop[0]", 400},
		{`{"messages":[{"role":"user","content":"x"}],"stop":[` + strings.Repeat(`"a",`, serve.MaxStops) + `"b"]}`, "", "stop: 65 strings, over the maximum of 64", 400},
		{`{"messages":[{"role":"user","content":"x"}],"stop":"` + strings.Repeat("a", serve.MaxStopBytes+1) + `"}`, "", "stop[0]: 1025 bytes, over the maximum of 1024", 400},
		{`{"messages":[{"role":"user","content":"x"}],"stop":["x","` + strings.Repeat("a", serve.MaxStopBytes+1) + `"]}`, "", "stop[1]: 1025 bytes", 400},
		{`{"messages":[{"role":"user","content":"x"}],"stop_token_ids":[` + strings.Repeat(`1,`, serve.MaxStopTokenIDs) + `1]}`, "", "stop_token_ids: 1025 ids, over the maximum of 1024", 400},
		{`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "", "image_url", 400},
		{`{"messages":[{"role":"wizard","content":"x"}]}`, "", "wizard", 400},
		{`{"messages":[{"role":"user","content":"` + strings.Repeat("x", 9000) + `"}]}`, "", "no room", 400},
	}
	for _, c := range cases {
		code, out := post(t, srv.URL, c.body)
		e, _ := out["error"].(map[string]any)
		if code != c.status || e == nil || !strings.Contains(e["message"].(string), c.want) || e["type"] == nil {
			t.Errorf("%.60s: status %d, body %v; want %d mentioning %q", c.body, code, out, c.status, c.want)
			continue
		}
		if c.code != "" && e["code"] != c.code {
			t.Errorf("%.60s: code %v, want %s", c.body, e["code"], c.code)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET completions: %d", resp.StatusCode)
	}
}

func TestModels(t *testing.T) {
	srv, _ := newServer(t, 0)
	oc := openaiClient(srv.URL)
	list, err := oc.ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 1 || list.Models[0].ID != "toy-student" {
		t.Fatalf("models %+v", list.Models)
	}
	m, err := oc.GetModel(context.Background(), "toy-student")
	if err != nil || m.ID != "toy-student" {
		t.Fatalf("model: %+v %v", m, err)
	}
	if _, err := oc.GetModel(context.Background(), "nope"); err == nil {
		t.Fatal("unknown model found")
	} else {
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 404 {
			t.Fatalf("unknown model: %v", err)
		}
	}
}

func openaiClient(url string) *openai.Client {
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = url + "/v1"
	return openai.NewClientWithConfig(cfg)
}

func TestStreamingWithGoOpenAI(t *testing.T) {
	srv, _ := newServer(t, 0)
	oc := openaiClient(srv.URL)
	stream, err := oc.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model:         "toy-student",
		Messages:      []openai.ChatCompletionMessage{{Role: "user", Content: "How many?"}},
		Stream:        true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var content strings.Builder
	var finish openai.FinishReason
	var usage *openai.Usage
	chunks := 0
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if r.Usage != nil {
			usage = r.Usage
		}
		for _, c := range r.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if content.String() != reply || finish != openai.FinishReasonStop || chunks < 5 {
		t.Fatalf("streamed %q in %d chunks, finish %q", content.String(), chunks, finish)
	}
	if usage == nil || usage.CompletionTokens != len(reply)+1 {
		t.Fatalf("usage %+v", usage)
	}
}

func TestStreamWireFormat(t *testing.T) {
	srv, _ := newServer(t, 0)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true,"stop":"</think>"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 3 || lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("events %q", lines)
	}
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		var c struct {
			Object  string
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if !strings.HasPrefix(l, "data: ") || json.Unmarshal([]byte(l[6:]), &c) != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("bad event %q", l)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if text.String() != "<think>count them" {
		t.Fatalf("stop string: streamed %q", text.String())
	}
}

// The teachers' client (what distill uses for every endpoint) drives the server as a teacher.
func TestTeachersClientAsEndpoint(t *testing.T) {
	srv, st := newServer(t, 2*time.Millisecond)
	h, err := policies.FromEndpoint(teachers.Endpoint{Name: "student", BaseURL: srv.URL + "/v1", Model: "toy-student", MaxConcurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			msgs := []chat.Message{{Role: chat.RoleSystem, Content: "dialect sqlite"}, {Role: chat.RoleUser, Content: strings.Repeat("?", i+1)}}
			r, err := h.Policy.Chat(context.Background(), msgs, chat.Options{Temperature: chat.Float(0), MaxTokens: 200})
			if err != nil {
				t.Errorf("chat %d: %v", i, err)
				return
			}
			// The teachers client moves inline <think> into Reasoning.
			if !strings.Contains(r.Content, "<sql>SELECT count(*) FROM t</sql>") || r.FinishReason != chat.FinishStop || r.Usage.CompletionTokens != len(reply)+1 {
				t.Errorf("chat %d: %+v", i, r)
			}
		})
	}
	wg.Wait()
	if s := st.Generator().Stats(); s.MaxBatchSeen < 2 {
		t.Fatalf("8 concurrent HTTP requests never shared a Forward (max batch %d)", s.MaxBatchSeen)
	}
}

// A client that goes away mid-stream ends its generation.
func TestClientDisconnectStopsGeneration(t *testing.T) {
	toy := gentest.Scripted(strings.Repeat("la ", 2000))
	toy.Delay = time.Millisecond
	st, err := student.New(toy, gentest.ByteTokenizer{}, student.Config{ModelID: "toy"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(serve.Handler(st, nil, serve.Config{}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"sing"}],"stream":true,"max_tokens":5000}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for st.Generator().Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("generation still running after the client left: %+v", st.Generator().Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g := st.Generator().Stats().Generated; g >= 5000 {
		t.Fatalf("%d tokens generated for a client that left", g)
	}
}

// TestSharedSystemPrompt: many clients at once with one long system prompt and their own
// questions: the server computes the system prompt once (the student's generator shares its KV
// blocks), every reply is right, and prompt_tokens_details.cached_tokens reports the reuse.
func TestSharedSystemPrompt(t *testing.T) {
	srv, st := newServer(t, 2*time.Millisecond)
	system := strings.Repeat("You answer with one SQLite statement over the schema below. ", 8)
	const clients = 8
	cached := make([]int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"messages": []map[string]string{
				{"role": "system", "content": system},
				{"role": "user", "content": strings.Repeat("How many rows? ", i+1)},
			}})
			code, out := post(t, srv.URL, string(body))
			if code != 200 {
				t.Errorf("client %d: status %d: %v", i, code, out)
				return
			}
			if c := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; c != reply {
				t.Errorf("client %d: reply %q", i, c)
			}
			u := out["usage"].(map[string]any)
			cached[i] = int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
		})
	}
	wg.Wait()
	total, zero := 0, 0
	for _, c := range cached {
		total += c
		if c == 0 {
			zero++
		}
	}
	if zero != 1 || total < (clients-1)*len(system) {
		t.Fatalf("cached tokens per client %v: want the system prompt (%d bytes) computed by one client only", cached, len(system))
	}
	if s := st.Generator().Stats(); s.CachedTokens != int64(total) || s.PrefixHits != clients-1 {
		t.Fatalf("generator stats %+v, cached tokens reported %d", s, total)
	}
}

// lockedLog is a request log the handler writes while the test reads it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was logged since the last call.
func (l *lockedLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// TestUnsupportedFields: each field the server cannot honour is refused (400, OpenAI's error
// shape with the field as param and code unsupported_parameter) when it asks for something, and
// accepted without a word in the log when it asks for nothing (null, an empty list, tool_choice
// "none", response_format {"type": "text"}, ...), as the official clients may send them, as
// are the honoured logprobs, top_logprobs and logit_bias at their defaults; a field the
// server does not know is answered and named in the log as ignored.
func TestUnsupportedFields(t *testing.T) {
	srv, logw := loggedToyServer(t)
	for _, c := range []struct {
		field, value string
		refused      bool
	}{
		{"tools", `[{"type": "function", "function": {"name": "f"}}]`, true},
		{"tools", `{}`, true},
		{"tools", `[]`, false},
		{"tools", `null`, false},
		{"functions", `[{"name": "f"}]`, true},
		{"functions", `[]`, false},
		{"functions", `null`, false},
		{"tool_choice", `"auto"`, true},
		{"tool_choice", `"required"`, true},
		{"tool_choice", `{"type": "function", "function": {"name": "f"}}`, true},
		{"tool_choice", `"none"`, false},
		{"tool_choice", `null`, false},
		{"function_call", `"auto"`, true},
		{"function_call", `"none"`, false},
		{"parallel_tool_calls", `true`, true},
		{"parallel_tool_calls", `false`, false},
		{"response_format", `{"type": "json_object"}`, true},
		{"response_format", `{"type": "json_schema", "json_schema": {"name": "x"}}`, true},
		{"response_format", `{}`, true},
		{"response_format", `"text"`, true},
		{"response_format", `{"type": "text"}`, false},
		{"response_format", `null`, false},
		{"logprobs", `false`, false},
		{"logprobs", `null`, false},
		{"top_logprobs", `0`, false},
		{"top_logprobs", `null`, false},
		{"logit_bias", `{}`, false},
		{"logit_bias", `null`, false},
		{"ignore_eos", `true`, true},
		{"ignore_eos", `false`, false},
		{"min_tokens", `5`, true},
		{"min_tokens", `0`, false},
		{"include_stop_str_in_output", `true`, false},
		{"include_stop_str_in_output", `false`, false},
		{"stop_token_ids", `[]`, false},
		{"stop_token_ids", `null`, false},
	} {
		name := c.field + " " + c.value
		code, out := post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"`+c.field+`":`+c.value+`}`)
		logged := logw.take()
		if !c.refused {
			if code != 200 || strings.Contains(logged, c.field) {
				t.Errorf("%s: status %d (%v), log %q; want 200 and nothing logged", name, code, out, logged)
			}
			continue
		}
		e, _ := out["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != c.field || e["code"] != "unsupported_parameter" || e["type"] != "invalid_request_error" ||
			!strings.Contains(e["message"].(string), c.field) {
			t.Errorf("%s: status %d, body %v; want 400 unsupported_parameter about %s", name, code, out, c.field)
		}
	}
	code, _ := post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"frobnicate":1,"tools":[],"chat_template_kwargs":{}}`)
	if logged := logw.take(); code != 200 || !strings.Contains(logged, "chat: fields ignored: chat_template_kwargs, frobnicate\n") {
		t.Errorf("unknown fields: status %d, log %q; want 200 and both named as ignored, tools not", code, logged)
	}
}

// TestStopTokenIDs: vLLM's stop_token_ids is honoured: the reply ends at the first of them it
// samples (finish_reason "stop", the token's text not in the reply, as vLLM), beside the
// student's own stops; an id outside the vocabulary is a 400. Before, the field was ignored
// (named in the log only) and the reply ran on past the token.
func TestStopTokenIDs(t *testing.T) {
	srv, logw := loggedToyServer(t)
	cut := strings.IndexByte(reply, 'o')
	code, out := post(t, srv.URL, fmt.Sprintf(`{"messages":[{"role":"user","content":"x"}],"temperature":0,"logprobs":true,"stop_token_ids":[%d]}`, 'o'))
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	c := out["choices"].([]any)[0].(map[string]any)
	if got := c["message"].(map[string]any)["content"]; got != reply[:cut] || c["finish_reason"] != "stop" {
		t.Errorf("reply %q (%v), want %q (stop): the reply ends at the stop token id", got, c["finish_reason"], reply[:cut])
	}
	if lps := c["logprobs"].(map[string]any)["content"].([]any); len(lps) != cut+1 || lps[cut].(map[string]any)["token"] != "o" {
		t.Errorf("logprobs %v, want the reply's %d entries and the stop token's last", lps, cut)
	}
	if u := out["usage"].(map[string]any); u["completion_tokens"] != float64(cut+1) {
		t.Errorf("completion_tokens %v, want %d (the reply's tokens and the stop token)", u["completion_tokens"], cut+1)
	}
	if logged := logw.take(); strings.Contains(logged, "stop_token_ids") {
		t.Errorf("log %q names stop_token_ids as ignored", logged)
	}
	// MaxStopTokenIDs ids are taken, the one the reply samples still cutting it (one more is a
	// 400, TestErrors).
	ids := strings.Repeat("1,", serve.MaxStopTokenIDs-1) + strconv.Itoa('o')
	code, out = post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"temperature":0,"stop_token_ids":[`+ids+`]}`)
	if code != 200 {
		t.Fatalf("%d stop_token_ids: status %d: %v", serve.MaxStopTokenIDs, code, out)
	}
	if c := out["choices"].([]any)[0].(map[string]any); c["message"].(map[string]any)["content"] != reply[:cut] || c["finish_reason"] != "stop" {
		t.Errorf("%d stop_token_ids: %v, want %q (stop)", serve.MaxStopTokenIDs, c, reply[:cut])
	}
	code, out = post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"stop_token_ids":[100000000]}`)
	if e, _ := out["error"].(map[string]any); code != 400 || e == nil || !strings.Contains(e["message"].(string), "100000000") {
		t.Errorf("stop id outside the vocabulary: status %d, body %v; want 400 naming it", code, out)
	}
}

// TestIncludeStopStr: vLLM's include_stop_str_in_output true is honoured (docs/ROLLOUT.md, "Stop
// strings and the prefix property"): a reply a stop string ended keeps it, its text the
// decoding of its tokens (its logprobs entries, usage's completion tokens), streamed or not;
// false or left out, the text is cut before it while the entries still run through it. Before,
// true was a 400 (unsupported_parameter).
func TestIncludeStopStr(t *testing.T) {
	srv, logw := loggedToyServer(t)
	const stop = "</think>"
	end := strings.Index(reply, stop) + len(stop)
	for _, keep := range []string{"", `,"include_stop_str_in_output":false`, `,"include_stop_str_in_output":true`} {
		code, out := post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"temperature":0,"logprobs":true,"stop":"`+stop+`"`+keep+`}`)
		if code != 200 {
			t.Fatalf("%q: status %d: %v", keep, code, out)
		}
		c := out["choices"].([]any)[0].(map[string]any)
		want := reply[:end-len(stop)]
		if strings.HasSuffix(keep, "true") {
			want = reply[:end]
		}
		if got := c["message"].(map[string]any)["content"]; got != want || c["finish_reason"] != "stop" {
			t.Errorf("%q: reply %q (%v), want %q (stop)", keep, got, c["finish_reason"], want)
		}
		var spelt strings.Builder
		for _, e := range c["logprobs"].(map[string]any)["content"].([]any) {
			spelt.WriteString(e.(map[string]any)["token"].(string))
		}
		if u := out["usage"].(map[string]any); spelt.String() != reply[:end] || u["completion_tokens"] != float64(end) {
			t.Errorf("%q: entries spell %q, %v completion tokens; want %q, %d", keep, spelt.String(), u["completion_tokens"], reply[:end], end)
		}
	}
	if logged := logw.take(); strings.Contains(logged, "include_stop_str_in_output") {
		t.Errorf("log %q names include_stop_str_in_output as ignored", logged)
	}
	var text strings.Builder
	for _, ch := range streamChunks(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"temperature":0,"stream":true,"stop":"`+stop+`","include_stop_str_in_output":true}`) {
		text.WriteString(ch.text)
	}
	if text.String() != reply[:end] {
		t.Errorf("streamed %q, want %q", text.String(), reply[:end])
	}
}

// TestIncludeStopStrTokenIDs: with include_stop_str_in_output true, a reply that a
// stop_token_ids id ended keeps that token's text, as vLLM keeps it (its
// tests/detokenizer/test_stop_strings.py, _stop_token_id: " organization" in the text), so the
// text is the decoding of every entry, streamed and not, the streamed chunk that carries the
// stop token's text carrying its entry; the student's own stops (special tokens) add no text,
// as vLLM's skip_special_tokens drops theirs. Without the field the text stops before it, as
// before. Before, the text left the stop token out with the field too, so a loop that sends
// the text back lost that token from the next prompt.
func TestIncludeStopStrTokenIDs(t *testing.T) {
	srv, _ := loggedToyServer(t)
	cut := strings.IndexByte(reply, 'o')
	for _, tc := range []struct{ extra, want string }{
		{fmt.Sprintf(`,"stop_token_ids":[%d],"include_stop_str_in_output":true`, 'o'), reply[:cut+1]},
		{fmt.Sprintf(`,"stop_token_ids":[%d]`, 'o'), reply[:cut]},
		{`,"include_stop_str_in_output":true`, reply}, // the student's own stop, <|im_end|>: no text
	} {
		code, out := post(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"temperature":0,"logprobs":true`+tc.extra+`}`)
		if code != 200 {
			t.Fatalf("%s: status %d: %v", tc.extra, code, out)
		}
		c := out["choices"].([]any)[0].(map[string]any)
		if got := c["message"].(map[string]any)["content"]; got != tc.want || c["finish_reason"] != "stop" {
			t.Errorf("%s: reply %q (%v), want %q (stop)", tc.extra, got, c["finish_reason"], tc.want)
		}
		entries := c["logprobs"].(map[string]any)["content"].([]any)
		if u := out["usage"].(map[string]any); u["completion_tokens"] != float64(len(entries)) {
			t.Errorf("%s: %v completion tokens, %d entries", tc.extra, u["completion_tokens"], len(entries))
		}
		if !strings.Contains(tc.extra, "true") {
			continue
		}
		if tc.want == reply[:cut+1] && len(entries) != cut+1 {
			t.Errorf("%s: %d entries, want %d", tc.extra, len(entries), cut+1)
		}
		var text, spelt strings.Builder
		for _, ch := range streamChunks(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"temperature":0,"logprobs":true,"stream":true`+tc.extra+`}`) {
			text.WriteString(ch.text)
			spelt.WriteString(strings.Join(ch.tokens, ""))
			if tc.want == reply[:cut+1] && strings.HasSuffix(ch.text, "o") && (len(ch.tokens) == 0 || ch.tokens[len(ch.tokens)-1] != "o") {
				t.Errorf("%s: the chunk %q carries no entry of its stop token", tc.extra, ch.text)
			}
		}
		if text.String() != tc.want {
			t.Errorf("%s: streamed %q, want %q", tc.extra, text.String(), tc.want)
		}
		if tc.want == reply[:cut+1] && spelt.String() != tc.want {
			t.Errorf("%s: streamed entries spell %q, want %q", tc.extra, spelt.String(), tc.want)
		}
	}
}

// streamChunk is a streamed chunk's content and the tokens of its logprobs entries.
type streamChunk struct {
	text   string
	tokens []string
}

// streamChunks posts body (a streamed request) and returns its chunks' choices in order.
func streamChunks(t *testing.T, url, body string) []streamChunk {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []streamChunk
	for _, ev := range sseEvents(t, resp.Body) {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []struct {
						Token string `json:"token"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatal(err)
		}
		for _, ch := range chunk.Choices {
			c := streamChunk{text: ch.Delta.Content}
			if ch.Logprobs != nil {
				for _, e := range ch.Logprobs.Content {
					c.tokens = append(c.tokens, e.Token)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// loggedToyServer serves a student scripted to answer reply over the byte tokenizer, logging
// to the lockedLog it returns.
func loggedToyServer(t *testing.T) (*httptest.Server, *lockedLog) {
	t.Helper()
	st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	logw := &lockedLog{}
	srv := httptest.NewServer(serve.Handler(st, log.New(logw, "", 0), serve.Config{}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv, logw
}

// TestStopsAtLimits: MaxStops stop strings of MaxStopBytes each are taken, and the one the
// reply holds still cuts it; one more string, or one more byte, is 400 (TestErrors).
func TestStopsAtLimits(t *testing.T) {
	srv, _ := newServer(t, 0)
	stops := make([]string, serve.MaxStops)
	for i := range stops {
		stops[i] = fmt.Sprintf("%0*d", serve.MaxStopBytes, i)
	}
	stops[serve.MaxStops-1] = "</think>"
	body, err := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}, "stop": stops})
	if err != nil {
		t.Fatal(err)
	}
	code, out := post(t, srv.URL, string(body))
	if code != 200 {
		t.Fatalf("%d stop strings of %d bytes: %d %v", serve.MaxStops, serve.MaxStopBytes, code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	if got := ch["message"].(map[string]any)["content"]; got != "<think>count them" || ch["finish_reason"] != "stop" {
		t.Fatalf("cut at </think>: %q, %v", got, ch["finish_reason"])
	}
}
