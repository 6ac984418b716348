package teachers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
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
			if name == "vllm-inline" {
				wantReasoning = "" // no reasoning parser: the block stays in the content
			}
			if rep.Reasoning != wantReasoning {
				t.Errorf("reasoning %q, want %q", rep.Reasoning, wantReasoning)
			}
			if name == "vllm-inline" && !strings.HasPrefix(rep.Content, "<think>"+thinkText+"</think>") {
				t.Errorf("inline content %q", rep.Content)
			}
			if rep.Usage.PromptTokens != 100 || rep.Usage.CompletionTokens != 40 {
				t.Errorf("usage %+v", rep.Usage)
			}
			p := oaitest.Personalities[name]
			if !p.NullUsageDetails && (rep.Usage.CachedTokens != 60 || rep.Usage.ReasoningTokens != 25) {
				t.Errorf("cached/reasoning tokens %+v", rep.Usage)
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
