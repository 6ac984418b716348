package oai

import (
	"encoding/json"
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
