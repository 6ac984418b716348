package teachers_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/teachers"
)

// providerEndpoint is an endpoint of the named provider profile pointed at srv.
func providerEndpoint(srv *oaitest.Server, provider string, mut func(*teachers.Endpoint)) teachers.Endpoint {
	on := true
	return endpoint(srv, func(e *teachers.Endpoint) {
		e.Provider = provider
		e.Thinking = &on
		if mut != nil {
			mut(e)
		}
	})
}

// personalityProvider maps a personality to the provider profile that talks to it.
func personalityProvider(name string) string {
	p, ok := oaitest.Personalities[name]
	if !ok {
		return name
	}
	return p.Name
}

const thinkText = "Ünïcödé reasoning: the customers table, then COUNT(*) 🤔.\nSecond line."

func reasoningScript(r oaitest.Request) oaitest.Response {
	return oaitest.Response{Think: thinkText, Content: "<sql>SELECT count(*) FROM customer</sql>",
		Usage: &oaitest.Usage{PromptTokens: 100, CompletionTokens: 40, ReasoningTokens: 25, CachedTokens: 60}}
}

// TestStreamMatchesPlain: for every personality, a streamed and a plain request of the same
// scripted reply give the same Reply, reasoning byte for byte, field and usage included.
func TestStreamMatchesPlain(t *testing.T) {
	for name := range oaitest.Personalities {
		if name == "dashscope" {
			continue // refuses plain requests that think: TestDashScopeRule
		}
		t.Run(name, func(t *testing.T) {
			srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities[name]), oaitest.WithModels("test-model"))
			var replies [2]chat.Reply
			for i, stream := range []bool{false, true} {
				c := newClient(t, providerEndpoint(srv, personalityProvider(name), func(e *teachers.Endpoint) { e.Stream = stream }))
				rep, err := c.Chat(context.Background(), question, chat.Options{})
				if err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				rep.Latency = 0
				replies[i] = rep
			}
			if replies[0] != replies[1] {
				t.Errorf("plain  %+v\nstream %+v", replies[0], replies[1])
			}
			rep := replies[1]
			wantReasoning := thinkText
			if name == "vllm-inline" || name == "vllm-opened" {
				wantReasoning = "" // no reasoning parser: the block stays in the content
			}
			if rep.Reasoning != wantReasoning {
				t.Errorf("reasoning %q, want %q", rep.Reasoning, wantReasoning)
			}
			if name == "vllm-inline" && !strings.HasPrefix(rep.Content, "<think>"+thinkText+"</think>") {
				t.Errorf("inline content %q", rep.Content)
			}
			if name == "vllm-opened" && !strings.HasPrefix(rep.Content, thinkText+"</think>") {
				t.Errorf("opened content %q", rep.Content)
			}
			if rep.Usage.PromptTokens != 100 || rep.Usage.CompletionTokens != 40 {
				t.Errorf("usage %+v", rep.Usage)
			}
			p := oaitest.Personalities[name]
			if !p.NullUsageDetails && (rep.Usage.CachedTokens != 60 || rep.Usage.ReasoningTokens != 25) {
				t.Errorf("cached/reasoning tokens %+v", rep.Usage)
			}
			if p.TopLevelReasoningTokens && rep.Usage.ReasoningTokens != 25 {
				t.Errorf("reasoning tokens from usage.reasoning_tokens: %+v", rep.Usage)
			}
			if p.CostPerToken > 0 && rep.Usage.CostUSD != p.CostPerToken*140 {
				t.Errorf("reported cost %v", rep.Usage.CostUSD)
			}
		})
	}
}

func TestReasoningSourcePerShape(t *testing.T) {
	want := map[string]string{
		"vllm": chat.SourceReasoning, "vllm-legacy": chat.SourceReasoningContent, "vllm-transition": chat.SourceReasoningContent,
		"deepseek": chat.SourceReasoningContent, "openrouter": chat.SourceReasoning, "ollama": chat.SourceReasoning,
	}
	for name, src := range want {
		srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities[name]), oaitest.WithModels("test-model"))
		c := newClient(t, providerEndpoint(srv, personalityProvider(name), func(e *teachers.Endpoint) { e.Stream = true }))
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		if err != nil || rep.ReasoningSource != src || rep.Reasoning != thinkText {
			t.Errorf("%s: %q from %q, %v", name, rep.Reasoning, rep.ReasoningSource, err)
		}
	}
}

