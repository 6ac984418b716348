package teachers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// maxResponseBytes bounds a plain response body, and is the least bound of a stream
// (streamLimit): a reply that goes on past it fails as ReasonTooLong (a plain body that ends
// there inside trailing whitespace is read as it is).
const maxResponseBytes = 64 << 20

// A stream's bound is on what the completion may carry, not on what the client keeps of it: each
// chunk is read within maxUnit and dropped once folded in, each text keeps its first
// maxReplyText bytes, so what a stream holds does not grow with its length (the reply budget
// counts it). A stream sends at least one chunk per generated token, and a chunk with one token
// of reasoning in OpenRouter's shape (its envelope, reasoning and reasoning_details both
// carrying the token) takes about 400 bytes on the wire: 64 MiB was reached at about 168,000
// tokens, where gpt-oss may write 131,072 (TestStreamLongReasoning). So a stream may take streamTokenBytes for each token
// its request allows (the larger of the max_tokens and max_completion_tokens it sends,
// requestTokens, else defaultStreamTokens), never less than maxResponseBytes.
const (
	// streamTokenBytes is what a stream may take per token: about five times the heaviest
	// chunk of one token in a provider's shape (OpenRouter's, with reasoning_details).
	streamTokenBytes = 2 << 10
	// defaultStreamTokens is the tokens a stream may carry when the request sets neither
	// max_tokens nor max_completion_tokens (the server's default, up to the model's context):
	// twice gpt-oss's 131,072.
	defaultStreamTokens = 256 << 10
	// maxStreamTokens caps the tokens a stream's bound counts (4 TiB): past it, only the
	// attempt's timeout ends a stream.
	maxStreamTokens = 1 << 31
)

// streamLimit is the most bytes a stream of a request allowing tokens completion tokens (0: no
// max_tokens sent) may take.
func streamLimit(tokens int) int64 {
	if tokens <= 0 {
		tokens = defaultStreamTokens
	}
	return max(maxResponseBytes, int64(min(tokens, maxStreamTokens))*streamTokenBytes)
}

// maxResponseHeader bounds what net/http reads of a response's headers (status line included),
// which each attempt holds beside the reply budget: net/http's default is 10 MB. A provider
// sends a few KiB (its proxies refuse much more); past it the attempt fails as a connection
// fault, retried.
const maxResponseHeader = 1 << 20

// Client is a chat.Policy backed by one OpenAI-compatible endpoint. It is safe for concurrent use;
// it bounds its own concurrency and request/token rates, so callers need no limiter of their own.
type Client struct {
	ep  Endpoint
	key string // never printed: Client implements fmt.Stringer and fmt.GoStringer
	// url is {base_url}/chat/completions; hc sends to it over tr.
	url string
	hc  *http.Client
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
	// sampling settings, reasoning effort), merged into every request body (Client.request).
	baseExtra map[string]json.RawMessage
	baseJoin  []byte
	// baseTokens is the completion budget the endpoint's fields send, by tokenFields
	// (requestTokens).
	baseTokens [len(tokenFields)]int

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
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           0,
		MaxIdleConnsPerHost:    max(e.MaxConcurrency, 2),
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    15 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeader,
	}
	// The per-attempt context carries e.Timeout; the client timeout is a backstop a little longer.
	hc := &http.Client{Transport: tr, Timeout: e.Timeout + 5*time.Second, CheckRedirect: sameOriginRepost}
	c := &Client{
		ep:  e,
		key: key,
		url: completionsURL(e.BaseURL),
		hc:  hc,
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

// Chat sends msgs and returns the assistant's reply, retrying transient faults. Reply.Content is
// the content exactly as returned (an inline <think> block stays there); Reply.Reasoning is the
// separate reasoning text of the first field of the profile's ReasoningOrder that has one
// (reasoning_content, reasoning, reasoning_details), and Reply.ReasoningSource names it. Each is
// cut at textcap.Reply as textcap.Cut cuts it when longer (what the Stepper keeps of it). A
// streamed reply is assembled from its deltas and returned only when complete. Reply.Usage is
// the usage of the answering response, Usage.CostUSD its cost; Stats.Usage also counts
// responses that were retried. A failure is an *Error.
func (c *Client) Chat(ctx context.Context, msgs []chat.Message, opts chat.Options) (chat.Reply, error) {
	start := time.Now()
	c.mu.Lock()
	c.st.Calls++
	c.mu.Unlock()
	body, est, f := c.request(msgs, opts)
	if f != nil {
		return chat.Reply{}, c.fail(f, 0)
	}
	limit := streamLimit(c.requestTokens(opts))
	var floor int64 // of the reply budget: the budget's, until an attempt is refused room
	for attempt := 1; ; attempt++ {
		rep, f := c.attempt(ctx, body, est, limit, floor)
		if f == nil {
			rep.Attempts = attempt
			rep.Latency = time.Since(start)
			c.mu.Lock()
			c.st.Succeeded++
			inc(&c.st.FinishReasons, rep.FinishReason)
			c.mu.Unlock()
			return rep, nil
		}
		floor = max(floor, f.floor)
		if f := c.waitRetry(ctx, attempt, f); f != nil {
			return chat.Reply{}, c.fail(f, attempt)
		}
	}
}

// request is the request body of msgs under opts (oai.Request, with the endpoint's and this
// call's fields appended: requestExtra), and the prompt's token estimate.
func (c *Client) request(msgs []chat.Message, opts chat.Options) ([]byte, int, *fault) {
	if len(msgs) == 0 {
		return nil, 0, &fault{reason: ReasonClient, msg: "no messages to send"}
	}
	req := oai.Request{Model: c.ep.Model, Messages: make([]oai.RequestMessage, len(msgs)), Stream: c.ep.Stream}
	if c.ep.Stream {
		req.StreamOptions = &oai.StreamOptions{IncludeUsage: true}
	}
	est := 1
	for i, m := range msgs {
		if m.Role == "" {
			return nil, 0, &fault{reason: ReasonClient, msg: fmt.Sprintf("message %d has no role", i)}
		}
		req.Messages[i] = oai.NewMessage(m.Role, m.Content)
		est += len(m.Content) / 4 // the usual ~4 bytes per token; corrected from usage afterwards
	}
	body, err := json.Marshal(&req)
	if err != nil {
		return nil, 0, &fault{reason: ReasonClient, msg: "encoding the request: " + err.Error()}
	}
	if extra := c.requestExtra(opts); len(extra) > 0 {
		// body ends in the object's '}': the fields go before it
		body = append(append(append(body[:len(body)-1:len(body)-1], ','), extra...), '}')
	}
	return body, est, nil
}

// fail records a terminal fault and turns it into an *Error, its message redacted, then cut at
// textcap.Error: a provider's error message is whatever it sent (up to maxResponseBytes), and
// the early stop prints it.
func (c *Client) fail(f *fault, attempts int) error {
	c.mu.Lock()
	c.st.Failed++
	inc(&c.st.FailuresByReason, f.reason)
	c.mu.Unlock()
	return &Error{Teacher: c.ep.Name, Reason: f.reason, Status: f.status, Attempts: attempts,
		Message: textcap.Cut(c.redact(f.msg), textcap.Error), cause: f.cause}
}

// redact removes the key from s (a server or proxy might echo it).
func (c *Client) redact(s string) string {
	if c.key != "" {
		s = strings.ReplaceAll(s, c.key, "[redacted]")
	}
	return s
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

var _ chat.Policy = (*Client)(nil)
