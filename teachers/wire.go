package teachers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// The response shapes are internal/oai's, with every provider's reasoning fields and usage
// extras: message.reasoning_content (DeepSeek, SGLang), message.reasoning (vLLM since its 2025
// rename, OpenRouter, Ollama, Together), reasoning_details (OpenRouter),
// usage.prompt_cache_hit_tokens (DeepSeek) and usage.cost (OpenRouter), in plain responses and
// in stream deltas alike. oai.Completion serves both: a completion's choices carry "message",
// a stream chunk's carry "delta".

// The shapes of the replies as the client decodes them (scan.go): internal/oai's Completion
// with its members by their JSON names, and the error object beside it (a stream's error
// event, a 200 without choices). A member the client decodes but never reads (id, object,
// system_fingerprint, role, a detail's format) is kept for its type only. A choice's logprobs
// is dropped: it is raw JSON nothing reads. The texts of a reply (content, reasoning_content,
// reasoning as a string or its text, content or summary, a detail's text and summary) are
// decoded aside, cut at the limit on the text of the reply each feeds (contentShape...).
var (
	// reasoningObject is message.reasoning: a string, or an object that wraps one, decoded
	// again by reasoningText (methodBytes: its json.Unmarshal, 168 to 341 bytes measured).
	reasoningObject = &shape{kind: shapeObject, text: true, raw: true, out: textReasoning, newBytes: methodBytes,
		members: []member{{"text", reasoningTextShape}, {"content", reasoningTextShape}, {"summary", reasoningTextShape}}}
	detailShape = objectShape(member{"type", leafShape}, member{"text", detailTextShape},
		member{"summary", detailTextShape}, member{"format", blankShape}, member{"index", leafShape})
	// messageShape is a choice's message or delta: a new oai.Message (or Delta, the same
	// fields) for each object, after a null.
	messageShape = pointerShape(unsafe.Sizeof(oai.Message{}), 0, member{"role", blankShape}, member{"content", contentShape},
		member{"reasoning_content", reasoningContentShape}, member{"reasoning", reasoningObject},
		member{"reasoning_details", listShape(detailShape, unsafe.Sizeof(oai.Detail{}))})
	choiceShape = objectShape(member{"index", leafShape}, member{"message", messageShape},
		member{"delta", messageShape}, member{"finish_reason", leafShape})
	// usageShape is read by oai.Usage's UnmarshalJSON, which decodes each usage again with
	// json.Unmarshal (its decoder, a struct of its counts: about 400 bytes measured, 700 with
	// every pointer set) and reads each count through strconv, whose errors copy the number
	// (up to four copies of its bytes for a count past int64); so do its details.
	usageShape = pointerShape(usageMethodBytes, 4, member{"prompt_tokens", leafShape}, member{"completion_tokens", leafShape},
		member{"total_tokens", leafShape},
		member{"completion_tokens_details", pointerShape(detailsMethodBytes, 0, member{"reasoning_tokens", leafShape})},
		member{"prompt_tokens_details", pointerShape(detailsMethodBytes, 0, member{"cached_tokens", leafShape})},
		member{"prompt_cache_hit_tokens", leafShape}, member{"prompt_cache_miss_tokens", leafShape},
		member{"reasoning_tokens", leafShape}, member{"cost", leafShape}, member{"is_byok", leafShape},
		member{"cost_details", pointerShape(detailsMethodBytes, 0, member{"upstream_inference_cost", leafShape})})
	// errorObject is decoded again by errorObjectMessage in a stream's error event
	// (methodBytes: its json.Unmarshal of the object, then of the message, their bytes aside).
	errorObject = &shape{kind: shapeObject, newBytes: methodBytes, members: []member{{"message", leafShape}}}
	// chunkShape is a completion or a stream chunk, with its error object.
	chunkShape = pointerShape(unsafe.Sizeof(streamEvent{}), 0, member{"id", blankShape}, member{"object", blankShape}, member{"created", leafShape},
		member{"model", leafShape}, member{"system_fingerprint", blankShape}, member{"choices", listShape(choiceShape, unsafe.Sizeof(oai.Choice{}))},
		member{"usage", usageShape}, member{"error", errorObject})
	// completionShape is a plain completion: the same members.
	completionShape = chunkShape
	// errorBodyShape is a failure response's body.
	errorBodyShape = objectShape(member{"error", errorObject})
)