func TestStreamFaultsRetried(t *testing.T) {
	for _, f := range []oaitest.Fault{oaitest.StreamReset, oaitest.StreamCut, oaitest.StreamError, oaitest.StreamStall, oaitest.ProviderFault} {
		t.Run(string(f), func(t *testing.T) {
			srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["deepseek"]),
				oaitest.WithModels("test-model"), oaitest.WithSequence(f))
			c := newClient(t, providerEndpoint(srv, teachers.ProviderDeepSeek, func(e *teachers.Endpoint) {
				e.Stream = true
				e.StreamIdleTimeout = 150 * time.Millisecond
			}))
			rep, err := c.Chat(context.Background(), question, chat.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Attempts != 2 || rep.Reasoning != thinkText || rep.Content != "<sql>SELECT count(*) FROM customer</sql>" || rep.FinishReason != "stop" {
				t.Errorf("reply %+v", rep)
			}
			want := map[oaitest.Fault]string{oaitest.StreamReset: teachers.ReasonConnection, oaitest.StreamCut: teachers.ReasonIncomplete,
				oaitest.StreamError: teachers.ReasonServer, oaitest.StreamStall: teachers.ReasonStreamIdle, oaitest.ProviderFault: teachers.ReasonProviderFault}[f]
			if st := c.Stats(); st.RetriesByReason[want] != 1 || st.Succeeded != 1 || len(st.Kept) != 0 {
				t.Errorf("stats %+v, want one retry for %s", st, want)
			}
		})
	}
}

func TestStreamKeepAlivesAndIdle(t *testing.T) {
	// Keep-alive comments between 1-byte chunks: far more non-data lines than go-openai's default
	// limit of 300, and each resets the idle timer.
	p := oaitest.Personalities["openrouter"]
	p.ChunkBytes = 1
	long := strings.Repeat("thinking ", 200)
	srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Think: long, Content: "<sql>SELECT 1</sql>"}
	}, oaitest.WithPersonality(p), oaitest.WithModels("test-model"))
	c := newClient(t, providerEndpoint(srv, teachers.ProviderOpenRouter, func(e *teachers.Endpoint) { e.Stream = true }))
	rep, err := c.Chat(context.Background(), question, chat.Options{})
	if err != nil || rep.Reasoning != long || rep.Attempts != 1 {
		t.Fatalf("reasoning %d bytes, attempts %d, %v", len(rep.Reasoning), rep.Attempts, err)
	}
	// A stream that stalls every time fails as stream_idle after the retries, well before the
	// attempt timeout.
	stall := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Content: "<sql>SELECT 1</sql>", Fault: oaitest.StreamStall}
	})
	c = newClient(t, endpoint(stall, func(e *teachers.Endpoint) {
		e.Stream, e.StreamIdleTimeout, e.Timeout, e.MaxRetries = true, 100*time.Millisecond, time.Minute, 1
	}))
	start := time.Now()
	_, err = c.Chat(context.Background(), question, chat.Options{})
	if teachers.Reason(err) != teachers.ReasonStreamIdle || time.Since(start) > 5*time.Second {
		t.Fatalf("stalled stream: %v after %v", err, time.Since(start))
	}
}

func TestDashScopeRule(t *testing.T) {
	srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["dashscope"]), oaitest.WithModels("test-model"))
	// Plain with thinking: DashScope's 400, not retried.
	c := newClient(t, providerEndpoint(srv, teachers.ProviderDashScope, nil))
	_, err := c.Chat(context.Background(), question, chat.Options{})
	if teachers.Reason(err) != teachers.ReasonClient || !strings.Contains(err.Error(), oaitest.DashScopeNonStreamMessage) {
		t.Fatalf("plain: %v", err)
	}
	// Streamed with top-level enable_thinking: the reasoning arrives.
	c = newClient(t, providerEndpoint(srv, teachers.ProviderDashScope, func(e *teachers.Endpoint) { e.Stream = true }))
	rep, err := c.Chat(context.Background(), question, chat.Options{})
	if err != nil || rep.Reasoning != thinkText {
		t.Fatalf("stream: %q %v", rep.Reasoning, err)
	}
	last := srv.Requests()[len(srv.Requests())-1]
	if string(last.Field("enable_thinking")) != "true" || last.Field("chat_template_kwargs") != nil || !last.Stream || !last.IncludeUsage {
		t.Errorf("request %s", last.Body)
	}
}

