package teachers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/teachers"
)

var question = []chat.Message{
	{Role: chat.RoleSystem, Content: "You write SQLite SQL."},
	{Role: chat.RoleUser, Content: "Question: how many singers are there?"},
}

// endpoint is a fast-retrying endpoint for srv.
func endpoint(srv *oaitest.Server, mut func(*teachers.Endpoint)) teachers.Endpoint {
	e := teachers.Endpoint{
		Name: "fake", BaseURL: srv.BaseURL(), Model: "test-model",
		Timeout: 2 * time.Second, MaxRetries: 3,
		BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond,
	}
	if mut != nil {
		mut(&e)
	}
	return e
}

func newClient(t testing.TB, e teachers.Endpoint) *teachers.Client {
	t.Helper()
	c, err := teachers.New(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestChatBasic(t *testing.T) {
	srv := oaitest.NewServer(t, oaitest.Fixed("<think>count them</think>\n<sql>SELECT count(*) FROM singer</sql>"))
	c := newClient(t, endpoint(srv, nil))
	if c.Name() != "fake" || c.Model() != "test-model" {
		t.Fatalf("name/model = %s/%s", c.Name(), c.Model())
	}
	rep, err := c.Chat(context.Background(), question, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Content != "<think>count them</think>\n<sql>SELECT count(*) FROM singer</sql>" {
		t.Errorf("content changed: %q", rep.Content)
	}
	if rep.Reasoning != "" || rep.ReasoningSource != "" || rep.FinishReason != chat.FinishStop || rep.Attempts != 1 || rep.Model != "test-model" {
		t.Errorf("reply = %+v", rep)
	}
	if rep.Usage.PromptTokens == 0 || rep.Usage.CompletionTokens == 0 || rep.Latency <= 0 {
		t.Errorf("usage/latency missing: %+v", rep)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 2 || reqs[0].Messages[1].Content != question[1].Content || reqs[0].Model != "test-model" {
		t.Fatalf("server saw %+v", reqs)
	}
}

// TestFaultsRetried: each transient fault is retried, the reply arrives on the third attempt, the
// server sees exactly three requests, and the retry reason is recorded.
func TestFaultsRetried(t *testing.T) {
	cases := []struct {
		fault  oaitest.Fault
		reason string
	}{
		{oaitest.RateLimit, teachers.ReasonRateLimited},
		{oaitest.ServerError, teachers.ReasonServer},
		{oaitest.BadGateway, teachers.ReasonServer},
		{oaitest.Unavailable, teachers.ReasonServer},
		{oaitest.Reset, teachers.ReasonConnection},
		{oaitest.ResetMidBody, teachers.ReasonConnection},
		{oaitest.Hang, teachers.ReasonTimeout},
		{oaitest.Malformed, teachers.ReasonMalformed},
		{oaitest.Truncated, teachers.ReasonMalformed},
		{oaitest.EmptyChoices, teachers.ReasonEmptyChoices},
		{oaitest.EmptyContent, teachers.ReasonEmpty},
	}
	for _, tc := range cases {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			srv := oaitest.NewServer(t, oaitest.Fixed("<sql>SELECT 1</sql>"), oaitest.WithSequence(tc.fault, tc.fault))
			c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.Timeout = 150 * time.Millisecond }))
			rep, err := c.Chat(context.Background(), question, chat.Options{})
			if err != nil {
				t.Fatalf("want success after retries, got %v", err)
			}
			if rep.Content != "<sql>SELECT 1</sql>" || rep.Attempts != 3 {
				t.Errorf("reply = %+v", rep)
			}
			if n := srv.Count(); n != 3 {
				t.Errorf("server saw %d requests, want 3", n)
			}
			st := c.Stats()
			if st.Requests != 3 || st.Retries != 2 || st.RetriesByReason[tc.reason] != 2 || st.Succeeded != 1 || st.Failed != 0 {
				t.Errorf("stats = %+v, want 2 retries of %s", st, tc.reason)
			}
			for i, r := range srv.Requests() {
				if r.Attempt != i {
					t.Errorf("request %d: server attempt %d", i, r.Attempt)
				}
			}
		})
	}
}

func TestSlowIsNotAFault(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithSequence(oaitest.Slow), oaitest.WithSlowDelay(30*time.Millisecond))
	c := newClient(t, endpoint(srv, nil))
	start := time.Now()
	rep, err := c.Chat(context.Background(), question, chat.Options{})
	if err != nil || rep.Attempts != 1 {
		t.Fatalf("rep %+v err %v", rep, err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("slow reply came in %v", d)
	}
}

