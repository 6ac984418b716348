package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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