func TestProviderFinishReasons(t *testing.T) {
	// Z.ai's "sensitive" is a content filter: on_content_filter fail by default.
	z := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["zai"]), oaitest.WithModels("test-model"),
		oaitest.WithSequence(oaitest.ContentFilter))
	c := newClient(t, providerEndpoint(z, teachers.ProviderZAI, nil))
	if _, err := c.Chat(context.Background(), question, chat.Options{}); teachers.Reason(err) != teachers.ReasonContentFilter {
		t.Fatalf("sensitive: %v", err)
	}
	z2 := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["zai"]), oaitest.WithModels("test-model"),
		oaitest.WithSequence(oaitest.ContentFilter))
	c = newClient(t, providerEndpoint(z2, teachers.ProviderZAI, func(e *teachers.Endpoint) { e.OnContentFilter = teachers.OnKeep }))
	rep, err := c.Chat(context.Background(), question, chat.Options{})
	if err != nil || rep.FinishReason != chat.FinishContentFilter || rep.ProviderFinishReason != "sensitive" {
		t.Fatalf("kept sensitive: %+v %v", rep, err)
	}
	// A reply whose reasoning used the budget: content null, finish length, kept as received.
	v := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Think: "so much thinking", Content: "", FinishReason: "length"}
	}, oaitest.WithPersonality(oaitest.Personalities["vllm"]), oaitest.WithModels("test-model"))
	c = newClient(t, providerEndpoint(v, teachers.ProviderVLLM, nil))
	rep, err = c.Chat(context.Background(), question, chat.Options{})
	if err != nil || rep.Content != "" || rep.Reasoning != "so much thinking" || rep.FinishReason != chat.FinishLength {
		t.Fatalf("null content cut by length: %+v %v", rep, err)
	}
	// An unknown model id: the provider's 404, not retried, naming the model.
	c = newClient(t, providerEndpoint(v, teachers.ProviderVLLM, func(e *teachers.Endpoint) { e.Model = "no-such-model" }))
	if _, err := c.Chat(context.Background(), question, chat.Options{}); teachers.Reason(err) != teachers.ReasonClient || !strings.Contains(err.Error(), "no-such-model") {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestRateLimitHeadersPace: against OpenAI's x-ratelimit-* headers the client holds requests
// back until the window resets, so the server never has to answer 429.
func TestRateLimitHeadersPace(t *testing.T) {
	p := oaitest.Personalities["openai"]
	p.RateLimit, p.RateWindow = 4, 250*time.Millisecond
	srv := oaitest.NewServer(t, nil, oaitest.WithPersonality(p), oaitest.WithModels("test-model"))
	c := newClient(t, providerEndpoint(srv, teachers.ProviderOpenAI, func(e *teachers.Endpoint) { e.MaxConcurrency = 1 }))
	start := time.Now()
	for i := 0; i < 10; i++ {
		if _, err := c.Chat(context.Background(), question, chat.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if srv.RateLimited() != 0 || st.Retries != 0 || st.Paced < 2 || time.Since(start) < 400*time.Millisecond {
		t.Errorf("429s %d, retries %d, paced %d in %v", srv.RateLimited(), st.Retries, st.Paced, time.Since(start))
	}
}

// TestStreamFaultMix: 1,000 streamed conversations through a 30% mix of stream faults (resets,
// clean cuts, error events, provider fault finishes, stalls past the idle timeout, 429s, 500s)
// in DeepSeek's shape, keep-alives included. Every reply that comes back is whole: its reasoning
// and content are exactly the scripted ones; every failure has a reason.
func TestStreamFaultMix(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	kinds := append(append([]oaitest.Fault{}, oaitest.StreamFaults...), oaitest.StreamStall)
	srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["deepseek"]), oaitest.WithModels("test-model"),
		oaitest.WithFaultRate(0.3, 7, kinds...), oaitest.WithoutBodies())
	c := newClient(t, providerEndpoint(srv, teachers.ProviderDeepSeek, func(e *teachers.Endpoint) {
		e.Stream, e.StreamIdleTimeout, e.MaxRetries, e.MaxConcurrency = true, 100*time.Millisecond, 4, 64
	}))
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("question %d", i)}}
			rep, err := c.Chat(context.Background(), msgs, chat.Options{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if teachers.Reason(err) == "" {
					t.Errorf("call %d: error without a reason: %v", i, err)
				}
				failed[teachers.Reason(err)]++
				return
			}
			if rep.Reasoning != thinkText || rep.Content != "<sql>SELECT count(*) FROM customer</sql>" || rep.FinishReason != chat.FinishStop {
				t.Errorf("call %d: a partial reply was kept: %+v", i, rep)
			}
		}()
	}
	wg.Wait()
	st := c.Stats()
	if int(st.Succeeded)+int(st.Failed) != n || st.Retries == 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d streamed calls: %d succeeded, failed %v, retries %v", n, st.Succeeded, failed, st.RetriesByReason)
}