func TestRetriesBounded(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithFaultRate(1, 7, oaitest.ServerError))
	c := newClient(t, endpoint(srv, nil))
	_, err := c.Chat(context.Background(), question, chat.Options{})
	var te *teachers.Error
	if !errors.As(err, &te) {
		t.Fatalf("want *teachers.Error, got %v", err)
	}
	if te.Reason != teachers.ReasonServer || te.Attempts != 4 || te.Status != 500 || !strings.Contains(te.Message, "The server had an error") {
		t.Errorf("error = %+v (%v)", te, err)
	}
	if srv.Count() != 4 {
		t.Errorf("server saw %d requests, want 1+MaxRetries=4", srv.Count())
	}
	st := c.Stats()
	if st.Failed != 1 || st.FailuresByReason[teachers.ReasonServer] != 1 || st.Retries != 3 {
		t.Errorf("stats = %+v", st)
	}
	if teachers.Reason(fmt.Errorf("wrapped: %w", err)) != teachers.ReasonServer {
		t.Errorf("Reason does not see through wrapping")
	}
}

func TestNonRetryableFailAtOnce(t *testing.T) {
	for _, tc := range []struct {
		fault  oaitest.Fault
		reason string
		status int
		msg    string
	}{
		{oaitest.BadRequest, teachers.ReasonClient, 400, "This request is invalid (oaitest)."},
		{oaitest.Unauthorized, teachers.ReasonAuth, 401, "Incorrect API key provided (oaitest)."},
	} {
		srv := oaitest.NewServer(t, nil, oaitest.WithSequence(tc.fault, tc.fault))
		c := newClient(t, endpoint(srv, nil))
		_, err := c.Chat(context.Background(), question, chat.Options{})
		var te *teachers.Error
		if !errors.As(err, &te) || te.Reason != tc.reason || te.Status != tc.status || te.Attempts != 1 || te.Message != tc.msg {
			t.Errorf("%s: error %+v", tc.fault, err)
		}
		if srv.Count() != 1 {
			t.Errorf("%s: %d requests, want 1", tc.fault, srv.Count())
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	for _, tc := range []struct {
		fault oaitest.Fault
		after time.Duration
		min   time.Duration
	}{
		{oaitest.RateLimitRetryAfter, time.Second, 950 * time.Millisecond},
		// An HTTP date has whole seconds: asking for 2s waits more than 1s.
		{oaitest.RateLimitRetryAfterDate, 2 * time.Second, time.Second},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			srv := oaitest.NewServer(t, nil, oaitest.WithSequence(tc.fault), oaitest.WithRetryAfter(tc.after))
			c := newClient(t, endpoint(srv, nil))
			start := time.Now()
			rep, err := c.Chat(context.Background(), question, chat.Options{})
			if err != nil || rep.Attempts != 2 {
				t.Fatalf("rep %+v err %v", rep, err)
			}
			if d := time.Since(start); d < tc.min || d > tc.after+time.Second {
				t.Errorf("waited %v, want at least %v (backoff alone is ≤4ms)", d, tc.min)
			}
			if c.Stats().RetriesByReason[teachers.ReasonRateLimited] != 1 {
				t.Errorf("stats = %+v", c.Stats())
			}
		})
	}
	t.Run("beyond deadline", func(t *testing.T) {
		t.Parallel()
		srv := oaitest.NewServer(t, nil, oaitest.WithSequence(oaitest.RateLimitRetryAfter), oaitest.WithRetryAfter(30*time.Second))
		c := newClient(t, endpoint(srv, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Chat(ctx, question, chat.Options{})
		if teachers.Reason(err) != teachers.ReasonRateLimited || time.Since(start) > 300*time.Millisecond {
			t.Errorf("want an immediate rate_limited failure, got %v after %v", err, time.Since(start))
		}
	})
}

func TestReplyPolicies(t *testing.T) {
	long := "<think>" + strings.Repeat("hmm ", 20) + "</think><sql>SELECT 1</sql>"
	cases := []struct {
		name     string
		fault    oaitest.Fault
		set      func(*teachers.Endpoint)
		reason   string
		attempts int  // server requests
		ok       bool // Chat succeeds
		kept     bool
	}{
		{"length default keep", oaitest.Length, nil, teachers.ReasonLength, 1, true, true},
		{"length retry", oaitest.Length, func(e *teachers.Endpoint) { e.OnLength = teachers.OnRetry }, teachers.ReasonLength, 2, true, false},
		{"length fail", oaitest.Length, func(e *teachers.Endpoint) { e.OnLength = teachers.OnFail }, teachers.ReasonLength, 1, false, false},
		{"content filter default fail", oaitest.ContentFilter, nil, teachers.ReasonContentFilter, 1, false, false},
		{"content filter keep", oaitest.ContentFilter, func(e *teachers.Endpoint) { e.OnContentFilter = teachers.OnKeep }, teachers.ReasonContentFilter, 1, true, true},
		{"empty default retry", oaitest.EmptyContent, nil, teachers.ReasonEmpty, 2, true, false},
		{"empty keep", oaitest.EmptyContent, func(e *teachers.Endpoint) { e.OnEmpty = teachers.OnKeep }, teachers.ReasonEmpty, 1, true, true},
		{"empty fail", oaitest.EmptyContent, func(e *teachers.Endpoint) { e.OnEmpty = teachers.OnFail }, teachers.ReasonEmpty, 1, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := oaitest.NewServer(t, oaitest.Fixed(long), oaitest.WithSequence(tc.fault))
			c := newClient(t, endpoint(srv, tc.set))
			rep, err := c.Chat(context.Background(), question, chat.Options{})
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
			if !tc.ok && (teachers.Reason(err) != tc.reason || !strings.Contains(err.Error(), "on_")) {
				t.Errorf("err = %v, want reason %s naming the policy", err, tc.reason)
			}
			if srv.Count() != tc.attempts {
				t.Errorf("server requests = %d, want %d", srv.Count(), tc.attempts)
			}
			st := c.Stats()
			if tc.kept != (st.Kept[tc.reason] == 1) {
				t.Errorf("kept = %v", st.Kept)
			}
			if tc.kept && tc.fault == oaitest.Length && (rep.FinishReason != chat.FinishLength || rep.Content != long[:len(long)/2]) {
				t.Errorf("kept length reply = %+v", rep)
			}
			if tc.ok && !tc.kept && rep.Content != long {
				t.Errorf("retried reply = %+v", rep)
			}
		})
	}
}

func TestEmptyRetriesExhausted(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithFaultRate(1, 1, oaitest.EmptyContent))
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.MaxRetries = 2 }))
	_, err := c.Chat(context.Background(), question, chat.Options{})
	if teachers.Reason(err) != teachers.ReasonEmpty || srv.Count() != 3 {
		t.Fatalf("err %v after %d requests", err, srv.Count())
	}
}

