// Package oaitest is a fake OpenAI-compatible chat-completions server for tests: it speaks
// POST /v1/chat/completions (plain JSON, or SSE when the request streams) and GET /v1/models,
// checks the Authorization header when given a key, answers through a Script (a function of the
// request, so a test can answer per question and per turn), injects faults from a per-request
// sequence, from the Script, or at a seeded rate, and records every request. A Personality makes
// it speak one provider's wire shape (Personalities: vLLM, DeepSeek, DashScope, OpenRouter, …):
// where the reasoning goes, null fields, keep-alive lines, provider finish reasons, the
// provider's own request rules and error bodies, rate-limit headers.
//
// It is built for fault suites over thousands of requests: one mutex-guarded append per request,
// no goroutines of its own, and fault draws that depend only on (seed, conversation, attempt), so a
// run is reproducible whatever the scheduling.
package oaitest

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// Fault is a kind of misbehaviour the server can inject instead of (or into) a normal reply.
type Fault string

// Faults. The string values are what FaultCounts and Request.Fault report.
const (
	None                    Fault = ""
	RateLimit               Fault = "429"                  // 429 without Retry-After
	RateLimitRetryAfter     Fault = "429_retry_after"      // 429 with Retry-After: seconds
	RateLimitRetryAfterDate Fault = "429_retry_after_date" // 429 with Retry-After: an HTTP date
	ServerError             Fault = "500"                  // 500 with an OpenAI JSON error
	BadGateway              Fault = "502"                  // 502 with an HTML body, as proxies send
	Unavailable             Fault = "503"                  // 503 with an OpenAI JSON error
	BadRequest              Fault = "400"                  // 400: not retryable
	Unauthorized            Fault = "401"                  // 401: not retryable
	Reset                   Fault = "reset"                // the connection is reset before any response
	ResetMidBody            Fault = "reset_mid_body"       // headers and half the body, then a reset
	Slow                    Fault = "slow"                 // the normal reply after the slow delay
	Hang                    Fault = "hang"                 // no response until the client gives up
	Malformed               Fault = "malformed"            // 200 with a body that is not JSON
	Truncated               Fault = "truncated"            // 200 with the reply's JSON cut in half
	EmptyChoices            Fault = "empty_choices"        // 200 with "choices": []
	Length                  Fault = "length"               // content cut in half, finish_reason length
	ContentFilter           Fault = "content_filter"       // empty content, finish_reason content_filter
	EmptyContent            Fault = "empty_content"        // empty content, finish_reason stop
	// ProviderFault ends the reply half-way with the personality's FaultFinish reason (DeepSeek
	// insufficient_system_resource, Zhipu network_error, vLLM abort; default "error").
	ProviderFault Fault = "provider_fault"
	// Stream faults act half-way through a stream's chunks (on a plain request: ResetMidBody,
	// Hang, Truncated and a 500 respectively).
	StreamReset Fault = "stream_reset" // the connection is reset
	StreamStall Fault = "stream_stall" // nothing more is sent until the client gives up
	StreamCut   Fault = "stream_cut"   // the stream ends cleanly without finish_reason or [DONE]
	StreamError Fault = "stream_error" // an error event (data: {"error": …}) ends the stream
)

// StreamFaults are the faults of a stream, for WithFaultRate in streaming fault suites.
var StreamFaults = []Fault{StreamReset, StreamCut, StreamError, ProviderFault, RateLimit, ServerError, Reset}

// TransientFaults are the faults a well-behaved client retries; the default mix for WithFaultRate.
var TransientFaults = []Fault{RateLimit, RateLimitRetryAfter, ServerError, BadGateway, Unavailable,
	Reset, ResetMidBody, Slow, Malformed, Truncated, EmptyChoices}

// AllFaults lists every fault of a plain request as the server first had them.
var AllFaults = []Fault{RateLimit, RateLimitRetryAfter, RateLimitRetryAfterDate, ServerError, BadGateway,
	Unavailable, BadRequest, Unauthorized, Reset, ResetMidBody, Slow, Hang, Malformed, Truncated,
	EmptyChoices, Length, ContentFilter, EmptyContent}

// EveryFault is AllFaults plus the provider and stream faults (which AllFaults leaves out, so
// that the fault suites built on it keep their mix).
var EveryFault = append(append([]Fault{}, AllFaults...), ProviderFault, StreamReset, StreamStall, StreamCut, StreamError)

