package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestServeRefusals: the built `student serve` refuses what it cannot honour in OpenAI's error
// shape (a max_tokens below 1 or beyond the context left after the prompt, tools, n above
// --max-n, top_logprobs above 20, a logit_bias outside the model's vocabulary), answers a
// request with fields it does not know (ignoring them, as vLLM does) and one with n, logprobs
// and logit_bias, and its messages carry no internal package prefixes.
func TestServeRefusals(t *testing.T) {
	bin := testbin.Build(t, ".")
	_, base, _ := startServe(t, bin, "--max-n", "4")
	const msgs = `"messages": [{"role": "user", "content": "SELECT 1"}]`
	for _, c := range []struct {
		name, body  string
		status      int
		param, code string
		says        string
	}{
		{"max_tokens 0", `{` + msgs + `, "max_tokens": 0}`, 400, "max_tokens", "integer_below_min_value", "below the minimum of 1"},
		{"max_tokens negative", `{` + msgs + `, "max_tokens": -5}`, 400, "max_tokens", "integer_below_min_value", "-5"},
		{"max_completion_tokens 0", `{` + msgs + `, "max_completion_tokens": 0}`, 400, "max_completion_tokens", "integer_below_min_value", "minimum"},
		{"max_tokens beyond the context", `{` + msgs + `, "max_tokens": 100000000}`, 400, "max_tokens", "context_length_exceeded", "ask for at most"},
		{"tools", `{` + msgs + `, "max_tokens": 2, "tools": [{"type": "function", "function": {"name": "f"}}]}`, 400, "tools", "unsupported_parameter", "tools are not supported"},
		{"tool_choice", `{` + msgs + `, "max_tokens": 2, "tool_choice": "auto"}`, 400, "tool_choice", "unsupported_parameter", "not supported"},
		{"tools empty", `{` + msgs + `, "max_tokens": 2, "tools": []}`, 200, "", "", ""},
		{"unknown fields", `{` + msgs + `, "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": true}, "frobnicate": 1}`, 200, "", "", ""},
		{"bad role", `{"messages": [{"role": "wizard", "content": "x"}], "max_tokens": 2}`, 400, "", "", "wizard"},
		{"n above --max-n", `{` + msgs + `, "max_tokens": 2, "n": 5}`, 400, "n", "integer_above_max_value", "maximum of 4"},
		{"n, logprobs, logit_bias", `{` + msgs + `, "max_tokens": 2, "n": 4, "temperature": 1, "logprobs": true, "top_logprobs": 3, "logit_bias": {"11": 5}}`, 200, "", "", ""},
		{"top_logprobs above 20", `{` + msgs + `, "max_tokens": 2, "logprobs": true, "top_logprobs": 21}`, 400, "top_logprobs", "", "outside [0, 20]"},
		{"logit_bias outside the vocabulary", `{` + msgs + `, "max_tokens": 2, "logit_bias": {"151936": 5}}`, 400, "logit_bias", "", "outside the model's vocabulary [0, 151936)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, raw)
			}
			if c.status == 200 {
				return
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("not OpenAI's error shape: %s", raw)
			}
			t.Logf("%s", raw)
			if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.says) {
				t.Errorf("type %q message %q, want invalid_request_error saying %q", e.Error.Type, e.Error.Message, c.says)
			}
			if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
				t.Errorf("param %v, want %q", e.Error.Param, c.param)
			}
			if c.code != "" && (e.Error.Code == nil || *e.Error.Code != c.code) {
				t.Errorf("code %v, want %q", e.Error.Code, c.code)
			}
			for _, p := range []string{"student:", "generate:", "invalid request:"} {
				if strings.Contains(e.Error.Message, p) {
					t.Errorf("message carries the internal prefix %q: %s", p, e.Error.Message)
				}
			}
		})
	}
}

// qwenGenerationConfig is Qwen2.5-7B-Instruct's generation_config.json.
const qwenGenerationConfig = `{"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
  "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"}`

// withGenerationConfig returns a model directory with dir's config and weights (linked) and
// the generation_config.json gen.
func withGenerationConfig(t *testing.T, dir, gen string) string {
	t.Helper()
	out := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(dir, f), filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "generation_config.json"), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServeSamplingDefaults drives the built `student serve` on requests that leave
