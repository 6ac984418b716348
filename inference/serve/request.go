package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// request is a chat-completions request as internal/oai types it; its fields are the ones the
// backend honours.
type request = oai.Request

// honoured are the request fields this server reads (the fields of request).
var honoured = []string{"model", "messages", "temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens",
	"seed", "stop", "stream", "stream_options", "n", "logprobs", "top_logprobs", "logit_bias", "return_tokens_as_token_ids", "stop_token_ids",
	"include_stop_str_in_output"}

// unsupported are the OpenAI request fields whose meaning the server cannot give, each with
// the values that ask for nothing: a request that sets one to another value is refused (400,
// code unsupported_parameter) rather than answered as if it had not; a neutral value (JSON null
// always is one, as the official clients send it for a default) is accepted and not logged. Any
// other field is ignored and named in the server's log, as vLLM and llama.cpp's server do.
var unsupported = map[string]struct {
	neutral func(v any) bool
	why     string
}{
	"tools":               {emptyList, "tools are not supported: the student answers in text only"},
	"functions":           {emptyList, "functions are not supported: the student answers in text only"},
	"tool_choice":         {equal("none"), `tool_choice is not supported (only "none"): the student answers in text only`},
	"function_call":       {equal("none"), `function_call is not supported (only "none"): the student answers in text only`},
	"parallel_tool_calls": {equal(false), "parallel_tool_calls is not supported: the student answers in text only"},
	"response_format":     {textFormat, `response_format is not supported (only {"type": "text"}): the student answers in plain text`},
	// vLLM's sampling extensions that would keep a reply from ending where the student ends it
	// (its eos ids and every special token: docs/ROLLOUT.md, "Special tokens a reply samples").
	"ignore_eos": {equal(false), "ignore_eos is not supported (only false): a reply ends on the model's eos ids and every special token of its tokenizer"},
	"min_tokens": {equal(float64(0)), "min_tokens is not supported (only 0): a reply ends on the first stop token it samples"},
}

// emptyList says whether v is an empty JSON array.
func emptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}

// equal returns whether a JSON value decoded into any is want.
func equal(want any) func(v any) bool {
	return func(v any) bool { return v == want }
}

// textFormat says whether v is {"type": "text"}, OpenAI's default response format.
func textFormat(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 1 && m["type"] == "text"
}

// apiError is a refusal in OpenAI's error shape: its status, message, and the param and code
// fields ("" for null).
type apiError struct {
	status           int
	msg, param, code string
}

func (e *apiError) write(w http.ResponseWriter) {
	var b oai.ErrorBody
	b.Error.Message, b.Error.Type = e.msg, "invalid_request_error"
	if e.param != "" {
		b.Error.Param = &e.param
	}
	if e.code != "" {
		b.Error.Code = &e.code
	}
	writeJSON(w, e.status, b)
}

// invalid is a 400 about param.
func invalid(param, code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, param: param, code: code, msg: fmt.Sprintf(format, args...)}
}

// parse validates the request and converts it; the error names the bad field.
func (s *server) parse(r *http.Request) (*request, []chat.Message, chat.Options, student.Sample, *apiError) {
	fail := func(aerr *apiError) (*request, []chat.Message, chat.Options, student.Sample, *apiError) {
		return nil, nil, chat.Options{}, student.Sample{}, aerr
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return fail(aerr)
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return fail(invalid("", "", "request body is not a valid chat-completions JSON object: %v", err))
	}
	if aerr := s.checkFields(body); aerr != nil {
		return fail(aerr)
	}
	if req.Model != "" && req.Model != s.b.ModelID() {
		return fail(&apiError{status: http.StatusNotFound, param: "model", code: "model_not_found",
			msg: fmt.Sprintf("the model %q does not exist (serving %q)", req.Model, s.b.ModelID())})
	}
	if len(req.Messages) == 0 {
		return fail(invalid("messages", "", "messages: at least one message is required"))
	}
	msgs := make([]chat.Message, len(req.Messages))
	for i, m := range req.Messages {
		c, err := m.Text()
		if err != nil {
			return fail(invalid(fmt.Sprintf("messages[%d].content", i), "", "messages[%d].%v", i, err))
		}
		msgs[i] = chat.Message{Role: m.Role, Content: c}
	}
	opts, aerr := options(&req, s.defaults)
	if aerr != nil {
		return fail(aerr)
	}
	x, aerr := s.sample(&req)
	if aerr != nil {
		return fail(aerr)
	}
	return &req, msgs, opts, x, nil
}

