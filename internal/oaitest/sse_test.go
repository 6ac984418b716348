package oaitest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sse parses a stream body into its data payloads and comment lines.
func sse(t *testing.T, b []byte) (data []map[string]any, comments []string, done bool) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatalf("chunk %q: %v", line, err)
			}
			data = append(data, m)
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	return data, comments, done
}

// collect joins a stream's deltas per field and returns the finish reason and the last usage.
func collect(data []map[string]any) (fields map[string]string, finish string, usage map[string]any) {
	fields = map[string]string{}
	for _, c := range data {
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		chs, _ := c["choices"].([]any)
		for _, ch := range chs {
			m := ch.(map[string]any)
			if f, ok := m["finish_reason"].(string); ok {
				finish = f
			}
			d, _ := m["delta"].(map[string]any)
			for k, v := range d {
				switch x := v.(type) {
				case string:
					fields[k] += x
				case []any:
					for _, e := range x {
						fields[k] += e.(map[string]any)["text"].(string)
					}
				}
			}
		}
	}
	return fields, finish, usage
}

func streamBody(extra string) string {
	return `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]` + extra + `}`
}

func TestStreamShapes(t *testing.T) {
	think, content := "Ünïcödé reasoning, long enough to need several chunks 🤔.", "<sql>SELECT 'ß'</sql>"
	script := func(Request) Response { return Response{Think: think, Content: content} }
	cases := []struct {
		personality string
		field       string // where the reasoning must arrive
		comment     string
	}{
		{"vllm", "reasoning", ""},
		{"vllm-legacy", "reasoning_content", ""},
		{"deepseek", "reasoning_content", ": keep-alive"},
		{"openrouter", "reasoning_details", ": OPENROUTER PROCESSING"},
	}
	for _, c := range cases {
		t.Run(c.personality, func(t *testing.T) {
			p := Personalities[c.personality]
			srv := NewServer(t, script, WithPersonality(p), WithModels("m"))
			resp, b, err := post(t, srv, "", streamBody(""))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", resp, err)
			}
			data, comments, done := sse(t, b)
			fields, finish, usage := collect(data)
			if !done || finish != "stop" || fields["content"] != content || fields[c.field] != think {
				t.Errorf("done %v finish %q fields %q", done, finish, fields)
			}
			if (c.comment == "") != (len(comments) == 0) || (c.comment != "" && comments[0] != c.comment) {
				t.Errorf("comments %q", comments)
			}
			if usage == nil || usage["completion_tokens"] == nil {
				t.Errorf("no usage: %v", usage)
			}
			if p.DeepSeekCache && usage["prompt_cache_hit_tokens"] == nil {
				t.Errorf("deepseek usage %v", usage)
			}
			if p.NullUsageDetails && usage["completion_tokens_details"] != nil {
				t.Errorf("details not null: %v", usage)
			}
		})
	}
}