// temperature, top_p and top_k out. On the tiny checkpoint (its generation_config.json has no
// sampling field, do_sample false) the start-up log says so, and n=4 gives four draws at
// temperature 1, not four copies of the greedy reply, which --temperature 0 asks for. On the
// checkpoint with Qwen2.5-Instruct's generation_config.json the log names the defaults taken
// and repetition_penalty as not applied, and a request without them gets the log-probabilities
// and reply of one sending them; --generation-config none with --top-k ignores the file. Bad
// values of the flags are usage errors.
func TestServeSamplingDefaults(t *testing.T) {
	bin := testbin.Build(t, ".")
	tiny := shared.Path(t, "models/tiny-qwen2-f32")
	qwen := withGenerationConfig(t, tiny, qwenGenerationConfig)
	start := func(model string, args ...string) (string, string) {
		t.Helper()
		args = append([]string{"serve", "--model", model, "--tokenizer", shared.Path(t, "tokenizer/qwen2.5"), "--addr", "127.0.0.1:0",
			"--cache-tokens", "-1"}, args...)
		_, base, _, before := startLogged(t, bin, args...)
		return base, strings.Join(before, "\n")
	}
	type choice struct {
		Message  struct{ Content string }
		Logprobs *struct {
			Content []struct{ Logprob float64 }
		}
	}
	ask := func(base string, body map[string]any) []choice {
		t.Helper()
		body["messages"] = []map[string]string{{"role": "user", "content": "How many singers are there?"}}
		body["max_tokens"] = 8
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Choices []choice }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", b, resp.StatusCode, err)
		}
		return out.Choices
	}
	distinct := func(cs []choice) int {
		seen := map[string]bool{}
		for _, c := range cs {
			seen[c.Message.Content] = true
		}
		return len(seen)
	}

	base, log := start(tiny)
	if want := "sampling defaults of a request that leaves them out: temperature 1, top_p 1, top_k off, max_tokens 2048 (" +
		filepath.Join(tiny, "generation_config.json") + " sets none of temperature, top_p, top_k, max_new_tokens; do_sample false is not read"; !strings.Contains(log, want) {
		t.Errorf("tiny's start-up log:\n%s\nwant %q", log, want)
	}
	if cs := ask(base, map[string]any{"n": 4, "seed": 1}); len(cs) != 4 || distinct(cs) < 3 {
		t.Errorf("tiny, n=4 without a temperature: %+v, want independent draws", cs)
	}
	base, log = start(tiny, "--temperature", "0")
	if cs := ask(base, map[string]any{"n": 4}); len(cs) != 4 || distinct(cs) != 1 || !strings.Contains(log, "; set by --temperature)") {
		t.Errorf("tiny --temperature 0, n=4: %+v, want one greedy reply; log:\n%s", cs, log)
	}

	base, log = start(qwen)
	if want := "temperature 0.7, top_p 0.8, top_k 20, max_tokens 2048 (from " + filepath.Join(qwen, "generation_config.json") +
		": temperature 0.7, top_p 0.8, top_k 20; not applied (this server has no such setting): repetition_penalty 1.05)"; !strings.Contains(log, want) {
		t.Errorf("Qwen2.5's start-up log:\n%s\nwant %q", log, want)
	}
	left := ask(base, map[string]any{"seed": 4, "logprobs": true})
	sent := ask(base, map[string]any{"seed": 4, "logprobs": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20})
	hot := ask(base, map[string]any{"seed": 4, "logprobs": true, "temperature": 1})
	lp := func(cs []choice) float64 { return cs[0].Logprobs.Content[0].Logprob }
	if left[0].Message.Content != sent[0].Message.Content || lp(left) != lp(sent) || lp(left) == lp(hot) {
		t.Errorf("Qwen2.5's defaults: left out %q (first logprob %v), sent %q (%v), temperature 1 %q (%v)",
			left[0].Message.Content, lp(left), sent[0].Message.Content, lp(sent), hot[0].Message.Content, lp(hot))
	}
	neutral := ask(base, map[string]any{"seed": 4, "logprobs": true, "temperature": 1, "top_p": 1, "top_k": 5})
	base, log = start(qwen, "--generation-config", "none", "--top-k", "5")
	if want := "temperature 1, top_p 1, top_k 5, max_tokens 2048 (--generation-config none: generation_config.json not read; set by --top-k)"; !strings.Contains(log, want) {
		t.Errorf("--generation-config none --top-k 5: log\n%s\nwant %q", log, want)
	}
	if none := ask(base, map[string]any{"seed": 4, "logprobs": true}); none[0].Message.Content != neutral[0].Message.Content || lp(none) != lp(neutral) {
		t.Errorf("--generation-config none --top-k 5: %q (first logprob %v), want temperature 1, top_p 1, top_k 5's %q (%v)",
			none[0].Message.Content, lp(none), neutral[0].Message.Content, lp(neutral))
	}

	// max_new_tokens is the default max_tokens; --max-tokens, given, wins over it.
	capped := withGenerationConfig(t, tiny, `{"max_new_tokens": 3, "temperature": 0}`)
	for _, c := range []struct {
		args   []string
		tokens float64
		log    string
	}{
		{nil, 3, "temperature 0, top_p 1, top_k off, max_tokens 3 (from " + filepath.Join(capped, "generation_config.json") + ": temperature 0, max_new_tokens 3)"},
		{[]string{"--max-tokens", "5"}, 5, "max_tokens 5 (from " + filepath.Join(capped, "generation_config.json") + ": temperature 0, max_new_tokens 3; set by --max-tokens)"},
	} {
		base, log := start(capped, c.args...)
		b := `{"messages": [{"role": "user", "content": "How many singers are there?"}], "logit_bias": {"151645": -100, "151643": -100}}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Usage struct {
				CompletionTokens float64 `json:"completion_tokens"`
			}
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.Usage.CompletionTokens != c.tokens || !strings.Contains(log, c.log) {
			t.Errorf("%v: %v completion tokens, want %v; log\n%s\nwant %q", c.args, out.Usage.CompletionTokens, c.tokens, log, c.log)
		}
	}

	for _, bad := range [][]string{{"--generation-config", "vllm"}, {"--temperature", "3"}, {"--top-p", "0"}, {"--top-k", "-2"}} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(context.Background(), append(append([]string{"serve"}, tinyArgs(t)...), bad...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, stderr.String())
		}
	}
}