// tokenIDs says whether a request's log-probability entries name their tokens as
// "token_id:ID": its return_tokens_as_token_ids, else the server's default.
func (s *server) tokenIDs(req *request) bool {
	if req.ReturnTokensAsTokenIDs != nil {
		return *req.ReturnTokensAsTokenIDs
	}
	return s.tokenIDsDefault
}

// sample converts n, logprobs, top_logprobs, logit_bias, stop_token_ids and
// include_stop_str_in_output, checking their
// ranges as OpenAI does (n up to the server's MaxN; a stop token id outside the vocabulary is
// the generator's 400).
func (s *server) sample(req *request) (student.Sample, *apiError) {
	x := student.Sample{N: 1, LogProbs: req.Logprobs != nil && *req.Logprobs}
	if req.N != nil {
		switch n := *req.N; {
		case n < 1:
			return x, invalid("n", "integer_below_min_value", "n: %d is below the minimum of 1", n)
		case n > s.maxN:
			return x, invalid("n", "integer_above_max_value", "n: %d is above this server's maximum of %d (student serve --max-n)", n, s.maxN)
		default:
			x.N = n
		}
	}
	if req.TopLogprobs != nil {
		switch k := *req.TopLogprobs; {
		case k < 0 || k > MaxTopLogprobs:
			return x, invalid("top_logprobs", "", "top_logprobs: %d is outside [0, %d]", k, MaxTopLogprobs)
		case k > 0 && !x.LogProbs:
			return x, invalid("top_logprobs", "", "top_logprobs: %d needs logprobs: true", k)
		default:
			x.TopLogProbs = k
		}
	}
	if len(req.StopTokenIDs) > MaxStopTokenIDs {
		return x, invalid("stop_token_ids", "", "stop_token_ids: %d ids, over the maximum of %d", len(req.StopTokenIDs), MaxStopTokenIDs)
	}
	x.StopTokenIDs = req.StopTokenIDs
	x.KeepStopText = req.IncludeStopStrInOutput != nil && *req.IncludeStopStrInOutput
	if len(req.LogitBias) > 0 {
		x.LogitBias = make(map[int]float32, len(req.LogitBias))
		for _, k := range slices.Sorted(maps.Keys(req.LogitBias)) {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 {
				return x, invalid("logit_bias", "", "logit_bias: key %q is not a token id", k)
			}
			b := req.LogitBias[k]
			if !(b >= -100 && b <= 100) {
				return x, invalid("logit_bias", "", "logit_bias: bias %v for token %d is outside [-100, 100]", b, id)
			}
			x.LogitBias[id] = float32(b)
		}
	}
	return x, nil
}

// readBody reads the request body whole, under MaxBodyBytes.
func readBody(r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body over %d bytes", MaxBodyBytes)}
		}
		return nil, invalid("", "", "reading the request body: %v", err)
	}
	return body, nil
}

// checkFields refuses a field in unsupported set to a value other than its neutral ones and
// logs the fields the server ignores (neither honoured nor in unsupported).
//
// The fields' values are kept as their JSON text, and only an unsupported field's short one is
// decoded: decoded into interface values, a field of 32 MiB of empty objects (each a map) took
// the process from 123 MB to 1.2 GB of memory (TestParseMemoryBounded).
func (s *server) checkFields(body []byte) *apiError {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return invalid("", "", "request body is not a JSON object: %v", err)
	}
	var ignored []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if slices.Contains(honoured, k) {
			continue
		}
		f, ok := unsupported[k]
		switch {
		case !ok:
			ignored = append(ignored, k)
		case !neutralValue(fields[k], f.neutral):
			return invalid(k, "unsupported_parameter", "%s", f.why)
		}
	}
	if len(ignored) > 0 {
		s.logf("chat: fields ignored: %s", strings.Join(ignored, ", "))
	}
	return nil
}

// maxNeutral is the longest JSON text, white space removed, of a neutral value of an
// unsupported field ({"type":"text"} and its escaped spellings); a longer one is not neutral
// and is not decoded.
const maxNeutral = 64

// neutralValue reports whether raw, a field's JSON value, is null or a value neutral accepts.
func neutralValue(raw json.RawMessage, neutral func(v any) bool) bool {
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil || compact.Len() > maxNeutral {
		return false
	}
	var v any
	if json.Unmarshal(compact.Bytes(), &v) != nil {
		return false
	}
	return v == nil || neutral(v)
}

