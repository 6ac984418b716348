package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestServeGuard drives the built `student serve --api-key` on the tiny model: the OpenAI client
// with the key gets a completion; without it 401, a text/plain body 415, a foreign Host 403, a
// body that stalls 408 after --body-timeout; SIGINT still stops it cleanly.
func TestServeGuard(t *testing.T) {
	bin := testbin.Build(t, ".")
	cmd, base, sc := startServe(t, bin, "--max-tokens", "4", "--api-key", "sk-one,sk-two", "--body-timeout", "500ms", "--quiet")
	go func() {
		for sc.Scan() {
		}
	}()
	ctx := context.Background()
	client := func(key string) *openai.Client {
		cfg := openai.DefaultConfig(key)
		cfg.BaseURL = base + "/v1"
		return openai.NewClientWithConfig(cfg)
	}
	req := openai.ChatCompletionRequest{Model: "tiny", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Hello"}}}
	if resp, err := client("sk-two").CreateChatCompletion(ctx, req); err != nil || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("with the key: %+v %v", resp, err)
	}
	_, err := client("").CreateChatCompletion(ctx, req)
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 {
		t.Errorf("without the key: %v", err)
	}
	body := `{"messages":[{"role":"user","content":"Hello"}]}`
	for _, c := range []struct {
		name, host, ct string
		status         int
	}{
		{"text/plain", "", "text/plain", 415},
		{"a foreign Host", "attacker.example", "application/json", 403},
	} {
		r, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-one")
		r.Header.Set("Content-Type", c.ct)
		if c.host != "" {
			r.Host = c.host
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}
	u, _ := url.Parse(base)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-one\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", u.Host, len(body))
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	conn.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled body: %d", resp.StatusCode)
	}
	testbin.Interrupt(t, cmd, time.Minute)
}