// What the UnmarshalJSON methods of usage and of its details and cost_details allocate for one
// object, their numbers aside (usageShape): twice what was measured or more.
const (
	usageMethodBytes   = 1 << 10
	detailsMethodBytes = 512
)

// methodBytes is what a json.Unmarshal of a small object or string allocates, its bytes aside
// (its decodeState, the struct it fills): 168 to 341 bytes measured for reasoningText, twice
// that or more.
const methodBytes = 512

// streamEvent is what a stream's chunk decodes to: a completion, or an error event (Error set
// by any value other than null, as the last "error" member has it).
type streamEvent struct {
	oai.Completion
	Error *eventError `json:"error"`
}

// eventError is a stream's error object: its message (errorObjectMessage), read from the
// chunk's bytes where they lie. As a json.RawMessage, the object was copied before its message
// was copied again and decoded: three to four times its bytes in all, where two are counted.
type eventError struct{ msg string }

// UnmarshalJSON implements json.Unmarshaler: any value is an error event.
func (e *eventError) UnmarshalJSON(b []byte) error {
	e.msg, _ = errorObjectMessage(b)
	return nil
}

// assembly gathers one reply: a whole completion, or a stream's chunks in order.
type assembly struct {
	model     string
	choices   int // choices seen (0: the response has none)
	content   replyText
	reasoning [3]replyText // by fieldOrder index
	finish    string
	finished  bool // a finish_reason arrived
	usage     *oai.Usage
	// limit bounds what each text (content, each reasoning field) keeps, in bytes, 0 none: a
	// longer text ends as textcap.Cut ends it at limit (replyText).
	limit int
	// short counts the strings read that kept fewer first bytes than their text needed (see
	// replyText.add): none, since each string keeps up to the limit (scan.go); counted so that
	// a reader that broke this would fail as too long, never come back cut wrong.
	short int
}

// A replyText is a text of a reply as it is assembled: its first bytes, head, at most the
// limit it is assembled under; its length in all, n; whether any of it is not white space.
// head is all of the text while n is at most the limit.
type replyText struct {
	head     []byte
	n        int
	nonBlank bool
	tail     textTail // its last bytes, for the marker it may end in (String)
}

// A textTail is the last bytes of a text, as many as textcap.Cut reads a marker from: a text that
// ends in one is cut as the text before it (textcap.Marker).
type textTail struct {
	b [textcap.MaxMarker]byte
	n int
}

// push appends p to the text whose last bytes t holds.
func (t *textTail) push(p []byte) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
}

// String is the bytes t holds.
func (t *textTail) String() string { return string(t.b[:t.n]) }

// add appends a piece of the text, its first bytes head, its length n, its last bytes end
// (nil when head is all of it), within limit (0 none); false when head holds fewer bytes than the text needs of it (min(n, the room left)),
// which a reducer's piece, up to the limit long, never does.
func (t *replyText) add(head []byte, n int, nonBlank bool, end []byte, limit int) bool {
	ok := true
	if end == nil {
		end = head
	}
	t.tail.push(end)
	if t.n == len(t.head) { // nothing dropped yet: head is the text so far
		need := n
		if limit > 0 {
			need = min(n, limit-len(t.head))
			head = head[:min(len(head), limit-len(t.head))]
		}
		ok = len(head) >= need
		if need := len(t.head) + len(head); need > cap(t.head) {
			t.head = append(make([]byte, 0, grown(cap(t.head), need, limit)), t.head...)
		}
		t.head = append(t.head, head...)
	}
	t.n += n
	t.nonBlank = t.nonBlank || nonBlank
	return ok
}

// Len is the text's length in all.
func (t *replyText) Len() int { return t.n }

// String is the text, or when it was longer than its limit (its head is then the limit long),
// what textcap.Cut makes of it at that limit: its longest prefix that, with the marker
// "…[truncated N bytes]", fits the limit, on a character boundary; a text that ends in such a
// marker is cut as the text before it, the marker's N bytes longer (textcap.Marker).
func (t *replyText) String() string {
	if t.n == len(t.head) {
		return string(t.head)
	}
	limit := len(t.head)
	body, before := t.n, 0
	if size, n := textcap.Marker(t.tail.String()); size > 0 {
		body, before = t.n-size, n
	}
	keep := max(limit-len(cutMarker(body+before)), 0)
	for keep > 0 && !utf8.RuneStart(t.head[keep]) {
		keep--
	}
	return string(t.head[:keep]) + cutMarker(body-keep+before)
}