func TestReasoningExtraction(t *testing.T) {
	cases := []struct {
		name, want, source string
		resp               oaitest.Response
	}{
		{"reasoning_content", "from the field", chat.SourceReasoningContent, oaitest.Response{Content: "<sql>SELECT 1</sql>", ReasoningContent: "from the field"}},
		{"reasoning", "from the other field", chat.SourceReasoning, oaitest.Response{Content: "<sql>SELECT 1</sql>", Reasoning: "from the other field"}},
		{"inline stays in the content", "", "", oaitest.Response{Content: "<think>inline thoughts</think>\n<sql>SELECT 1</sql>"}},
		{"field next to inline", "field", chat.SourceReasoningContent, oaitest.Response{Content: "<think>inline</think><sql>SELECT 1</sql>", ReasoningContent: "field"}},
		{"none", "", "", oaitest.Response{Content: "<sql>SELECT 1</sql>"}},
	}
	for _, tc := range cases {
		srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response { return tc.resp })
		c := newClient(t, endpoint(srv, nil))
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Reasoning != tc.want || rep.ReasoningSource != tc.source || rep.Content != tc.resp.Content {
			t.Errorf("%s: reasoning %q from %q, content %q", tc.name, rep.Reasoning, rep.ReasoningSource, rep.Content)
		}
		if tc.want != "" && rep.Usage.ReasoningTokens != oaitest.EstimateTokens(tc.want) {
			t.Errorf("%s: reasoning tokens %d", tc.name, rep.Usage.ReasoningTokens)
		}
	}
}