// Message is one chat message of a request, its content read as text (oai.RequestMessage.Text).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one received chat-completions request.
type Request struct {
	// Seq is the arrival order over the server's life, from 0.
	Seq int
	// Attempt counts earlier requests with the same model and messages (0 on the first), so a
	// script or the fault draw can tell retries apart from new turns.
	Attempt int
	// Hash identifies the conversation (model and messages).
	Hash uint64
	// Fault is what the server did with it (filled in the recorded copy).
	Fault    Fault
	Model    string
	Messages []Message
	// Stream is the request's stream flag; IncludeUsage its stream_options.include_usage.
	Stream       bool
	IncludeUsage bool
	Header       http.Header
	// Body is the raw request JSON (nil in records made WithoutBodies).
	Body []byte
}

// Field returns the raw JSON of a top-level request field, nil when absent.
func (r Request) Field(name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m[name]
}

// Turn is the number of assistant messages already in the conversation (0 on the first turn).
func (r Request) Turn() int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// FirstUser is the content of the first user message (the question), "" if none.
func (r Request) FirstUser() string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// Last is the last message, zero if none.
func (r Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// Usage overrides the token counts of a reply.
type Usage struct {
	PromptTokens, CompletionTokens, ReasoningTokens, CachedTokens int
}

// Response is what a Script answers.
type Response struct {
	Content string
	// Think is the reply's reasoning, placed where the server's Personality puts it (by default
	// reasoning_content), and dropped when the request turned thinking off.
	Think string
	// ReasoningContent is sent as message.reasoning_content (DeepSeek, vLLM).
	ReasoningContent string
	// Reasoning is sent as message.reasoning (OpenRouter, newer vLLM).
	Reasoning string
	// FinishReason defaults to "stop".
	FinishReason string
	// Usage defaults to ~4 bytes per token over prompt and completion.
	Usage *Usage
	// Model defaults to the request's model.
	Model string
	// Delay is waited before answering (ends early when the client leaves).
	Delay time.Duration
	// Fault, when set, is injected (a Sequence entry for this request wins).
	Fault Fault
}

// Script answers a request. It may be called concurrently.
type Script func(Request) Response

// DefaultReply is the content the server answers when the Script is nil.
const DefaultReply = "<think>The answer is a constant.</think>\n<sql>SELECT 1</sql>"

// Fixed answers every request with content.
func Fixed(content string) Script {
	return func(Request) Response { return Response{Content: content} }
}

// Turns answers the n-th assistant turn of any conversation with replies[n] (the last one again
// beyond the end).
func Turns(replies ...Response) Script {
	return func(r Request) Response {
		if len(replies) == 0 {
			return Response{Content: DefaultReply}
		}
		return replies[min(r.Turn(), len(replies)-1)]
	}
}

// Option configures a Server.
type Option func(*Server)

// WithAPIKey makes the server require "Authorization: Bearer key" (401 otherwise).
func WithAPIKey(key string) Option { return func(s *Server) { s.apiKey = key } }

// WithModels sets the ids listed by /v1/models (default "test-model").
func WithModels(ids ...string) Option { return func(s *Server) { s.models = ids } }

// WithSequence injects seq[i] into the request with Seq i ("" = none); later requests get none.
func WithSequence(seq ...Fault) Option { return func(s *Server) { s.sequence = seq } }

// WithFaultRate injects a fault into a fraction rate of requests that have no sequenced or
// scripted fault, drawn uniformly from kinds (default TransientFaults). The draw depends only on
// seed, the conversation and the attempt number.
func WithFaultRate(rate float64, seed uint64, kinds ...Fault) Option {
	return func(s *Server) {
		s.rate, s.seed = rate, seed
		if len(kinds) > 0 {
			s.kinds = kinds
		}
	}
}

// WithRetryAfter sets the Retry-After of RateLimitRetryAfter(Date) faults (default 1s; the header
// carries whole seconds, rounded up).
func WithRetryAfter(d time.Duration) Option { return func(s *Server) { s.retryAfter = d } }

// WithSlowDelay sets the delay of Slow faults (default 20ms).
func WithSlowDelay(d time.Duration) Option { return func(s *Server) { s.slow = d } }

// WithoutBodies records requests without Body and Messages (for very long runs).
func WithoutBodies() Option { return func(s *Server) { s.noBodies = true } }

// Server is a running fake endpoint. URL + "/v1" is the base URL for a client.
type Server struct {
	*httptest.Server
	script     Script
	apiKey     string
	models     []string
	sequence   []Fault
	rate       float64
	seed       uint64
	kinds      []Fault
	retryAfter time.Duration
	slow       time.Duration
	noBodies   bool
	closing    chan struct{}
	closeOnce  sync.Once
	p          Personality

	inFlight, maxInFlight atomic.Int64

	mu       sync.Mutex
	seq      int
	attempts map[uint64]int
	records  []Request
	faults   map[Fault]int
	// the personality's rate-limit window
	windowStart time.Time
	windowUsed  int
	limited     int
}

// NewServer starts a server answering through script (nil: DefaultReply) and closes it when the
// test ends; hanging requests are released first.
func NewServer(tb testing.TB, script Script, opts ...Option) *Server {
	tb.Helper()
	s := Start(script, opts...)
	tb.Cleanup(s.Close)
	return s
}

// Start starts a server as NewServer does, outside a test (end-to-end scripts serve it from a
// command); the caller closes it.
func Start(script Script, opts ...Option) *Server {
	s := &Server{
		script:     script,
		models:     []string{"test-model"},
		kinds:      TransientFaults,
		retryAfter: time.Second,
		slow:       20 * time.Millisecond,
		closing:    make(chan struct{}),
		attempts:   make(map[uint64]int),
		faults:     make(map[Fault]int),
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.chat)
	mux.HandleFunc("/chat/completions", s.chat)
	mux.HandleFunc("/v1/models", s.listModels)
	mux.HandleFunc("/models", s.listModels)
	s.Server = httptest.NewServer(mux)
	return s
}

// BaseURL is the OpenAI base URL of the server (URL + "/v1").
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Close releases hanging requests and shuts the server down. It is safe to call twice.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.Server.Close()
	})
}