// Limits on a request's stop strings. Every generated piece of text is searched for each of them
// (and for each of their prefixes at its end, which may start one), so without them 100,000
// stop strings of 47 bytes in a 5 MB body cost 3.7 ms of a core per token of each choice, 7.5 s
// for a reply of 2,000 tokens. OpenAI takes at most 4; vLLM, which takes any number, is
// usually sent a few.
const (
	// MaxStops is the most stop strings a request may give.
	MaxStops = 64
	// MaxStopBytes is the longest stop string, in bytes.
	MaxStopBytes = 1024
	// MaxStopTokenIDs is the most stop_token_ids a request may give: every token of each
	// choice is looked up in them one by one, and a 32 MiB body holds millions (a model has
	// one or two end-of-text tokens; vLLM is usually sent those).
	MaxStopTokenIDs = 1024
)

// options converts the sampling fields, checking their ranges as OpenAI does (top_k as vLLM
// does: 0 and -1 make no cut), and gives the ones the request leaves out (or null) d's values.
func options(req *request, d Defaults) (chat.Options, *apiError) {
	opts := chat.Options{Temperature: req.Temperature, TopP: req.TopP, Seed: req.Seed}
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return opts, invalid(f.name, "integer_below_min_value", "%s: %d is below the minimum of 1", f.name, *f.v)
		}
		opts.MaxTokens = *f.v // max_completion_tokens, later in the list, wins
	}
	switch {
	case opts.Temperature != nil && (*opts.Temperature < 0 || *opts.Temperature > 2):
		return opts, invalid("temperature", "", "temperature: %v is outside [0, 2]", *opts.Temperature)
	case opts.TopP != nil && (*opts.TopP <= 0 || *opts.TopP > 1):
		return opts, invalid("top_p", "", "top_p: %v is outside (0, 1]", *opts.TopP)
	case req.TopK != nil && *req.TopK < -1:
		return opts, invalid("top_k", "", "top_k: %d is below -1 (0 and -1 make no cut)", *req.TopK)
	}
	if opts.Temperature == nil {
		opts.Temperature = &d.Temperature
	}
	if opts.TopP == nil {
		opts.TopP = &d.TopP
	}
	k := d.TopK
	if req.TopK != nil {
		k = *req.TopK
	}
	opts.TopK = k
	if k <= 0 {
		opts.TopK = -1 // no cut, whatever the backend's default
	}
	if raw := strings.TrimSpace(string(req.Stop)); raw != "" && raw != "null" {
		var one string
		if err := json.Unmarshal(req.Stop, &one); err == nil {
			opts.Stop = []string{one}
		} else if err := json.Unmarshal(req.Stop, &opts.Stop); err != nil {
			return opts, invalid("stop", "", "stop: want a string or a list of strings")
		}
		if len(opts.Stop) > MaxStops {
			return opts, invalid("stop", "", "stop: %d strings, over the maximum of %d", len(opts.Stop), MaxStops)
		}
		for i, st := range opts.Stop {
			switch {
			case st == "":
				return opts, invalid("stop", "", "stop[%d]: empty string", i)
			case len(st) > MaxStopBytes:
				return opts, invalid("stop", "", "stop[%d]: %d bytes, over the maximum of %d", i, len(st), MaxStopBytes)
			}
		}
	}
	return opts, nil
}

// Room is implemented by a backend that can say how long a conversation's prompt is and how
// many tokens the model's context leaves after it (*student.Student): a max_tokens beyond that
// room is refused with 400 as OpenAI and vLLM refuse it, rather than quietly cut to it.
type Room interface {
	Room(msgs []chat.Message) (prompt, room int, err error)
}

// checkRoom refuses opts.MaxTokens over what b's context leaves after msgs.
func checkRoom(b Backend, msgs []chat.Message, opts chat.Options) *apiError {
	rb, ok := b.(Room)
	if !ok || opts.MaxTokens == 0 {
		return nil
	}
	prompt, room, err := rb.Room(msgs)
	if err != nil {
		return invalid("messages", "", "%s", clientMessage(err))
	}
	if opts.MaxTokens > room {
		return invalid("max_tokens", "context_length_exceeded",
			"max_tokens: %d is more than the %d tokens the model's context of %d leaves after the prompt's %d; ask for at most %d",
			opts.MaxTokens, room, prompt+room, prompt, room)
	}
	return nil
}