func TestUsageAndCost(t *testing.T) {
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		return oaitest.Response{Content: "<sql>SELECT 1</sql>", Usage: &oaitest.Usage{PromptTokens: 1000, CompletionTokens: 300, ReasoningTokens: 200, CachedTokens: 100}}
	}, oaitest.WithSequence(oaitest.EmptyContent)) // the first reply is billed, then retried
	cached := 0.05
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
		e.PricePromptPerM, e.PriceCompletionPerM, e.PriceCachedPromptPerM = 0.5, 2, &cached
	}))
	for range 3 {
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// 900 uncached prompt tokens at 0.5, 100 cached at 0.05, 300 completion at 2 (per 1M).
		if u := rep.Usage; u.PromptTokens != 1000 || u.CompletionTokens != 300 || u.ReasoningTokens != 200 || u.CachedTokens != 100 ||
			math.Abs(u.CostUSD-(900*0.5+100*0.05+300*2)/1e6) > 1e-15 {
			t.Errorf("reply usage = %+v", rep.Usage)
		}
	}
	st := c.Stats()
	// 4 billed responses: 3 answers and the rejected empty one.
	if u := st.Usage; u.PromptTokens != 4000 || u.CompletionTokens != 1200 || u.ReasoningTokens != 800 || u.CachedTokens != 400 {
		t.Errorf("stats usage = %+v", st.Usage)
	}
	want := 4 * (900*0.5 + 100*0.05 + 300*2) / 1e6
	if math.Abs(st.CostUSD-want) > 1e-12 {
		t.Errorf("cost = %v, want %v", st.CostUSD, want)
	}
	if st.Calls != 3 || st.Succeeded != 3 || st.Requests != 4 || st.FinishReasons["stop"] != 3 {
		t.Errorf("stats = %+v", st)
	}
	b, err := json.Marshal(st)
	if err != nil || !strings.Contains(string(b), `"cost_usd"`) {
		t.Errorf("stats JSON %s %v", b, err)
	}
}

func TestRequestFields(t *testing.T) {
	srv := oaitest.NewServer(t, nil)
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
		e.Temperature = chat.Float(0) // must be sent although zero
		e.TopP = chat.Float(0.95)
		e.MaxTokens = 512
		e.ReasoningEffort = "high"
		e.ExtraBody = map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": true}, "top_p": 0.1}
	}))
	if _, err := c.Chat(context.Background(), question, chat.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat(context.Background(), question, chat.Options{Temperature: chat.Float(0.7), MaxTokens: 64, Seed: chat.Int64(42), TopK: 20, Stop: []string{"</sql>"}}); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	field := func(i int, name string) string { return string(reqs[i].Field(name)) }
	for name, want := range map[string]string{"temperature": "0", "top_p": "0.95", "max_tokens": "512", "reasoning_effort": `"high"`,
		"chat_template_kwargs": `{"enable_thinking":true}`, "model": `"test-model"`, "stream": "false"} {
		if got := field(0, name); got != want {
			t.Errorf("request 0 %s = %s, want %s", name, got, want)
		}
	}
	for name, want := range map[string]string{"temperature": "0.7", "max_tokens": "64", "seed": "42", "top_k": "20", "stop": `["\u003c/sql\u003e"]`, "top_p": "0.95"} {
		if got := field(1, name); got != want {
			t.Errorf("request 1 %s = %s, want %s", name, got, want)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[1].Body, &m); err != nil {
		t.Fatalf("merged body is not JSON: %v\n%s", err, reqs[1].Body)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Content: "<sql>SELECT 1</sql>", Delay: 20 * time.Millisecond}
	})
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.MaxConcurrency = 3 }))
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("q%d", i)}}
			if _, err := c.Chat(context.Background(), msgs, chat.Options{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := srv.MaxInFlight(); m != 3 {
		t.Errorf("server max in flight = %d, want exactly 3", m)
	}
	if m := c.Stats().MaxInFlight; m != 3 {
		t.Errorf("client max in flight = %d", m)
	}
}

func runParallel(t *testing.T, c *teachers.Client, n, workers int, prompt string) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		for i := range n {
			next <- i
		}
		close(next)
	}()
	var mu sync.Mutex
	var firstErr error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("%s %d", prompt, i)}}
				if _, err := c.Chat(context.Background(), msgs, chat.Options{}); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return time.Since(start)
}

func TestRPMLimiter(t *testing.T) {
	srv := oaitest.NewServer(t, nil)
	// 3000 RPM = 50/s with a burst of 50: 100 requests need about one second.
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.RPM = 3000; e.MaxConcurrency = 16 }))
	d := runParallel(t, c, 100, 16, "q")
	if d < 900*time.Millisecond || d > 3*time.Second {
		t.Errorf("100 requests at 3000 RPM took %v, want about 1s", d)
	}
	free := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.MaxConcurrency = 16 }))
	if d := runParallel(t, free, 100, 16, "q"); d > 700*time.Millisecond {
		t.Errorf("100 unlimited requests took %v", d)
	}
}