// Requests returns a copy of the recorded requests in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.records...)
}

// Count is the number of chat requests received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// FaultCounts returns how often each fault was injected (None counts normal replies).
func (s *Server) FaultCounts() map[Fault]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Fault]int, len(s.faults))
	for k, v := range s.faults {
		out[k] = v
	}
	return out
}

// InFlight is the number of chat requests the server is handling now.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// MaxInFlight is the most chat requests the server was handling at once.
func (s *Server) MaxInFlight() int { return int(s.maxInFlight.Load()) }

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.apiKey == "" || r.Header.Get("Authorization") == "Bearer "+s.apiKey {
		return true
	}
	writeError(w, http.StatusUnauthorized, "invalid_api_key", "Incorrect API key provided (oaitest).")
	return false
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, id := range s.models {
		out.Data = append(out.Data, model{ID: id, Object: "model", OwnedBy: "oaitest"})
	}
	writeJSON(w, http.StatusOK, out)
}

// conversationHash is FNV-1a over the model and messages: stable across processes, unlike maphash.
func conversationHash(model string, msgs []Message) uint64 {
	h := fnv.New64a()
	io.WriteString(h, model)
	for _, m := range msgs {
		h.Write([]byte{0})
		io.WriteString(h, m.Role)
		h.Write([]byte{0})
		io.WriteString(h, m.Content)
	}
	return h.Sum64()
}

// mix is splitmix64, the fault draw's hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
		return
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	if !s.authorized(w, r) {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "reading the body: "+err.Error())
		return
	}
	var in oai.Request
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the body is not valid JSON: "+err.Error())
		return
	}
	if len(in.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages must not be empty")
		return
	}
	msgs := make([]Message, len(in.Messages))
	for i, m := range in.Messages {
		text, err := m.Text()
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages[%d].%v", i, err))
			return
		}
		msgs[i] = Message{Role: m.Role, Content: text}
	}
	req := Request{Model: in.Model, Messages: msgs, Stream: in.Stream, Header: r.Header.Clone(), Body: body,
		Hash: conversationHash(in.Model, msgs)}
	req.IncludeUsage = in.StreamOptions != nil && in.StreamOptions.IncludeUsage
	s.mu.Lock()
	req.Seq = s.seq
	s.seq++
	req.Attempt = s.attempts[req.Hash]
	s.attempts[req.Hash]++
	s.mu.Unlock()

	if s.p.StrictModels && !s.knownModel(in.Model) {
		s.record(req, None)
		s.notFound(w, in.Model)
		return
	}
	thinking := true
	if s.p.Thinking != nil {
		on, refuse, msg := s.p.Thinking(req)
		if refuse != 0 {
			s.record(req, None)
			w.Header().Set("Content-Type", "application/json")
			writeJSON(w, refuse, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": "invalid_parameter_error"}})
			return
		}
		thinking = on
	}
	if !s.rateLimit(w) {
		s.record(req, RateLimit)
		return
	}

	var resp Response
	if s.script != nil {
		resp = s.script(req)
	} else {
		resp = Response{Content: DefaultReply}
	}
	if !thinking {
		resp.Think = ""
	}
	f := resp.Fault
	if req.Seq < len(s.sequence) && s.sequence[req.Seq] != None {
		f = s.sequence[req.Seq]
	}
	if f == None && s.rate > 0 && len(s.kinds) > 0 {
		x := mix(s.seed ^ mix(req.Hash^mix(uint64(req.Attempt))))
		if float64(x>>11)/(1<<53) < s.rate {
			f = s.kinds[mix(x)%uint64(len(s.kinds))]
		}
	}
	s.record(req, f)

	if resp.Delay > 0 && !s.wait(r.Context(), resp.Delay) {
		return
	}
	s.serve(w, r, req, resp, f)
}