// TestProviderWireDetails: the client against the wire details taken from the providers' own
// sources (internal/oaitest.Personalities): OpenRouter's BYOK cost, a stream ending with a
// message snapshot, each provider's refusal of an unknown model id, OpenRouter's one reasoning
// object for thinking and effort, and Ollama's refusal of an effort it does not know.
func TestProviderWireDetails(t *testing.T) {
	// OpenRouter BYOK: usage.cost is only the fee; the upstream charge is billed to the key.
	p := oaitest.Personalities["openrouter"]
	p.BYOK = true
	srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(p), oaitest.WithModels("test-model"))
	for _, stream := range []bool{false, true} {
		c := newClient(t, providerEndpoint(srv, teachers.ProviderOpenRouter, func(e *teachers.Endpoint) { e.Stream = stream }))
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		want := p.CostPerToken * 140 * (1 + oaitest.BYOKFee)
		if err != nil || math.Abs(rep.Usage.CostUSD-want) > 1e-15 || math.Abs(c.Stats().CostUSD-want) > 1e-15 {
			t.Errorf("BYOK stream=%v: cost %v, want %v (%v)", stream, rep.Usage.CostUSD, want, err)
		}
	}
	// A gateway repeating the whole reply as a message on the finish chunk: kept once.
	p = oaitest.Personalities["vllm"]
	p.SnapshotOnFinish = true
	srv = oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(p), oaitest.WithModels("test-model"))
	c := newClient(t, providerEndpoint(srv, teachers.ProviderVLLM, func(e *teachers.Endpoint) { e.Stream = true }))
	if rep, err := c.Chat(context.Background(), question, chat.Options{}); err != nil || rep.Content != "<sql>SELECT count(*) FROM customer</sql>" || rep.Reasoning != thinkText {
		t.Errorf("snapshot on finish: %q / %q %v", rep.Content, rep.Reasoning, err)
	}
	// An unknown model id, in each provider's status and shape: a client error, not retried.
	for _, name := range []string{"vllm", "deepseek", "zai", "ollama", "openai"} {
		srv := oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities[name]), oaitest.WithModels("test-model"))
		c := newClient(t, providerEndpoint(srv, personalityProvider(name), func(e *teachers.Endpoint) { e.Model = "no-such-model" }))
		_, err := c.Chat(context.Background(), question, chat.Options{})
		var te *teachers.Error
		if !errors.As(err, &te) || te.Reason != teachers.ReasonClient || te.Attempts != 1 || te.Message == "" {
			t.Errorf("%s unknown model: %v", name, err)
		}
	}
	// OpenRouter: thinking and an effort go into one reasoning object; neither is lost.
	srv = oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["openrouter"]), oaitest.WithModels("test-model"))
	for _, on := range []bool{true, false} {
		c := newClient(t, providerEndpoint(srv, teachers.ProviderOpenRouter, func(e *teachers.Endpoint) { e.Thinking, e.ReasoningEffort = &on, "high" }))
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		reqs := srv.Requests()
		want := fmt.Sprintf(`{"effort":"high","enabled":%v}`, on)
		if got := string(reqs[len(reqs)-1].Field("reasoning")); err != nil || got != want || (rep.Reasoning != "") == !on {
			t.Errorf("thinking %v: reasoning %s, want %s; reply reasoning %q (%v)", on, got, want, rep.Reasoning, err)
		}
	}
	// Fireworks turns thinking off with reasoning_effort "none": an effort as well contradicts it.
	off := false
	_, err := teachers.New(providerEndpoint(srv, teachers.ProviderFireworks, func(e *teachers.Endpoint) { e.Thinking, e.ReasoningEffort = &off, "high" }))
	if err == nil || !strings.Contains(err.Error(), "reasoning_effort") || !strings.Contains(err.Error(), "drop one") {
		t.Errorf("fireworks thinking off with an effort: %v", err)
	}
	// Ollama refuses an effort it does not know, at once and with its message.
	srv = oaitest.NewServer(t, reasoningScript, oaitest.WithPersonality(oaitest.Personalities["ollama"]), oaitest.WithModels("test-model"))
	c = newClient(t, providerEndpoint(srv, teachers.ProviderOllama, func(e *teachers.Endpoint) { e.ReasoningEffort = "max" }))
	if _, err := c.Chat(context.Background(), question, chat.Options{}); teachers.Reason(err) != teachers.ReasonClient || !strings.Contains(err.Error(), "invalid reasoning value") {
		t.Errorf("ollama effort max: %v", err)
	}
}

