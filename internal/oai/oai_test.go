package oai

import (
	"encoding/json"
	"math"
	"testing"
)

// TestShapes: the keys an encoder gets from the optional fields, and a chunk's delta read back
// as a message.
func TestShapes(t *testing.T) {
	text := "hi"
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"null content kept", Message{Role: "assistant"}, `{"role":"assistant","content":null}`},
		{"reasoning fields", Message{Content: &text, ReasoningContent: Str("r"), Reasoning: Text("s\n")},
			`{"content":"hi","reasoning_content":"r","reasoning":"s\n"}`},
		{"empty texts absent", Message{Content: &text, ReasoningContent: Str(""), Reasoning: Text("")}, `{"content":"hi"}`},
		{"delta without content", Delta{Reasoning: Text("r")}, `{"reasoning":"r"}`},
		{"usage details null", Usage{PromptTokens: 1}, `{"prompt_tokens":1,"completion_tokens":0,"total_tokens":0,"completion_tokens_details":null}`},
		{"error", ErrorBody{Error: Error{Message: "m", Type: "t"}}, `{"error":{"message":"m","type":"t","param":null,"code":null}}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s (%v), want %s", c.name, b, err, c.want)
		}
	}
	var ch Completion
	if err := json.Unmarshal([]byte(`{"model":"m","choices":[{"index":0,"delta":{"content":"a","reasoning":{"text":"x"}},"finish_reason":null}]}`), &ch); err != nil {
		t.Fatal(err)
	}
	m := (*Message)(ch.Choices[0].Delta)
	if m == nil || m.Content == nil || *m.Content != "a" || string(m.Reasoning) != `{"text":"x"}` || ch.Choices[0].FinishReason != nil {
		t.Errorf("chunk read as %+v", ch)
	}
}

// TestUsageNumbers: every JSON number is read as a count (the nearest int, fractions cut) or a
// cost (absent past float64), absent and null counts stay absent, and a count that is not a
// number is an error, as for an int.
func TestUsageNumbers(t *testing.T) {
	var u Usage
	err := json.Unmarshal([]byte(`{"prompt_tokens":1e400,"completion_tokens":-99999999999999999999,"total_tokens":3.7,`+
		`"completion_tokens_details":{"reasoning_tokens":2.5e3},"prompt_tokens_details":{"cached_tokens":7},`+
		`"prompt_cache_hit_tokens":null,"reasoning_tokens":1e-400,"cost":1e400,"cost_details":{"upstream_inference_cost":0.25},"is_byok":true}`), &u)
	if err != nil {
		t.Fatal(err)
	}
	if u.PromptTokens != math.MaxInt || u.CompletionTokens != math.MinInt || u.TotalTokens != 3 {
		t.Errorf("counts %d %d %d", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	}
	if u.CompletionTokensDetails.ReasoningTokens != 2500 || u.PromptTokensDetails.CachedTokens != 7 {
		t.Errorf("details %+v %+v", u.CompletionTokensDetails, u.PromptTokensDetails)
	}
	if u.PromptCacheHitTokens != nil || u.PromptCacheMissTokens != nil || u.ReasoningTokens == nil || *u.ReasoningTokens != 0 {
		t.Errorf("optional counts %v %v %v", u.PromptCacheHitTokens, u.PromptCacheMissTokens, u.ReasoningTokens)
	}
	if u.Cost != nil || *u.CostDetails.UpstreamInferenceCost != 0.25 || u.IsBYOK == nil || !*u.IsBYOK {
		t.Errorf("cost %v, details %+v, byok %v", u.Cost, u.CostDetails, u.IsBYOK)
	}
	for _, bad := range []string{`{"prompt_tokens":"12"}`, `{"completion_tokens_details":{"reasoning_tokens":true}}`, `{"cost":"1"}`} {
		if err := json.Unmarshal([]byte(bad), &Usage{}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
