package teachers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// maxResponseBytes bounds a response body; a larger one is treated as malformed.
const maxResponseBytes = 64 << 20

// Client is a chat.Policy backed by one OpenAI-compatible endpoint. It is safe for concurrent use;
// it bounds its own concurrency and request/token rates, so callers need no limiter of their own.
type Client struct {
	ep  Endpoint
	key string // never printed: Client implements fmt.Stringer and fmt.GoStringer
	oc  *openai.Client
	tr  *http.Transport

	sem      *semaphore.Weighted
	rpm      *rate.Limiter // nil = unlimited
	tpm      *rate.Limiter // nil = unlimited
	tpmBurst int

	// pace holds requests back on the provider's rate-limit headers.
	pace pacer
	// prof is the endpoint's provider profile.
	prof Profile

	// baseExtra holds the pre-encoded request fields of the endpoint (thinking, extra_body,
	// sampling settings, reasoning effort), merged into every request body by the doer.
	baseExtra map[string]json.RawMessage
	baseJoin  []byte

	mu sync.Mutex
	st Stats
}

// Stats are the counters of one Client. All maps are copies.
type Stats struct {
	Teacher string `json:"teacher"`
	Model   string `json:"model"`
	// Calls counts Chat calls; Succeeded and Failed split the finished ones.
	Calls     int64 `json:"calls"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	// Requests counts HTTP requests sent (attempts); Retries the attempts after a first one.
	Requests int64 `json:"requests"`
	Retries  int64 `json:"retries"`
	// RetriesByReason and FailuresByReason are keyed by the Reason* constants.
	RetriesByReason  map[string]int64 `json:"retries_by_reason,omitempty"`
	FailuresByReason map[string]int64 `json:"failures_by_reason,omitempty"`
	// Kept counts replies returned under a "keep" policy, by reason (empty_content, length,
	// content_filter).
	Kept map[string]int64 `json:"kept,omitempty"`
	// FinishReasons counts the finish_reason of returned replies.
	FinishReasons map[string]int64 `json:"finish_reasons,omitempty"`
	// Usage is every token billed, responses that were retried or rejected included.
	Usage chat.Usage `json:"usage"`
	// CostUSD is the cost of Usage: the provider's reported cost where it gave one, else the
	// endpoint's prices.
	CostUSD float64 `json:"cost_usd"`
	// Paced counts requests held back by the provider's rate-limit headers (or a 429's
	// Retry-After) before they were sent; PacedFor is the time they waited in all.
	Paced    int64         `json:"paced,omitempty"`
	PacedFor time.Duration `json:"paced_ns,omitempty"`
	// MaxInFlight is the most requests this client had in flight at once.
	MaxInFlight int64 `json:"max_in_flight"`
	inFlight    int64
}

// New builds a client for e (defaults filled in, then validated). When e.APIKeyEnv is set, that
// environment variable must hold the key; the error names the variable, never a value.
func New(e Endpoint) (*Client, error) {
	e = e.withDefaults()
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var key string
	if e.APIKeyEnv != "" {
		key = os.Getenv(e.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("teacher %s: environment variable %s (its API key) is not set or empty; export it, or set api_key_env: \"\" for a server without keys", e.Name, e.APIKeyEnv)
		}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   max(e.MaxConcurrency, 2),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	// The per-attempt context carries e.Timeout; the client timeout is a backstop a little longer.
	hc := &http.Client{Transport: tr, Timeout: e.Timeout + 5*time.Second}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = strings.TrimRight(e.BaseURL, "/")
	cfg.HTTPClient = &doer{hc: hc}
	// go-openai fails a stream after this many non-data lines in a row; keep-alive comments
	// (DeepSeek, OpenRouter) are such lines, and the idle and attempt timeouts bound them instead.
	cfg.EmptyMessagesLimit = math.MaxUint32
	c := &Client{
		ep:  e,
		key: key,
		oc:  openai.NewClientWithConfig(cfg),
		tr:  tr,
		sem: semaphore.NewWeighted(int64(e.MaxConcurrency)),
		st:  Stats{Teacher: e.Name, Model: e.Model},
	}
	if e.RPM > 0 {
		// Burst of one second's worth: a sliding minute never sees much more than RPM.
		c.rpm = rate.NewLimiter(rate.Limit(float64(e.RPM)/60), max(1, int(math.Ceil(float64(e.RPM)/60))))
	}
	if e.TPM > 0 {
		// The burst must hold a whole request (prompts are large), so it is a full minute; the
		// bucket starts with one second's worth so a cold start cannot spend two minutes at once.
		c.tpmBurst = e.TPM
		c.tpm = rate.NewLimiter(rate.Limit(float64(e.TPM)/60), e.TPM)
		if first := max(1, int(math.Ceil(float64(e.TPM)/60))); first < e.TPM {
			c.tpm.ReserveN(time.Now(), e.TPM-first)
		}
	}
	if err := c.encodeBaseExtra(); err != nil {
		return nil, err
	}
	return c, nil
}

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
	return nil
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

// Name returns the teacher name.
func (c *Client) Name() string { return c.ep.Name }

// Model returns the model id sent with requests.
func (c *Client) Model() string { return c.ep.Model }

// Endpoint returns the client's endpoint with defaults filled in (it holds no key).
func (c *Client) Endpoint() Endpoint {
	e := c.ep
	if e.ExtraBody != nil {
		e.ExtraBody = mapsClone(e.ExtraBody)
	}
	return e
}

func mapsClone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// String describes the client without its key.
func (c *Client) String() string {
	return fmt.Sprintf("teachers.Client{%s %s at %s}", c.ep.Name, c.ep.Model, redactURL(c.ep.BaseURL))
}

// GoString is String, so %#v cannot print the key either.
func (c *Client) GoString() string { return c.String() }

// Close releases idle connections. The client stays usable.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.RetriesByReason = cloneCounts(c.st.RetriesByReason)
	s.FailuresByReason = cloneCounts(c.st.FailuresByReason)
	s.Kept = cloneCounts(c.st.Kept)
	s.FinishReasons = cloneCounts(c.st.FinishReasons)
	s.inFlight = 0
	return s
}

func cloneCounts(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func inc(m *map[string]int64, k string) {
	if *m == nil {
		*m = make(map[string]int64)
	}
	(*m)[k]++
}

// fault is why one attempt did not produce an acceptable reply.
type fault struct {
	reason     string
	status     int
	msg        string
	retryAfter time.Duration
	retry      bool  // worth another attempt
	cause      error // context error, for canceled
}

// Chat sends msgs and returns the assistant's reply, retrying transient faults. Reply.Content is
// the content exactly as returned (an inline <think> block stays there); Reply.Reasoning is the
// separate reasoning text of the first field of the profile's ReasoningOrder that has one
// (reasoning_content, reasoning, reasoning_details), and Reply.ReasoningSource names it. A
// streamed reply is assembled from its deltas and returned only when complete. Reply.Usage is
// the usage of the answering response, Usage.CostUSD its cost; Stats.Usage also counts
// responses that were retried. A failure is an *Error.
func (c *Client) Chat(ctx context.Context, msgs []chat.Message, opts chat.Options) (chat.Reply, error) {
	start := time.Now()
	c.mu.Lock()
	c.st.Calls++
	c.mu.Unlock()
	if len(msgs) == 0 {
		return chat.Reply{}, c.fail(&fault{reason: ReasonClient, msg: "no messages to send"}, 0)
	}
	req := openai.ChatCompletionRequest{Model: c.ep.Model, Messages: make([]openai.ChatCompletionMessage, len(msgs))}
	est := 1
	emptyContent := false
	for i, m := range msgs {
		if m.Role == "" {
			return chat.Reply{}, c.fail(&fault{reason: ReasonClient, msg: fmt.Sprintf("message %d has no role", i)}, 0)
		}
		req.Messages[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
		est += len(m.Content) / 4 // the usual ~4 bytes per token; corrected from usage afterwards
		emptyContent = emptyContent || m.Content == ""
	}
	extra := c.requestExtra(opts)
	for attempt := 1; ; attempt++ {
		rep, f := c.attempt(ctx, &req, extra, est, emptyContent)
		if f == nil {
			rep.Attempts = attempt
			rep.Latency = time.Since(start)
			c.mu.Lock()
			c.st.Succeeded++
			inc(&c.st.FinishReasons, rep.FinishReason)
			c.mu.Unlock()
			return rep, nil
		}
		if !f.retry || attempt > c.ep.MaxRetries {
			return chat.Reply{}, c.fail(f, attempt)
		}
		wait := c.backoff(attempt, f.retryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			// The caller's deadline would pass while waiting: report the fault itself.
			return chat.Reply{}, c.fail(f, attempt)
		}
		c.mu.Lock()
		c.st.Retries++
		inc(&c.st.RetriesByReason, f.reason)
		c.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return chat.Reply{}, c.fail(&fault{reason: ReasonCanceled, cause: ctx.Err(),
				msg: fmt.Sprintf("while waiting to retry after %s: %v", f.reason, ctx.Err())}, attempt)
		case <-t.C:
		}
	}
}

// fail records a terminal fault and turns it into an *Error.
func (c *Client) fail(f *fault, attempts int) error {
	c.mu.Lock()
	c.st.Failed++
	inc(&c.st.FailuresByReason, f.reason)
	c.mu.Unlock()
	return &Error{Teacher: c.ep.Name, Reason: f.reason, Status: f.status, Attempts: attempts, Message: c.redact(f.msg), cause: f.cause}
}

// redact removes the key from s (a server or proxy might echo it).
func (c *Client) redact(s string) string {
	if c.key != "" {
		s = strings.ReplaceAll(s, c.key, "[redacted]")
	}
	return s
}

// backoff is the wait before retry number n (1-based): full jitter over an exponentially growing
// ceiling, but never shorter than the server's Retry-After.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	ceil := c.ep.BackoffMax
	if n-1 < 40 {
		if b := c.ep.BackoffBase << (n - 1); b > 0 && b < ceil {
			ceil = b
		}
	}
	var d time.Duration
	if ceil > 0 {
		d = time.Duration(rand.Int64N(int64(ceil) + 1))
	}
	return max(d, retryAfter)
}

func (c *Client) canceled(ctx context.Context, what string, err error) *fault {
	cause := ctx.Err()
	if cause == nil {
		// rate.Limiter refuses a wait that would pass the deadline before it happens.
		cause = context.DeadlineExceeded
	}
	return &fault{reason: ReasonCanceled, cause: cause, msg: fmt.Sprintf("%s: %v", what, err)}
}

// attempt sends one request under the concurrency and rate limits.
func (c *Client) attempt(ctx context.Context, req *openai.ChatCompletionRequest, extra []byte, est int, emptyContent bool) (chat.Reply, *fault) {
	if err := c.sem.Acquire(ctx, 1); err != nil {
		return chat.Reply{}, c.canceled(ctx, "waiting for a concurrency slot", err)
	}
	defer c.sem.Release(1)
	if c.rpm != nil {
		if err := c.rpm.Wait(ctx); err != nil {
			return chat.Reply{}, c.canceled(ctx, "waiting for the RPM limit", err)
		}
	}
	reserved := 0
	if c.tpm != nil {
		reserved = min(est, c.tpmBurst)
		if err := c.tpm.WaitN(ctx, reserved); err != nil {
			return chat.Reply{}, c.canceled(ctx, "waiting for the TPM limit", err)
		}
	}
	waited, err := c.pace.wait(ctx, est)
	if err != nil {
		return chat.Reply{}, c.canceled(ctx, "waiting for the provider's rate limit to reset", err)
	}
	if waited > 0 {
		c.mu.Lock()
		c.st.Paced++
		c.st.PacedFor += waited
		c.mu.Unlock()
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, c.ep.Timeout)
	defer cancelTimeout()
	actx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	cp := &capture{extra: extra, emptyContent: emptyContent, stream: c.ep.Stream, idle: c.ep.StreamIdleTimeout, cancel: cancel}
	actx = context.WithValue(actx, captureKey{}, cp)

	c.mu.Lock()
	c.st.Requests++
	c.st.inFlight++
	if c.st.inFlight > c.st.MaxInFlight {
		c.st.MaxInFlight = c.st.inFlight
	}
	c.mu.Unlock()
	var a assembly
	if c.ep.Stream {
		err = c.sendStream(actx, req, cp, &a)
	} else {
		err = c.sendPlain(actx, req, cp, &a)
	}
	c.mu.Lock()
	c.st.inFlight--
	c.mu.Unlock()
	now := time.Now()
	c.pace.observe(cp.header, now)
	if err != nil {
		f := c.classify(ctx, actx, err, cp)
		if f.reason == ReasonRateLimited && f.retryAfter > 0 {
			c.pace.block(now.Add(f.retryAfter))
		}
		return chat.Reply{}, f
	}

	u, reported := a.chatUsage()
	if reported != nil {
		u.CostUSD = *reported
	} else {
		u.CostUSD = c.price(u)
	}
	c.mu.Lock()
	c.st.Usage = c.st.Usage.Add(u)
	c.st.CostUSD += u.CostUSD
	c.mu.Unlock()
	if c.tpm != nil {
		// Charge what the estimate missed (the completion, a denser prompt) as debt on later
		// requests. x/time/rate cannot hand tokens back, so an overestimate stays spent: the
		// limiter errs on the slow side.
		if more := u.Total() - reserved; more > 0 {
			c.tpm.ReserveN(time.Now(), min(more, c.tpmBurst))
		}
	}

	if a.choices == 0 {
		msg := "the response has no choices"
		if em := errorField(cp.body); em != "" {
			msg += "; its error: " + em // some gateways answer 200 with an error object
		}
		return chat.Reply{}, &fault{reason: ReasonEmptyChoices, status: cp.status, msg: msg, retry: true}
	}
	if c.ep.Stream && !a.finished {
		// The stream ended cleanly but before the reply did: never keep half a reply.
		return chat.Reply{}, &fault{reason: ReasonIncomplete, status: cp.status, retry: true,
			msg: fmt.Sprintf("the stream ended after %d bytes of content without a finish_reason", a.content.Len())}
	}
	rep := chat.Reply{Content: a.content.String(), FinishReason: a.finish, Usage: u, Model: a.model,
		ThinkOpened: c.ep.TemplateOpensThink && (c.ep.Thinking == nil || *c.ep.Thinking)}
	rep.Reasoning, rep.ReasoningSource = a.pickReasoning(c.prof.ReasoningOrder)
	if rule, ok := finishRules[a.finish]; ok {
		if rule.reason != "" {
			return chat.Reply{}, &fault{reason: rule.reason, status: cp.status, retry: true,
				msg: fmt.Sprintf("the provider ended the reply with finish_reason %q", a.finish)}
		}
		rep.FinishReason, rep.ProviderFinishReason = rule.norm, a.finish
	}
	if rep.Model == "" {
		rep.Model = c.ep.Model
	}

	var reason, policy string
	switch {
	case rep.FinishReason == chat.FinishContentFilter:
		reason, policy = ReasonContentFilter, c.ep.OnContentFilter
	case rep.FinishReason == chat.FinishLength:
		reason, policy = ReasonLength, c.ep.OnLength
	case strings.TrimSpace(rep.Content) == "":
		reason, policy = ReasonEmpty, c.ep.OnEmpty
	default:
		return rep, nil
	}
	switch policy {
	case OnKeep:
		c.mu.Lock()
		inc(&c.st.Kept, reason)
		c.mu.Unlock()
		return rep, nil
	case OnRetry:
		return chat.Reply{}, &fault{reason: reason, status: cp.status, msg: "reply rejected by " + policyField[reason] + ": retry", retry: true}
	default:
		return chat.Reply{}, &fault{reason: reason, status: cp.status, msg: "reply rejected by " + policyField[reason] + ": fail"}
	}
}

// Cost is what u cost: its CostUSD when set (reported by the provider or priced by Chat), else
// u priced with the endpoint's prices.
func (c *Client) Cost(u chat.Usage) float64 {
	if u.CostUSD > 0 {
		return u.CostUSD
	}
	return c.price(u)
}

// price prices u: cached prompt tokens at price_cached_prompt_per_m (else the prompt price).
func (c *Client) price(u chat.Usage) float64 {
	cachedPrice := c.ep.PricePromptPerM
	if c.ep.PriceCachedPromptPerM != nil {
		cachedPrice = *c.ep.PriceCachedPromptPerM
	}
	cached := max(0, min(u.CachedTokens, u.PromptTokens))
	return (float64(u.PromptTokens-cached)*c.ep.PricePromptPerM + float64(cached)*cachedPrice +
		float64(u.CompletionTokens)*c.ep.PriceCompletionPerM) / 1e6
}

// errDecode marks a 2xx body or stream chunk that is not the JSON it should be.
type errDecode struct{ err error }

func (e *errDecode) Error() string { return "decoding the response: " + e.err.Error() }

// sendPlain sends a non-streaming request and folds the response into a. go-openai decodes and
// validates the body; the doer kept it, and it is decoded once more here for the fields
// go-openai does not know (see wire.go).
func (c *Client) sendPlain(ctx context.Context, req *openai.ChatCompletionRequest, cp *capture, a *assembly) error {
	if _, err := c.oc.CreateChatCompletion(ctx, *req); err != nil {
		return err
	}
	var w oai.Completion
	if err := json.Unmarshal(cp.body, &w); err != nil {
		return &errDecode{err}
	}
	a.add(&w)
	return nil
}

// sendStream sends a streaming request through go-openai's stream API and folds every chunk
// into a. The chunks are read with RecvRaw and decoded here, since go-openai's delta type drops
// reasoning, reasoning_details and the usage extras (see wire.go). A server that answers a
// stream request with one JSON completion (ignoring stream) is read as that completion.
func (c *Client) sendStream(ctx context.Context, req *openai.ChatCompletionRequest, cp *capture, a *assembly) error {
	r := *req
	r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	st, err := c.oc.CreateChatCompletionStream(ctx, r)
	if err != nil {
		return err
	}
	defer st.Close()
	if cp.plainJSON {
		var w oai.Completion
		if err := json.Unmarshal(cp.body, &w); err != nil {
			return &errDecode{err}
		}
		a.add(&w)
		a.finished = true
		return nil
	}
	for {
		raw, err := st.RecvRaw()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw == nil {
			// go-openai saw a `data: {"error": …}` event but could not decode it: it decodes
			// every non-data line of the stream so far together with the event, and keep-alive
			// comments (DeepSeek, OpenRouter) make that invalid JSON; it then returns (nil, nil).
			return errStreamEvent
		}
		if len(raw) == 0 {
			continue // an empty data line carries nothing
		}
		var w oai.Completion
		if err := json.Unmarshal(raw, &w); err != nil {
			return &errDecode{err}
		}
		a.add(&w)
	}
}

// errStreamEvent is an error event inside a 200 stream whose text go-openai lost.
var errStreamEvent = errors.New("an error event in the stream")

// policyField names the config field that decides each reply policy.
var policyField = map[string]string{ReasonEmpty: "on_empty", ReasonLength: "on_length", ReasonContentFilter: "on_content_filter"}

// classify turns an error of CreateChatCompletion into a fault.
func (c *Client) classify(ctx, actx context.Context, err error, cp *capture) *fault {
	if ctx.Err() != nil {
		return &fault{reason: ReasonCanceled, cause: ctx.Err(), msg: ctx.Err().Error()}
	}
	if errors.Is(context.Cause(actx), errStreamIdle) {
		return &fault{reason: ReasonStreamIdle, status: cp.status, retry: true,
			msg: fmt.Sprintf("the stream sent nothing for %v (stream_idle_timeout)", c.ep.StreamIdleTimeout)}
	}
	status := 0
	msg := ""
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var de *errDecode
	switch {
	case errors.As(err, &de):
		return &fault{reason: ReasonMalformed, status: cp.status, msg: de.Error(), retry: true}
	case errors.Is(err, errStreamEvent):
		return &fault{reason: ReasonServer, status: cp.status, msg: err.Error(), retry: true}
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 0:
		// An error event inside a 200 stream (vLLM, OpenRouter send one when generation fails).
		return &fault{reason: ReasonServer, status: cp.status, msg: "error event in the stream: " + apiErr.Message, retry: true}
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
		msg = strings.TrimSpace(string(reqErr.Body))
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		if msg == "" {
			msg = reqErr.HTTPStatus
		}
	}
	if status != 0 {
		f := &fault{status: status, msg: msg, retryAfter: retryAfter(cp.header)}
		switch {
		case status == http.StatusTooManyRequests:
			f.reason, f.retry = ReasonRateLimited, true
		case status >= 500 || status == http.StatusRequestTimeout:
			f.reason, f.retry = ReasonServer, true
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			f.reason = ReasonAuth
		default:
			f.reason = ReasonClient
		}
		return f
	}
	var ne net.Error
	if errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &fault{reason: ReasonTimeout, status: cp.status, msg: fmt.Sprintf("no complete response within %v", c.ep.Timeout), retry: true}
	}
	if cp.bodyRead {
		return &fault{reason: ReasonMalformed, status: cp.status, msg: fmt.Sprintf("decoding the %d-byte response: %v", len(cp.body), err), retry: true}
	}
	return &fault{reason: ReasonConnection, msg: err.Error(), retry: true}
}

// retryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or an HTTP date); 0 if absent.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// errorField reads error.message from a raw body, "" when absent.
func errorField(body []byte) string {
	if !bytes.Contains(body, []byte(`"error"`)) {
		return ""
	}
	// Only the message: providers send code as a string or a number (OpenRouter), so
	// oai.ErrorBody would refuse some of them.
	var r struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil {
		return ""
	}
	if len(r.Error.Message) > 500 {
		return r.Error.Message[:500] + "…"
	}
	return r.Error.Message
}

// captureKey is the context key of an attempt's capture.
type captureKey struct{}

// capture carries data between Client.attempt and the doer for one request.
type capture struct {
	extra []byte // fields to merge into the request body
	// emptyContent: some message has empty content, which go-openai omits (omitempty); the doer
	// puts `"content":""` back, since servers refuse an assistant message without content.
	emptyContent bool
	// stream: the request streams; the doer hands the body over unread, watched for idleness
	// (idle) by a timer that ends the attempt through cancel.
	stream bool
	idle   time.Duration
	cancel context.CancelCauseFunc
	status int
	header http.Header
	body   []byte
	// bodyRead: a complete 2xx body was read; plainJSON: a stream request got one anyway.
	bodyRead, plainJSON bool
}

// errStreamIdle is the cause an idle stream's attempt is cancelled with.
var errStreamIdle = errors.New("stream idle")

var roleOnly = regexp.MustCompile(`\{"role":"([a-z_]+)"\}`)

// doer is the HTTP layer under go-openai. go-openai v1.43 cannot add arbitrary fields to a chat
// request (its extra-body option is internal and only applies to map bodies; Temperature is a
// float32 with omitempty, so 0 and exact values cannot be sent), does not expose the response
// fields of reasoning models (see wire.go), drops response headers on errors, and has no idle
// timeout for streams. The doer therefore splices pre-encoded fields into the request JSON,
// keeps status and headers, reads a plain response's whole body within the attempt's deadline
// and keeps it, and hands a stream's body over behind an idle timer and a size limit.
type doer struct{ hc *http.Client }

// Do implements openai.HTTPDoer.
func (d *doer) Do(req *http.Request) (*http.Response, error) {
	cp, _ := req.Context().Value(captureKey{}).(*capture)
	if cp != nil && (len(cp.extra) > 0 || cp.emptyContent) && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		body = bytes.TrimRight(body, " \n")
		if len(body) < 2 || body[len(body)-1] != '}' {
			return nil, fmt.Errorf("request body is not a JSON object")
		}
		if cp.emptyContent {
			// A message without content marshals as exactly {"role":"R"}; quotes inside JSON
			// strings are escaped, so this pattern can only be such a message.
			body = roleOnly.ReplaceAll(body, []byte(`{"role":"$1","content":""}`))
		}
		merged := body
		if len(cp.extra) > 0 {
			merged = make([]byte, 0, len(body)+len(cp.extra)+1)
			merged = append(merged, body[:len(body)-1]...)
			merged = append(merged, ',')
			merged = append(merged, cp.extra...)
			merged = append(merged, '}')
		}
		req.Body = io.NopCloser(bytes.NewReader(merged))
		req.ContentLength = int64(len(merged))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(merged)), nil }
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if cp != nil {
		cp.status, cp.header = resp.StatusCode, resp.Header
		if cp.stream && ok && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			resp.Body = newIdleBody(resp.Body, cp.idle, func() { cp.cancel(errStreamIdle) })
			return resp, nil
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the response body (HTTP %d): %w", resp.StatusCode, err)
	}
	if len(body) > maxResponseBytes {
		body = body[:maxResponseBytes] // decoding fails: reported as malformed
	}
	if cp != nil {
		cp.body, cp.bodyRead = body, ok
		if cp.stream && ok {
			cp.plainJSON = true
			body = nil // go-openai's stream reader sees an empty stream; sendStream decodes cp.body
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// idleBody is a stream's response body that cancels the attempt when no byte arrives for d
// (keep-alive comments count: they show the provider is alive, and the attempt's timeout
// bounds the whole wait) and fails past maxResponseBytes.
type idleBody struct {
	rc io.ReadCloser
	t  *time.Timer
	d  time.Duration
	n  int64
}

func newIdleBody(rc io.ReadCloser, d time.Duration, onIdle func()) *idleBody {
	return &idleBody{rc: rc, d: d, t: time.AfterFunc(d, onIdle)}
}

// Read implements io.Reader.
func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
		b.n += int64(n)
		if b.n > maxResponseBytes {
			return n, fmt.Errorf("the stream is longer than %d bytes", maxResponseBytes)
		}
	}
	return n, err
}

// Close implements io.Closer.
func (b *idleBody) Close() error {
	b.t.Stop()
	return b.rc.Close()
}

var _ chat.Policy = (*Client)(nil)