// TestStreamsLeaveNoGoroutines: streamed calls that finish, stall past the idle timeout, are
// cut, reset, or cancelled by the caller mid-stream leave no goroutine behind once the client
// and the server are closed (idle timers stopped, bodies closed).
func TestStreamsLeaveNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		p := oaitest.Personalities["deepseek"]
		p.ChunkBytes, p.ChunkDelay = 4, time.Millisecond
		srv := oaitest.Start(reasoningScript, oaitest.WithPersonality(p), oaitest.WithModels("test-model"),
			oaitest.WithFaultRate(0.5, 3, oaitest.StreamStall, oaitest.StreamCut, oaitest.StreamReset, oaitest.StreamError), oaitest.WithoutBodies())
		defer srv.Close()
		c, err := teachers.New(providerEndpoint(srv, teachers.ProviderDeepSeek, func(e *teachers.Endpoint) {
			e.Stream, e.StreamIdleTimeout, e.MaxRetries, e.BackoffBase, e.BackoffMax = true, 50*time.Millisecond, 2, time.Millisecond, 2*time.Millisecond
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if i%3 == 0 {
					time.AfterFunc(time.Duration(i%7+1)*3*time.Millisecond, cancel) // mid-stream
				}
				msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("question %d", i)}}
				rep, err := c.Chat(ctx, msgs, chat.Options{})
				if err == nil && (rep.Reasoning != thinkText || rep.Content != "<sql>SELECT count(*) FROM customer</sql>") {
					t.Errorf("call %d: partial reply %+v", i, rep)
				}
			}()
		}
		wg.Wait()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestOpenAIMaxCompletionTokens: on OpenAI the completion budget goes as max_completion_tokens,
// which its reasoning models require (they refuse max_tokens); other providers keep max_tokens.
func TestOpenAIMaxCompletionTokens(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithPersonality(oaitest.Personalities["openai"]), oaitest.WithModels("test-model"))
	c := newClient(t, providerEndpoint(srv, teachers.ProviderOpenAI, func(e *teachers.Endpoint) { e.MaxTokens = 512 }))
	for _, o := range []chat.Options{{}, {MaxTokens: 64}} {
		if _, err := c.Chat(context.Background(), question, o); err != nil {
			t.Fatalf("options %+v: %v", o, err)
		}
	}
	reqs := srv.Requests()
	if string(reqs[0].Field("max_completion_tokens")) != "512" || string(reqs[1].Field("max_completion_tokens")) != "64" || reqs[1].Field("max_tokens") != nil {
		t.Errorf("bodies %s / %s", reqs[0].Body, reqs[1].Body)
	}
	v := oaitest.NewServer(t, nil, oaitest.WithModels("test-model"))
	c = newClient(t, providerEndpoint(v, teachers.ProviderVLLM, func(e *teachers.Endpoint) { e.MaxTokens = 512 }))
	if _, err := c.Chat(context.Background(), question, chat.Options{}); err != nil || string(v.Requests()[0].Field("max_tokens")) != "512" {
		t.Errorf("vllm: %v %s", err, v.Requests()[0].Body)
	}
}