// knownModel reports whether id is one of the server's models.
func (s *Server) knownModel(id string) bool {
	for _, m := range s.models {
		if m == id {
			return true
		}
	}
	return false
}

// record appends req with what the server did with it.
func (s *Server) record(req Request, f Fault) {
	req.Fault = f
	if s.noBodies {
		req.Body, req.Messages, req.Header = nil, nil, nil
	}
	s.mu.Lock()
	s.records = append(s.records, req)
	s.faults[f]++
	s.mu.Unlock()
}

// wait sleeps d; false when the client left or the server is closing first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, req Request, resp Response, f Fault) {
	if !req.Stream {
		switch f {
		case StreamReset:
			f = ResetMidBody
		case StreamStall:
			f = Hang
		case StreamCut:
			f = Truncated
		case StreamError:
			f = ServerError
		}
	}
	switch f {
	case RateLimit:
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Rate limit reached (oaitest).")
		return
	case RateLimitRetryAfter:
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfterSeconds()))
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Rate limit reached (oaitest).")
		return
	case RateLimitRetryAfterDate:
		at := time.Now().Add(time.Duration(s.retryAfterSeconds()) * time.Second)
		w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Rate limit reached (oaitest).")
		return
	case ServerError:
		writeError(w, http.StatusInternalServerError, "server_error", "The server had an error (oaitest).")
		return
	case BadGateway:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
		return
	case Unavailable:
		writeError(w, http.StatusServiceUnavailable, "server_error", "The engine is currently overloaded (oaitest).")
		return
	case BadRequest:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "This request is invalid (oaitest).")
		return
	case Unauthorized:
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "Incorrect API key provided (oaitest).")
		return
	case Reset:
		resetConn(w, nil)
		return
	case Hang:
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	case Malformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"id": "oaitest", "object": "chat.completion", "choices": [}`)
		return
	case Slow:
		if !s.wait(r.Context(), s.slow) {
			return
		}
	}
	rep := s.build(req, resp, f)
	if req.Stream {
		s.stream(w, r, req, rep, f)
		return
	}
	b, err := json.Marshal(rep.completion())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "oaitest: encoding the reply: "+err.Error())
		return
	}
	switch f {
	case Truncated:
		b = b[:len(b)/2]
	case ResetMidBody:
		resetConn(w, b)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if s.p.BlankLines {
		// DeepSeek sends empty lines while a plain request waits, so no Content-Length.
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "\n\n")
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		w.Write(b)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func (s *Server) retryAfterSeconds() int {
	sec := int((s.retryAfter + time.Second - 1) / time.Second)
	return max(sec, 0)
}

// resetConn hijacks the connection, writes a 200 header and the first half of body when body is
// given, and closes with SO_LINGER 0 so the client sees a reset.
func resetConn(w http.ResponseWriter, body []byte) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("oaitest: the ResponseWriter cannot be hijacked")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if body != nil {
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		buf.Write(body[:len(body)/2])
		buf.Flush()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// EstimateTokens is the server's default token count of a text: ceil(bytes/4).
func EstimateTokens(s string) int { return (len(s) + 3) / 4 }

// reply is one answer in the server's own terms, before it is written as a completion or as
// stream chunks.
type reply struct {
	id                          string
	created                     int64
	model                       string
	content                     string
	nullContent                 bool
	reasoningContent, reasoning string
	details                     bool // repeat reasoning as reasoning_details
	finish                      string
	usage                       oai.Usage
	noChoices                   bool
}

// build applies the fault and the personality to a scripted response.
func (s *Server) build(req Request, resp Response, f Fault) *reply {
	rp := &reply{id: fmt.Sprintf("chatcmpl-oaitest-%d", req.Seq), created: time.Now().Unix(), model: resp.Model,
		content: resp.Content, reasoningContent: resp.ReasoningContent, reasoning: resp.Reasoning, finish: resp.FinishReason,
		noChoices: f == EmptyChoices}
	if rp.model == "" {
		rp.model = req.Model
	}
	if t := resp.Think; t != "" {
		switch s.p.ReasoningField {
		case FieldReasoning:
			rp.reasoning += t
		case FieldBoth:
			rp.reasoning += t
			rp.reasoningContent += t
		case FieldDetails:
			rp.reasoning += t
			rp.details = true
		case FieldInline, FieldOpened:
			open := "<think>"
			if s.p.ReasoningField == FieldOpened {
				open = "" // the chat template put it into the prompt
			}
			if rp.content == "" && rp.finish == "length" {
				rp.content = open + t // the budget ran out inside the reasoning: no </think>
			} else {
				rp.content = open + t + "</think>\n" + rp.content
			}
		default:
			rp.reasoningContent += t
		}
	}
	switch f {
	case Length:
		rp.content = halfRunes(rp.content)
		rp.finish = "length"
	case ContentFilter:
		rp.content = ""
		rp.finish = nameOr(s.p.FilterFinish, "content_filter")
	case EmptyContent:
		rp.content = ""
		rp.finish = "stop"
	case ProviderFault:
		rp.content = halfRunes(rp.content)
		rp.finish = nameOr(s.p.FaultFinish, "error")
	}
	if rp.finish == "" {
		rp.finish = "stop"
	}
	rp.nullContent = s.p.NullContent && rp.content == ""
	rp.usage = s.usage(req, resp, rp)
	return rp
}

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// halfRunes cuts s to about half its bytes on a rune boundary.
func halfRunes(s string) string {
	i := len(s) / 2
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// usage is the reply's usage in the personality's shape.
func (s *Server) usage(req Request, resp Response, rp *reply) oai.Usage {
	var u oai.Usage
	var reasoningTokens, cached int
	if resp.Usage != nil {
		u.PromptTokens, u.CompletionTokens = resp.Usage.PromptTokens, resp.Usage.CompletionTokens
		reasoningTokens, cached = resp.Usage.ReasoningTokens, resp.Usage.CachedTokens
	} else {
		var b strings.Builder
		for _, m := range req.Messages {
			b.WriteString(m.Content)
		}
		reasoning := rp.reasoningContent
		if reasoning == "" {
			reasoning = rp.reasoning
		}
		u.PromptTokens = EstimateTokens(b.String())
		u.CompletionTokens = EstimateTokens(rp.content) + EstimateTokens(reasoning)
		reasoningTokens = EstimateTokens(reasoning)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if !s.p.NullUsageDetails {
		u.CompletionTokensDetails = &oai.CompletionDetails{ReasoningTokens: reasoningTokens}
		if !s.p.DeepSeekCache {
			u.PromptTokensDetails = &oai.PromptDetails{CachedTokens: cached}
		}
	}
	if s.p.DeepSeekCache {
		miss := u.PromptTokens - cached
		u.PromptCacheHitTokens, u.PromptCacheMissTokens = &cached, &miss
	}
	if s.p.TopLevelReasoningTokens {
		u.ReasoningTokens = &reasoningTokens
	}
	if s.p.CostPerToken > 0 {
		upstream := s.p.CostPerToken * float64(u.TotalTokens)
		c, byok := upstream, s.p.BYOK
		if byok {
			c = upstream * BYOKFee
		}
		u.Cost, u.IsBYOK, u.CostDetails = &c, &byok, &oai.CostDetails{UpstreamInferenceCost: &upstream}
	}
	return u
}

// completion is the reply as one chat.completion object.
func (rp *reply) completion() oai.Completion {
	u := rp.usage
	out := oai.Completion{ID: rp.id, Object: oai.ObjectCompletion, Created: rp.created, Model: rp.model, Choices: []oai.Choice{}, Usage: &u}
	if rp.noChoices {
		return out
	}
	m := oai.Message{Role: "assistant", ReasoningContent: oai.Str(rp.reasoningContent), Reasoning: oai.Text(rp.reasoning)}
	if !rp.nullContent {
		c := rp.content
		m.Content = &c
	}
	if rp.details {
		m.ReasoningDetails = []oai.Detail{{Type: "reasoning.text", Text: rp.reasoning, Format: "unknown"}}
	}
	fin := rp.finish
	out.Choices = append(out.Choices, oai.Choice{Message: &m, FinishReason: &fin})
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	} else if status == http.StatusTooManyRequests {
		typ = "rate_limit_error"
	}
	writeJSON(w, status, oai.ErrorBody{Error: oai.Error{Message: msg, Type: typ, Code: oai.Str(code)}})
}