// cutHead and cutTail are what textcap.Cut writes around the number of bytes it leaves out,
// read off textcap.Cut itself (its marker alone, for a 2-byte text cut to nothing).
var cutHead, cutTail = func() (string, string) {
	m := textcap.Cut("xx", 0)
	i := strings.LastIndex(m, "2")
	return m[:i], m[i+1:]
}()

// cutMarker is textcap.Cut's marker for n bytes left out.
func cutMarker(n int) string { return cutHead + strconv.Itoa(n) + cutTail }

// fold adds r, decoded from what d kept (its texts d's pieces), to a and holds the texts' room
// in m.
func (a *assembly) fold(r *oai.Completion, d *reducer, m *meter) error {
	a.add(r, d.piece)
	if a.short > 0 {
		return &tooLongError{fmt.Sprintf("a completion or stream chunk of the reply kept fewer first bytes of one of its texts than the reply reads (limit %d)", a.limit)}
	}
	n := cap(a.content.head)
	for i := range a.reasoning {
		n += cap(a.reasoning[i].head)
	}
	return m.need(slotText, n)
}

// literalPiece reads a decoded text as the text itself (a value decoded whole, not reduced).
func literalPiece(s string) ([]byte, int, bool, []byte) {
	return []byte(s), len(s), strings.TrimSpace(s) != "", nil
}

// add folds one completion or chunk into a, each text in it looked up by piece.
func (a *assembly) add(r *oai.Completion, piece func(string) ([]byte, int, bool, []byte)) {
	write := func(t *replyText, s string) {
		head, n, nonBlank, end := piece(s)
		if !t.add(head, n, nonBlank, end, a.limit) {
			a.short++
		}
	}
	// The model id and the finish reason are kept as the Stepper keeps them (textcap.Name): a
	// stream holds them between its chunks, outside the reply budget.
	if r.Model != "" {
		a.model = textcap.Cut(r.Model, textcap.Name)
	}
	if r.Usage != nil {
		a.usage = r.Usage // streams may repeat usage; the last one is the whole request's
	}
	for i := range r.Choices {
		ch := &r.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is never requested
		}
		a.choices++
		choiceTexts(ch, func(out int, s string) {
			if out == textContent {
				write(&a.content, s)
			} else {
				write(&a.reasoning[out-textReasoningContent], s)
			}
		})
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = textcap.Cut(*ch.FinishReason, textcap.Name)
			a.finished = true
		}
	}
}

// choiceTexts calls yield with each text a choice gives the reply, by the text of the reply it
// feeds (textContent...), in the order the assembly joins them: none when its index is not 0
// (n > 1 is never requested); else its delta's, or without one its message's, content,
// reasoning_content, reasoning and reasoning_details entries' texts. A stream chunk's text is
// its delta: some gateways end a stream with the whole reply again as a "message" beside an
// empty delta, and appending that would double the reply.
func choiceTexts(ch *oai.Choice, yield func(out int, s string)) {
	m := (*oai.Message)(ch.Delta)
	if m == nil {
		m = ch.Message
	}
	if ch.Index != 0 || m == nil {
		return
	}
	if m.Content != nil {
		yield(textContent, *m.Content)
	}
	if m.ReasoningContent != nil {
		yield(textReasoningContent, *m.ReasoningContent)
	}
	yield(textReasoning, reasoningText(m.Reasoning))
	for _, d := range m.ReasoningDetails {
		if d.Type == "reasoning.text" || d.Type == "reasoning.summary" {
			yield(textDetails, detailText(d))
		}
	}
}

// detailText is the text a reasoning_details entry gives the reply: a reasoning.text's text, a
// reasoning.summary's summary, else none.
func detailText(d oai.Detail) string {
	switch d.Type {
	case "reasoning.text":
		return d.Text
	case "reasoning.summary":
		return d.Summary
	}
	return ""
}

