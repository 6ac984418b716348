package teachers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/chainedsql/chainedsql/chat"
)

// encodeBaseExtra pre-encodes the endpoint-level request fields. Precedence, lowest first: the
// provider's thinking fields, extra_body, the typed endpoint fields (the reasoning effort in the
// provider's form among them); chat.Options override all per call.
func (c *Client) encodeBaseExtra() error {
	prof, err := ProfileOf(c.ep.Provider)
	if err != nil {
		return fmt.Errorf("teacher %s: %w", c.ep.Name, err)
	}
	c.prof = prof
	m := make(map[string]json.RawMessage, len(c.ep.ExtraBody)+4)
	for k, v := range prof.thinkingFields(c.ep) {
		m[k] = mustJSON(v)
	}
	for k, v := range c.ep.ExtraBody {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("teacher %s: extra_body field %q cannot be encoded as JSON: %w", c.ep.Name, k, err)
		}
		m[k] = b
	}
	if c.ep.Temperature != nil {
		m["temperature"] = mustJSON(*c.ep.Temperature)
	}
	if c.ep.TopP != nil {
		m["top_p"] = mustJSON(*c.ep.TopP)
	}
	if c.ep.MaxTokens > 0 {
		m[c.prof.maxTokensKey()] = mustJSON(c.ep.MaxTokens)
	}
	thinking := prof.thinkingFields(c.ep)
	for k, v := range prof.effortFields(c.ep) {
		merged, err := mergeField(thinking[k], v)
		if err != nil {
			return fmt.Errorf("teacher %s: thinking: %v and reasoning_effort: %q both set the %s request field of provider %s (%v); drop one of them",
				c.ep.Name, *c.ep.Thinking, c.ep.ReasoningEffort, k, prof.Name, err)
		}
		m[k] = mustJSON(merged)
	}
	c.baseExtra = m
	c.baseJoin = joinFields(m)
	for i, k := range tokenFields {
		c.baseTokens[i] = 0
		var n float64 // extra_body may set either, as any JSON number
		if json.Unmarshal(m[k], &n) == nil && n >= 1 {
			c.baseTokens[i] = int(min(n, maxStreamTokens))
		}
	}
	return nil
}

// tokenFields are the request fields that carry a completion budget; a server reads one of
// them (vLLM and SGLang max_completion_tokens when both are sent).
var tokenFields = [2]string{"max_tokens", "max_completion_tokens"}

// requestTokens is the completion budget a request under o asks for, the larger of the
// fields it sends (tokenFields): o's max_tokens, in the provider's field, else the endpoint's
// (max_tokens, or extra_body's), and extra_body's other field, which o leaves as it is; 0 when
// it sends none (the server's default). Before, o's max_tokens alone counted: a call's 1,000
// beside extra_body's max_completion_tokens 300,000, both sent, bounded the stream at 64 MiB
// though vLLM generates up to 300,000 tokens (TestStreamLimitFollowsMaxTokens).
func (c *Client) requestTokens(o chat.Options) int {
	n := 0
	for i, k := range tokenFields {
		t := c.baseTokens[i]
		if o.MaxTokens > 0 && k == c.prof.maxTokensKey() {
			t = o.MaxTokens
		}
		n = max(n, t)
	}
	return n
}

// mergeField combines the thinking switch's value of a request field (nil when it sets none)
// with the reasoning effort's: two objects are merged (OpenRouter's reasoning: {"enabled": …}
// and {"effort": …}); other values must agree.
func mergeField(thinking, effort any) (any, error) {
	if thinking == nil {
		return effort, nil
	}
	tm, ok1 := thinking.(map[string]any)
	em, ok2 := effort.(map[string]any)
	if ok1 && ok2 {
		out := make(map[string]any, len(tm)+len(em))
		for k, v := range tm {
			out[k] = v
		}
		for k, v := range em {
			out[k] = v
		}
		return out, nil
	}
	if reflect.DeepEqual(thinking, effort) {
		return effort, nil
	}
	return nil, fmt.Errorf("%v against %v", thinking, effort)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("teachers: encoding %T: %v", v, err)) // only numbers, strings and maps of them reach here
	}
	return b
}

// joinFields renders m as `"k":v,"k2":v2` in key order (stable bodies for tests and caches).
func joinFields(m map[string]json.RawMessage) []byte {
	if len(m) == 0 {
		return nil
	}
	keys := sortedNames(m)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(m[k])
	}
	return b.Bytes()
}

// requestExtra returns the fields to merge into this call's request body.
func (c *Client) requestExtra(o chat.Options) []byte {
	if o.Temperature == nil && o.TopP == nil && o.TopK == 0 && o.MaxTokens == 0 && o.Seed == nil && len(o.Stop) == 0 {
		return c.baseJoin
	}
	m := make(map[string]json.RawMessage, len(c.baseExtra)+6)
	for k, v := range c.baseExtra {
		m[k] = v
	}
	if o.Temperature != nil {
		m["temperature"] = mustJSON(*o.Temperature)
	}
	if o.TopP != nil {
		m["top_p"] = mustJSON(*o.TopP)
	}
	if o.TopK > 0 {
		m["top_k"] = mustJSON(o.TopK)
	}
	if o.MaxTokens > 0 {
		m[c.prof.maxTokensKey()] = mustJSON(o.MaxTokens)
	}
	if o.Seed != nil {
		m["seed"] = mustJSON(*o.Seed)
	}
	if len(o.Stop) > 0 {
		m["stop"] = mustJSON(o.Stop)
	}
	return joinFields(m)
}