func TestPersonalityRules(t *testing.T) {
	script := func(Request) Response { return Response{Think: "T", Content: ""} }
	// DashScope: thinking by default, and then only streamed.
	ds := NewServer(t, script, WithPersonality(Personalities["dashscope"]), WithModels("m"))
	resp, b, _ := post(t, ds, "", `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(string(b), DashScopeNonStreamMessage) {
		t.Errorf("dashscope plain: %d %s", resp.StatusCode, b)
	}
	if resp, _, _ := post(t, ds, "", `{"model":"m","enable_thinking":false,"messages":[{"role":"user","content":"q"}]}`); resp.StatusCode != 200 {
		t.Errorf("dashscope without thinking: %d", resp.StatusCode)
	}
	if resp, _, _ := post(t, ds, "", `{"model":"m","chat_template_kwargs":{"enable_thinking":true},"messages":[{"role":"user","content":"q"}]}`); resp.StatusCode != 400 {
		t.Errorf("dashscope ignores chat_template_kwargs: %d", resp.StatusCode)
	}
	// vLLM: strict model ids in its own error shape; null content; thinking off by template kwargs.
	v := NewServer(t, script, WithPersonality(Personalities["vllm"]), WithModels("m"))
	resp, b, _ = post(t, v, "", `{"model":"other","messages":[{"role":"user","content":"q"}]}`)
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"object":"error"`) || !strings.Contains(string(b), "other") {
		t.Errorf("vllm unknown model: %d %s", resp.StatusCode, b)
	}
	_, b, _ = post(t, v, "", `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	if !bytes.Contains(b, []byte(`"content":null`)) || !bytes.Contains(b, []byte(`"reasoning":"T"`)) || !bytes.Contains(b, []byte(`"completion_tokens_details":null`)) {
		t.Errorf("vllm body %s", b)
	}
	_, b, _ = post(t, v, "", `{"model":"m","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"q"}]}`)
	if bytes.Contains(b, []byte(`"reasoning"`)) {
		t.Errorf("thinking off still reasons: %s", b)
	}
	// Z.ai: content filter finish is "sensitive".
	z := NewServer(t, script, WithPersonality(Personalities["zai"]), WithModels("m"), WithSequence(ContentFilter))
	if _, b, _ := post(t, z, "", `{"model":"m","messages":[{"role":"user","content":"q"}]}`); !bytes.Contains(b, []byte(`"finish_reason":"sensitive"`)) {
		t.Errorf("zai filter %s", b)
	}
	// DeepSeek: blank lines before a plain body, still valid JSON after trimming.
	d := NewServer(t, script, WithPersonality(Personalities["deepseek"]), WithModels("m"))
	if _, b, _ := post(t, d, "", `{"model":"m","messages":[{"role":"user","content":"q"}]}`); !bytes.HasPrefix(b, []byte("\n")) || !json.Valid(bytes.TrimSpace(b)) {
		t.Errorf("deepseek plain %q", b)
	}
	// OpenAI: x-ratelimit headers and 429 with retry-after-ms past the budget.
	p := Personalities["openai"]
	p.RateLimit = 2
	o := NewServer(t, nil, WithPersonality(p), WithModels("m"))
	for i := 0; i < 3; i++ {
		resp, _, _ := post(t, o, "", `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
		want, left := http.StatusOK, []string{"1", "0", "0"}[i]
		if i == 2 {
			want = http.StatusTooManyRequests
			if resp.Header.Get("Retry-After-Ms") == "" {
				t.Error("429 without retry-after-ms")
			}
		}
		if resp.StatusCode != want || resp.Header.Get("X-Ratelimit-Remaining-Requests") != left || resp.Header.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Errorf("request %d: %d remaining %q", i, resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Requests"))
		}
	}
	if o.RateLimited() != 1 {
		t.Errorf("rate limited %d", o.RateLimited())
	}
}

func TestStreamFaultsOnTheWire(t *testing.T) {
	for _, f := range []Fault{StreamReset, StreamCut, StreamError, ProviderFault} {
		srv := NewServer(t, func(Request) Response {
			return Response{Think: strings.Repeat("t", 100), Content: strings.Repeat("c", 100)}
		},
			WithSequence(f))
		resp, b, err := post(t, srv, "", streamBody(""))
		switch f {
		case StreamReset:
			if err == nil {
				t.Errorf("%s: no transport error", f)
			}
			continue
		}
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", f, resp, err)
		}
		data, _, done := sse(t, append([]byte(nil), b...))
		_, finish, _ := collect(data)
		switch f {
		case StreamCut:
			if done || finish != "" {
				t.Errorf("%s: done %v finish %q", f, done, finish)
			}
		case StreamError:
			if done || !bytes.Contains(b, []byte(`data: {"error":`)) {
				t.Errorf("%s: %q", f, b)
			}
		case ProviderFault:
			if !done || finish != "error" {
				t.Errorf("%s: finish %q", f, finish)
			}
		}
	}
}
