package oaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/oai"
)

// post sends body with a 300 ms client timeout (the Hang fault's check relies on it).
func post(t *testing.T, srv *Server, key string, body string) (*http.Response, []byte, error) {
	t.Helper()
	return postWithin(t, srv, key, body, 300*time.Millisecond)
}

func postWithin(t *testing.T, srv *Server, key string, body string, timeout time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.BaseURL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

func body(q string, turns ...string) string {
	msgs := []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: q}}
	for _, a := range turns {
		msgs = append(msgs, Message{Role: "assistant", Content: a}, Message{Role: "user", Content: "<observation>ok</observation>"})
	}
	b, _ := json.Marshal(map[string]any{"model": "test-model", "messages": msgs, "temperature": 0.5})
	return string(b)
}

func TestWireFormatAndRecording(t *testing.T) {
	srv := NewServer(t, Turns(
		Response{Content: "<sql>SELECT 2</sql>", ReasoningContent: "first"},
		Response{Content: "<sql>SELECT 1</sql>", Reasoning: "second"},
	))
	resp, b, err := post(t, srv, "", body("q1"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %v err %v", resp, err)
	}
	var out oai.Completion
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	m := out.Choices[0].Message
	if out.Object != "chat.completion" || m.Role != "assistant" || deref(m.Content) != "<sql>SELECT 2</sql>" || deref(m.ReasoningContent) != "first" ||
		deref(out.Choices[0].FinishReason) != "stop" || out.Usage.TotalTokens != out.Usage.PromptTokens+out.Usage.CompletionTokens ||
		out.Usage.CompletionTokensDetails.ReasoningTokens != EstimateTokens("first") {
		t.Errorf("reply = %s", b)
	}
	_, b, _ = post(t, srv, "", body("q1", "<sql>SELECT 2</sql>"))
	if !bytes.Contains(b, []byte(`"reasoning":"second"`)) || !bytes.Contains(b, []byte(`SELECT 1`)) {
		t.Errorf("second turn = %s", b)
	}
	post(t, srv, "", body("q1")) // a repeat of the first request
	reqs := srv.Requests()
	if len(reqs) != 3 || srv.Count() != 3 {
		t.Fatalf("recorded %d", len(reqs))
	}
	if reqs[0].Seq != 0 || reqs[1].Seq != 1 || reqs[0].Turn() != 0 || reqs[1].Turn() != 1 || reqs[1].FirstUser() != "q1" ||
		reqs[1].Last().Content != "<observation>ok</observation>" {
		t.Errorf("requests = %+v", reqs)
	}
	if reqs[0].Attempt != 0 || reqs[1].Attempt != 0 || reqs[2].Attempt != 1 || reqs[2].Hash != reqs[0].Hash || reqs[1].Hash == reqs[0].Hash {
		t.Errorf("attempts/hashes: %+v", reqs)
	}
	if string(reqs[0].Field("temperature")) != "0.5" || reqs[0].Field("absent") != nil {
		t.Errorf("Field: %s", reqs[0].Field("temperature"))
	}
}

func TestModelsAndAuth(t *testing.T) {
	srv := NewServer(t, nil, WithAPIKey("k1"), WithModels("a", "b"))
	if resp, _, _ := post(t, srv, "", body("q")); resp.StatusCode != 401 {
		t.Errorf("no key: %d", resp.StatusCode)
	}
	if resp, _, _ := post(t, srv, "k2", body("q")); resp.StatusCode != 401 {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	resp, b, _ := post(t, srv, "k1", body("q"))
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("SELECT 1")) {
		t.Errorf("right key: %d %s", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.BaseURL()+"/models", nil)
	req.Header.Set("Authorization", "Bearer k1")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	json.NewDecoder(r.Body).Decode(&list)
	if len(list.Data) != 2 || list.Data[0].ID != "a" || list.Data[1].ID != "b" {
		t.Errorf("models = %+v", list)
	}
	if resp, _, _ := post(t, srv, "k1", `{"model":"m","messages":[]}`); resp.StatusCode != 400 {
		t.Errorf("empty messages: %d", resp.StatusCode)
	}
	if resp, _, _ := post(t, srv, "k1", `{"model":`); resp.StatusCode != 400 {
		t.Errorf("bad JSON: %d", resp.StatusCode)
	}
	if resp, b, _ := post(t, srv, "k1", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 200 ||
		resp.Header.Get("Content-Type") != "text/event-stream" || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		t.Errorf("stream: %d %q", resp.StatusCode, b)
	}
}

// TestFaultWire checks what each fault looks like on the wire.
func TestFaultWire(t *testing.T) {
	type check func(resp *http.Response, b []byte, err error) string
	status := func(code int, header string) check {
		return func(resp *http.Response, b []byte, err error) string {
			if err != nil || resp.StatusCode != code {
				return fmt.Sprintf("want %d, got %v %v", code, resp, err)
			}
			if header != "" && resp.Header.Get("Retry-After") == "" {
				return "no Retry-After"
			}
			if header == "" && resp.Header.Get("Retry-After") != "" {
				return "unexpected Retry-After"
			}
			return ""
		}
	}
	transport := func(resp *http.Response, b []byte, err error) string {
		if err == nil {
			return fmt.Sprintf("want a transport error, got %v %q", resp.Status, b)
		}
		return ""
	}
	badJSON := func(resp *http.Response, b []byte, err error) string {
		if err != nil || resp.StatusCode != 200 || json.Valid(b) {
			return fmt.Sprintf("want 200 with invalid JSON, got %v %q %v", resp, b, err)
		}
		return ""
	}
	reply := func(finish string, wantChoices int, content func(string) bool) check {
		return func(resp *http.Response, b []byte, err error) string {
			var out oai.Completion
			if err != nil || json.Unmarshal(b, &out) != nil || len(out.Choices) != wantChoices {
				return fmt.Sprintf("want %d choices, got %q %v", wantChoices, b, err)
			}
			if wantChoices > 0 && (deref(out.Choices[0].FinishReason) != finish || !content(deref(out.Choices[0].Message.Content))) {
				return fmt.Sprintf("got %q", b)
			}
			return ""
		}
	}
	cases := map[Fault]check{
		RateLimit:               status(429, ""),
		RateLimitRetryAfter:     status(429, "yes"),
		RateLimitRetryAfterDate: status(429, "yes"),
		ServerError:             status(500, ""),
		BadGateway:              status(502, ""),
		Unavailable:             status(503, ""),
		BadRequest:              status(400, ""),
		Unauthorized:            status(401, ""),
		Reset:                   transport,
		ResetMidBody:            transport,
		Hang:                    transport, // the client's 300ms timeout
		Malformed:               badJSON,
		Truncated:               badJSON,
		EmptyChoices:            reply("", 0, nil),
		Length:                  reply("length", 1, func(c string) bool { return c == DefaultReply[:len(DefaultReply)/2] }),
		ContentFilter:           reply("content_filter", 1, func(c string) bool { return c == "" }),
		EmptyContent:            reply("stop", 1, func(c string) bool { return c == "" }),
		Slow:                    reply("stop", 1, func(c string) bool { return c == DefaultReply }),
		ProviderFault:           reply("error", 1, func(c string) bool { return c == DefaultReply[:len(DefaultReply)/2] }),
		// On a plain request the stream faults become their plain counterparts.
		StreamReset: transport,
		StreamStall: transport,
		StreamCut:   badJSON,
		StreamError: status(500, ""),
	}
	if len(cases) != len(EveryFault) {
		t.Fatalf("cases cover %d of %d faults", len(cases), len(EveryFault))
	}
	for f, ck := range cases {
		srv := NewServer(t, nil, WithSequence(f))
		resp, b, err := post(t, srv, "", body("q"))
		if msg := ck(resp, b, err); msg != "" {
			t.Errorf("%s: %s", f, msg)
		}
		if got := srv.FaultCounts()[f]; got != 1 || srv.Requests()[0].Fault != f {
			t.Errorf("%s: counted %d", f, got)
		}
		// The next request is normal.
		if resp, _, err := post(t, srv, "", body("q2")); err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: the request after the sequence failed: %v %v", f, resp, err)
		}
	}
}

func TestScriptedFaultAndRateDeterminism(t *testing.T) {
	draw := func() []Fault {
		srv := NewServer(t, nil, WithFaultRate(0.5, 99, ServerError, RateLimit), WithoutBodies())
		var out []Fault
		for i := range 200 {
			post(t, srv, "", body(fmt.Sprintf("q%d", i%50)))
		}
		for _, r := range srv.Requests() {
			if r.Body != nil || r.Messages != nil {
				t.Fatal("WithoutBodies kept a body")
			}
			out = append(out, r.Fault)
		}
		return out
	}
	a, b := draw(), draw()
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs: %s vs %s", i, a[i], b[i])
		}
		if a[i] != None {
			n++
		}
	}
	if n < 60 || n > 140 {
		t.Errorf("%d of 200 faulted at rate 0.5", n)
	}
	srv := NewServer(t, func(r Request) Response {
		if r.Attempt == 0 {
			return Response{Fault: Unavailable}
		}
		return Response{Content: "ok"}
	})
	if resp, _, _ := post(t, srv, "", body("x")); resp.StatusCode != 503 {
		t.Errorf("scripted fault: %d", resp.StatusCode)
	}
	if resp, _, _ := post(t, srv, "", body("x")); resp.StatusCode != 200 {
		t.Errorf("second attempt: %d", resp.StatusCode)
	}
}