// MaxLogprobEntries bounds the log-probability entries a request with logprobs may ask its
// choices for: n × max_tokens × (1 + top_logprobs), max_tokens being the room the model's
// context leaves after the prompt when the request gives none. The student keeps every entry of
// every choice until the reply ends (streamed or not), as ids and float32 log-probabilities
// only: 8 bytes an alternative and 32 a token, so at the bound about 10 MB with top_logprobs 20
// (10 bytes an entry) and 38 MB with 0 (36 bytes, every entry a token's; student's
// TestLogProbsHeldCompact; 96 and 103 MB when each held its token's bytes and text as strings,
// which the encoder now takes from the tokenizer as it writes the entry). A non-streamed reply
// is about 60 bytes of JSON per entry, written as it is encoded (writeCompletion; built and
// encoded whole it took some 400 to 620 bytes an entry, 415 MB for one reply at the bound,
// TestLogprobsReplyStreamed), so at the bound a reply is about 64 MB of JSON and the server's
// own share of it under 1 MB; before the bound, n 16 × 32,768 tokens × 21 was 0.7 GB of JSON.
const MaxLogprobEntries = 1 << 20

// checkLogprobs refuses a request with logprobs whose choices may hold more than
// MaxLogprobEntries entries (400 naming n, max_tokens and top_logprobs, param the one whose cut
// frees the most: top_logprobs when above 0, else max_tokens).
func checkLogprobs(b Backend, msgs []chat.Message, opts chat.Options, x student.Sample) *apiError {
	if !x.LogProbs {
		return nil
	}
	tokens, what := opts.MaxTokens, "max_tokens"
	if tokens == 0 {
		rb, ok := b.(Room)
		if !ok {
			return nil // no bound to read: the backend says nothing of its context
		}
		_, room, err := rb.Room(msgs)
		if err != nil {
			return invalid("messages", "", "%s", clientMessage(err))
		}
		tokens, what = room, "max_tokens (none given: the context's room after the prompt)"
	}
	n := max(x.N, 1)
	entries := int64(n) * int64(tokens) * int64(1+x.TopLogProbs)
	if entries <= MaxLogprobEntries {
		return nil
	}
	param := "max_tokens"
	if x.TopLogProbs > 0 {
		param = "top_logprobs"
	}
	return invalid(param, "", "logprobs: n × max_tokens × (1 + top_logprobs) = %d × %d × %d = %d log-probability entries, over this server's maximum of %d (about 60 bytes of JSON each); ask for fewer choices (n), tokens (%s) or top_logprobs",
		n, tokens, 1+x.TopLogProbs, entries, MaxLogprobEntries, what)
}

// Vocab is implemented by a backend that says how many tokens its model has
// (*student.Student): a logit_bias key outside them is refused naming the field.
type Vocab interface {
	VocabSize() int
}

// checkBias refuses a logit_bias token id outside b's vocabulary.
func checkBias(b Backend, x student.Sample) *apiError {
	vb, ok := b.(Vocab)
	if !ok {
		return nil
	}
	for id := range x.LogitBias {
		if n := vb.VocabSize(); id >= n {
			return invalid("logit_bias", "", "logit_bias: token %d is outside the model's vocabulary [0, %d)", id, n)
		}
	}
	return nil
}

// runtimePrefixes are the runtime's package prefixes, which messages to clients leave out
// (qwen2 writes "qwen2 DIR: ...").
var runtimePrefixes = []string{"student: ", "serve: ", "generate: ", "chattmpl: ", "cuda: ", "cpu: ", "qwen2 ", "qwen2: ",
	"tokenizer: ", "safetensors: "}

// clientMessage is err's text for a client: what follows the last "invalid request: " (the
// request's own fault) or the whole text, without the runtime's package prefixes
// (runtimePrefixes) at its start.
func clientMessage(err error) string {
	msg := err.Error()
	marker := generate.ErrInvalidRequest.Error() + ": "
	if i := strings.LastIndex(msg, marker); i >= 0 {
		msg = msg[i+len(marker):]
	}
	for {
		cut := false
		for _, p := range runtimePrefixes {
			if rest, ok := strings.CutPrefix(msg, p); ok {
				msg, cut = rest, true
			}
		}
		if !cut {
			return msg
		}
	}
}