// reasoningText reads message.reasoning: a string, null, or an object carrying its text in
// "text", "content" or "summary" (some gateways wrap it); anything else has no text.
func reasoningText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	var o struct {
		Text    *string `json:"text"`
		Content *string `json:"content"`
		Summary *string `json:"summary"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &o) != nil {
		return ""
	}
	for _, s := range []*string{o.Text, o.Content, o.Summary} {
		if s != nil {
			return *s
		}
	}
	return ""
}

// pickReasoning returns the first non-blank reasoning text in the profile's order and its
// field. Servers sending the same text in two fields (vLLM during the rename, OpenRouter's
// reasoning and reasoning_details) therefore yield it once. A text is blank when all of it is
// white space, what it was cut to or not.
func (a *assembly) pickReasoning(order []string) (text, source string) {
	for _, src := range order {
		for i, f := range fieldOrder {
			if f == src && a.reasoning[i].nonBlank {
				return a.reasoning[i].String(), src
			}
		}
	}
	return "", ""
}

// Bounds on the usage a provider reports for one response, so that the sums of a run (a
// trajectory's, usage.json's, Stats) stay finite and within int: a count outside [0,
// maxReportedTokens] is cut into it, and a cost outside [0, maxReportedCost] USD is not
// believed (the endpoint's prices apply). Before them, "cost": 1e308 on two replies summed to
// +Inf, which JSON cannot hold: every trajectory failed to encode and usage.json could not be
// written, ending the run; token counts of 2^63-1 wrapped the run's totals negative.
const (
	maxReportedTokens = 1<<31 - 1 // an int on every GOARCH
	maxReportedCost   = 1e6
)

// reportedTokens is a provider's token count cut into [0, maxReportedTokens].
func reportedTokens(n int) int { return max(0, min(n, maxReportedTokens)) }

// chatUsage converts the wire usage; cached prompt tokens come from prompt_tokens_details or
// DeepSeek's prompt_cache_hit_tokens, reasoning tokens from completion_tokens_details or
// SGLang's usage.reasoning_tokens. reported is OpenRouter's usage.cost when present, its
// upstream charge added on a BYOK request. Every count and the cost are bounded (see
// maxReportedTokens).
func (a *assembly) chatUsage() (u chat.Usage, reported *float64) {
	w := a.usage
	if w == nil {
		return u, nil
	}
	u.PromptTokens, u.CompletionTokens = reportedTokens(w.PromptTokens), reportedTokens(w.CompletionTokens)
	if d := w.CompletionTokensDetails; d != nil {
		u.ReasoningTokens = reportedTokens(d.ReasoningTokens)
	}
	if w.ReasoningTokens != nil && u.ReasoningTokens == 0 {
		u.ReasoningTokens = reportedTokens(*w.ReasoningTokens)
	}
	if d := w.PromptTokensDetails; d != nil {
		u.CachedTokens = reportedTokens(d.CachedTokens)
	}
	if w.PromptCacheHitTokens != nil && u.CachedTokens == 0 {
		u.CachedTokens = reportedTokens(*w.PromptCacheHitTokens)
	}
	cost := w.Cost
	if cost != nil && w.IsBYOK != nil && *w.IsBYOK && w.CostDetails != nil && w.CostDetails.UpstreamInferenceCost != nil {
		// What the request cost the user: OpenRouter's fee plus the upstream charge to the
		// user's key (on OpenRouter's own credits upstream_inference_cost repeats cost).
		total := *w.Cost + *w.CostDetails.UpstreamInferenceCost
		cost = &total
	}
	if cost != nil && !(*cost >= 0 && *cost <= maxReportedCost) {
		return u, nil
	}
	return u, cost
}

// finishRule is how a provider's finish reason is treated.
type finishRule struct {
	norm   string // the chat vocabulary's name for it
	reason string // when set, the reply is a fault of this reason, retried, never kept
}

// finishRules maps finish reasons beyond OpenAI's (stop, length, content_filter, tool_calls).
var finishRules = map[string]finishRule{
	// Zhipu (Z.ai): the content was blocked by its safety system.
	"sensitive": {norm: chat.FinishContentFilter},
	// Zhipu: the reply ran into the model's context window.
	"model_context_window_exceeded": {norm: chat.FinishLength},
	// DeepSeek: the inference system ran out of capacity and cut the reply.
	"insufficient_system_resource": {reason: ReasonProviderFault},
	// Zhipu: an error inside its inference service.
	"network_error": {reason: ReasonProviderFault},
	// vLLM aborts a request it had to drop; OpenRouter reports an upstream failure as "error".
	"abort": {reason: ReasonProviderFault},
	"error": {reason: ReasonProviderFault},
}