// TestLongRepliesPerPersonality: a real provider's reply whose reasoning and content are both
// long (a gpt-oss or DeepSeek reply's reasoning near the 1 MiB bound, or past it, with its
// content), in every provider's wire shape, plain and streamed, comes back cut as the Stepper
// stores it, never refused as too_long: each field a provider sends (vLLM's reasoning and
// reasoning_content both, OpenRouter's reasoning and reasoning_details) is one string that keeps
// its own first MiB, so a real reply's texts hold no more than the bound each, whatever their
// length (scan.go; the bound on what a completion holds past that, TestReplyRepeatedListsBound,
// takes a reply with several strings over 1 MiB under one text).
func TestLongRepliesPerPersonality(t *testing.T) {
	long := func(n int, seed string) string {
		var b strings.Builder
		for b.Len() < n {
			fmt.Fprintf(&b, "%s é€🤔 %d\n", seed, b.Len())
		}
		return b.String()
	}
	for _, size := range []int{textcap.Reply - 64, 2 << 20} {
		think, content := long(size, "reasoning"), long(size, "<sql>SELECT 1</sql>")
		script := func(oaitest.Request) oaitest.Response {
			return oaitest.Response{Think: think, Content: content, FinishReason: "length"}
		}
		for _, name := range slices.Sorted(maps.Keys(oaitest.Personalities)) {
			for _, stream := range []bool{false, true} {
				if name == "dashscope" && !stream {
					continue // refuses plain requests that think: TestDashScopeRule
				}
				p := oaitest.Personalities[name]
				p.ChunkBytes = 64 << 10
				srv := oaitest.NewServer(t, script, oaitest.WithPersonality(p), oaitest.WithModels("test-model"))
				c := newClient(t, providerEndpoint(srv, personalityProvider(name), func(e *teachers.Endpoint) {
					e.Stream, e.Timeout, e.OnLength = stream, time.Minute, "keep"
				}))
				rep, err := c.Chat(context.Background(), question, chat.Options{})
				wantContent, wantReasoning := textcap.Cut(content, textcap.Reply), textcap.Cut(think, textcap.Reply)
				switch p.ReasoningField {
				case oaitest.FieldInline, oaitest.FieldOpened:
					wantContent, wantReasoning = rep.Content, "" // the whole block is the content: checked below
					if !strings.Contains(rep.Content, think[:1000]) || len(rep.Content) > textcap.Reply+64 {
						t.Errorf("%s (stream %v): content %d bytes", name, stream, len(rep.Content))
					}
				}
				if err != nil || rep.Content != wantContent || rep.Reasoning != wantReasoning {
					t.Errorf("%s, %d bytes (stream %v): %v; content %d bytes, want %d; reasoning %d bytes, want %d", name, size, stream, err,
						len(rep.Content), len(wantContent), len(rep.Reasoning), len(wantReasoning))
				}
				srv.Close()
			}
		}
	}
}

// TestStreamManyReasoningDetails: OpenRouter streams a reasoning_details entry in every
// reasoning chunk, a token or two each, so a long gpt-oss or DeepSeek reasoning is tens of
// thousands of entries. Each chunk's entries count toward that chunk's maxUnit alone (scan.go's
// listShape: twice a decoded Detail, 144 bytes, beside the JSON; one completion holds about
// 16,800 small entries), so such a stream comes back whole, as a plain reply of the same
// reasoning (one entry) does. 32,768 chunks of 8 bytes, twice what one completion holds.
func TestStreamManyReasoningDetails(t *testing.T) {
	const chunks = 32 << 10
	think := strings.Repeat("abc def\n", chunks) // the personality's 8-byte deltas
	script := func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Think: think, Content: "<sql>SELECT 1</sql>"}
	}
	srv := oaitest.NewServer(t, script, oaitest.WithPersonality(oaitest.Personalities["openrouter"]), oaitest.WithModels("test-model"))
	for _, stream := range []bool{true, false} {
		c := newClient(t, providerEndpoint(srv, "openrouter", func(e *teachers.Endpoint) {
			e.Stream, e.Timeout = stream, time.Minute
		}))
		rep, err := c.Chat(context.Background(), question, chat.Options{})
		if err != nil || rep.Reasoning != think || rep.Content != "<sql>SELECT 1</sql>" {
			t.Errorf("stream %v: %v; reasoning %d bytes, want %d", stream, err, len(rep.Reasoning), len(think))
		}
	}
}