func TestTPMLimiter(t *testing.T) {
	srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Content: "<sql>SELECT 1</sql>", Usage: &oaitest.Usage{PromptTokens: 1000, CompletionTokens: 1000}}
	})
	// 600k TPM = 10k tokens/s, starting with 10k. Each request reserves its prompt estimate
	// (~1000) before and is charged the rest of its 2000 after, so the 10th sequential request
	// starts once 9×2000+1000 tokens are spent: about 0.9s.
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.TPM = 600_000 }))
	d := runParallel(t, c, 10, 1, strings.Repeat("x", 4000))
	if d < 800*time.Millisecond || d > 3*time.Second {
		t.Errorf("10×2000 tokens at 600k TPM took %v, want about 1s", d)
	}
}

func TestCancelDuringHang(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithSequence(oaitest.Hang))
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.Timeout = time.Minute }))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := c.Chat(ctx, question, chat.Options{})
	if !errors.Is(err, context.Canceled) || teachers.Reason(err) != teachers.ReasonCanceled {
		t.Fatalf("want a canceled error, got %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("cancel took %v", time.Since(start))
	}
	if srv.Count() != 1 {
		t.Errorf("canceled call must not retry: %d requests", srv.Count())
	}
}

func TestMissingKey(t *testing.T) {
	srv := oaitest.NewServer(t, nil)
	e := endpoint(srv, func(e *teachers.Endpoint) { e.APIKeyEnv = "CHAINEDSQL_TEST_UNSET_KEY_VAR" })
	t.Setenv("CHAINEDSQL_TEST_UNSET_KEY_VAR", "")
	_, err := teachers.New(e)
	if err == nil || !strings.Contains(err.Error(), "CHAINEDSQL_TEST_UNSET_KEY_VAR") {
		t.Fatalf("want an error naming the variable, got %v", err)
	}
	e.APIKeyEnv = "" // a local server without keys
	if _, err := teachers.New(e); err != nil {
		t.Fatal(err)
	}
}

// TestKeyNeverLeaked sets a unique key, drives every outcome (success, each fault, auth failure,
// a server that echoes the Authorization header) and scans every error, Stats, the Endpoint and
// the printed Client for it.
func TestKeyNeverLeaked(t *testing.T) {
	const key = "sk-oaitest-7f3a9c1e-UNIQUE-never-print-me"
	t.Setenv("CHAINEDSQL_TEST_LEAK_KEY", key)
	var outputs []string
	check := func(c *teachers.Client) {
		st, _ := json.Marshal(c.Stats())
		ep, _ := json.Marshal(c.Endpoint())
		outputs = append(outputs, string(st), string(ep), fmt.Sprint(c), fmt.Sprintf("%+v %#v %v", c, c, c.Endpoint()))
	}
	srv := oaitest.NewServer(t, nil, oaitest.WithAPIKey(key), oaitest.WithRetryAfter(0))
	c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
		e.APIKeyEnv = "CHAINEDSQL_TEST_LEAK_KEY"
		e.MaxRetries = 1
		e.Timeout = 100 * time.Millisecond
	}))
	for _, f := range oaitest.AllFaults {
		sub := oaitest.NewServer(t, nil, oaitest.WithAPIKey(key), oaitest.WithFaultRate(1, 3, f), oaitest.WithRetryAfter(0))
		sc := newClient(t, endpoint(sub, func(e *teachers.Endpoint) {
			e.APIKeyEnv = "CHAINEDSQL_TEST_LEAK_KEY"
			e.MaxRetries = 1
			e.Timeout = 100 * time.Millisecond
		}))
		_, err := sc.Chat(context.Background(), question, chat.Options{})
		if err != nil {
			outputs = append(outputs, err.Error(), fmt.Sprintf("%+v %#v", err, err))
		}
		check(sc)
	}
	if _, err := c.Chat(context.Background(), question, chat.Options{}); err != nil {
		t.Fatalf("with the right key: %v", err)
	}
	check(c)
	// A wrong key is refused with 401.
	t.Setenv("CHAINEDSQL_TEST_LEAK_KEY2", key+"-wrong")
	wrong := newClient(t, endpoint(srv, func(e *teachers.Endpoint) { e.APIKeyEnv = "CHAINEDSQL_TEST_LEAK_KEY2" }))
	_, err := wrong.Chat(context.Background(), question, chat.Options{})
	if teachers.Reason(err) != teachers.ReasonAuth {
		t.Errorf("wrong key: %v", err)
	}
	outputs = append(outputs, err.Error())
	// A server that echoes the Authorization header into its error body.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"bad header %s","type":"invalid_request_error"}}`, r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	ec := newClient(t, teachers.Endpoint{Name: "echo", BaseURL: echo.URL + "/v1", Model: "m", APIKeyEnv: "CHAINEDSQL_TEST_LEAK_KEY"})
	_, err = ec.Chat(context.Background(), question, chat.Options{})
	if err == nil || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("echo server: want a redacted error, got %v", err)
	}
	outputs = append(outputs, err.Error())
	check(ec)
	for _, o := range outputs {
		if strings.Contains(o, key) || strings.Contains(o, "7f3a9c1e") {
			t.Fatalf("API key leaked into output: %s", o)
		}
	}
	if len(outputs) < 3*len(oaitest.AllFaults) {
		t.Fatalf("too few outputs scanned: %d", len(outputs))
	}
}