func TestConcurrentRequests(t *testing.T) {
	srv := NewServer(t, func(r Request) Response { return Response{Content: r.FirstUser(), Delay: 5 * time.Millisecond} },
		WithFaultRate(0.2, 5))
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			postWithin(t, srv, "", body(fmt.Sprintf("q%d", i)), 30*time.Second) // 64 at once under -race on a loaded machine
		}()
	}
	wg.Wait()
	if srv.Count() != 64 || len(srv.Requests()) != 64 {
		t.Fatalf("count %d", srv.Count())
	}
	total := 0
	for _, n := range srv.FaultCounts() {
		total += n
	}
	if total != 64 || srv.MaxInFlight() < 2 {
		t.Errorf("fault counts sum %d, max in flight %d", total, srv.MaxInFlight())
	}
	seen := map[int]bool{}
	for _, r := range srv.Requests() {
		if seen[r.Seq] {
			t.Fatalf("duplicate seq %d", r.Seq)
		}
		seen[r.Seq] = true
	}
}

func TestCloseReleasesHangs(t *testing.T) {
	srv := NewServer(t, nil, WithFaultRate(1, 1, Hang))
	done := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.BaseURL()+"/chat/completions", strings.NewReader(body("q")))
		resp, err := http.DefaultClient.Do(req) // no timeout: only Close can end it
		if err == nil {
			resp.Body.Close()
		}
		close(done)
	}()
	for srv.Count() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	srv.Close()
	<-done
	if time.Since(start) > 2*time.Second {
		t.Errorf("Close took %v", time.Since(start))
	}
	srv.Close() // twice is fine
}