func BenchmarkChat(b *testing.B) {
	srv := oaitest.NewServer(b, oaitest.Fixed("<think>ok</think>\n<sql>SELECT count(*) FROM singer</sql>"), oaitest.WithoutBodies())
	c := newClient(b, endpoint(srv, func(e *teachers.Endpoint) { e.MaxConcurrency = 64 }))
	msgs := []chat.Message{
		{Role: chat.RoleSystem, Content: strings.Repeat("CREATE TABLE singer (id INTEGER, name TEXT);\n", 40)},
		{Role: chat.RoleUser, Content: "Question: how many singers are there?"},
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Chat(context.Background(), msgs, chat.Options{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkRawGoOpenAI is the floor: plain go-openai against the same server, without the
// client's limits, retries, body splicing and accounting.
func BenchmarkRawGoOpenAI(b *testing.B) {
	srv := oaitest.NewServer(b, oaitest.Fixed("<think>ok</think>\n<sql>SELECT count(*) FROM singer</sql>"), oaitest.WithoutBodies())
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = srv.BaseURL()
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	oc := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{Model: "test-model", Messages: []openai.ChatCompletionMessage{
		{Role: "system", Content: strings.Repeat("CREATE TABLE singer (id INTEGER, name TEXT);\n", 40)},
		{Role: "user", Content: "Question: how many singers are there?"},
	}}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := oc.CreateChatCompletion(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func TestEmptyMessageContentIsSent(t *testing.T) {
	srv := oaitest.NewServer(t, nil)
	c := newClient(t, endpoint(srv, nil))
	msgs := append(append([]chat.Message{}, question...),
		chat.Message{Role: chat.RoleAssistant, Content: ""},
		chat.Message{Role: chat.RoleUser, Content: `<observation>no <sql> block {"role":"user"}</observation>`})
	if _, err := c.Chat(context.Background(), msgs, chat.Options{Temperature: chat.Float(0.2)}); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if len(r.Messages) != 4 || r.Messages[2].Role != "assistant" || r.Messages[3].Content != msgs[3].Content {
		t.Fatalf("server saw %+v", r.Messages)
	}
	var raw struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &raw); err != nil {
		t.Fatal(err)
	}
	if v, ok := raw.Messages[2]["content"]; !ok || v != "" {
		t.Errorf("assistant message content field = %v (present %v); body %s", v, ok, r.Body)
	}
	if _, err := c.Chat(context.Background(), []chat.Message{{Content: "x"}}, chat.Options{}); teachers.Reason(err) != teachers.ReasonClient {
		t.Errorf("message without role: %v", err)
	}
}

func TestOKWithErrorBody(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"error":{"message":"upstream provider overloaded","code":502}}`)
	}))
	defer gw.Close()
	c := newClient(t, teachers.Endpoint{Name: "gw", BaseURL: gw.URL + "/v1", Model: "m", MaxRetries: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	_, err := c.Chat(context.Background(), question, chat.Options{})
	if teachers.Reason(err) != teachers.ReasonEmptyChoices || !strings.Contains(err.Error(), "upstream provider overloaded") {
		t.Errorf("err = %v", err)
	}
}
