package serve_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/httpguard"
)

// guardedServer serves the toy student behind a guard requiring key, as `student serve
// --api-key` does, on a real loopback listener.
func guardedServer(t *testing.T, key string) *httptest.Server {
	t.Helper()
	st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	g, err := httpguard.New(ts.Listener.Addr(), httpguard.Options{Name: "student serve", APIKeys: []string{key}, MaxBody: serve.MaxBodyBytes})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = g.Server(serve.Handler(st, nil, serve.Config{}), nil)
	ts.Start()
	t.Cleanup(func() { ts.Close(); st.Close() })
	return ts
}

// TestGuardedOpenAIClient: the OpenAI client with the key gets completions, plain and
// streamed, from the guarded handler; without it, or with another, it gets 401 in OpenAI's
// error shape; a text/plain body is 415 and a foreign Host 403.
func TestGuardedOpenAIClient(t *testing.T) {
	ts := guardedServer(t, "sk-local-test")
	ctx := context.Background()
	req := openai.ChatCompletionRequest{Model: "toy-student", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "How many?"}}}
	client := func(key string) *openai.Client {
		cfg := openai.DefaultConfig(key)
		cfg.BaseURL = ts.URL + "/v1"
		return openai.NewClientWithConfig(cfg)
	}
	resp, err := client("sk-local-test").CreateChatCompletion(ctx, req)
	if err != nil || resp.Choices[0].Message.Content != reply {
		t.Fatalf("with the key: %+v %v", resp, err)
	}
	stream, err := client("sk-local-test").CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: req.Model, Messages: req.Messages, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for {
		r, err := stream.Recv()
		if err != nil {
			break
		}
		for _, c := range r.Choices {
			got.WriteString(c.Delta.Content)
		}
	}
	stream.Close()
	if got.String() != reply {
		t.Errorf("streamed with the key: %q", got.String())
	}
	for _, key := range []string{"", "sk-other"} {
		_, err := client(key).CreateChatCompletion(ctx, req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 || apiErr.Type != "authentication_error" || !strings.Contains(apiErr.Message, "--api-key") {
			t.Errorf("key %q: %v", key, err)
		}
	}
	body := `{"messages":[{"role":"user","content":"x"}]}`
	for _, c := range []struct {
		name, host, ct string
		status         int
	}{
		{"text/plain", "", "text/plain", 415},
		{"a foreign Host", "attacker.example", "application/json", 403},
		{"both right", "", "application/json", 200},
	} {
		r, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-local-test")
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
}

// TestGuardedOfficialNodeClient runs the official OpenAI Node client (scripts/
// check_oaitest_openai.mjs, plain and streamed) against the guarded handler with the key in
// $CHAINEDSQL_API_KEY, and without it (401). It skips unless node is on PATH and
// CHAINEDSQL_NODE_MODULES names a node_modules folder holding the npm package openai.
func TestGuardedOfficialNodeClient(t *testing.T) {
	mods := os.Getenv("CHAINEDSQL_NODE_MODULES")
	node, err := exec.LookPath("node")
	if mods == "" || err != nil {
		t.Skip("set CHAINEDSQL_NODE_MODULES to a node_modules folder with the npm package openai (and have node on PATH)")
	}
	script, _ := filepath.Abs(filepath.Join("..", "..", "scripts", "check_oaitest_openai.mjs"))
	ts := guardedServer(t, "sk-local-test")
	for _, key := range []string{"sk-local-test", "sk-other"} {
		cmd := exec.Command(node, script, ts.URL+"/v1", "toy-student")
		cmd.Env = append(os.Environ(), "NODE_PATH="+mods, "CHAINEDSQL_API_KEY="+key)
		out, err := cmd.CombinedOutput()
		switch {
		case key == "sk-local-test" && (err != nil || strings.Count(string(out), `"content":"`+strings.ReplaceAll(reply, "\n", `\n`)+`"`) != 2):
			t.Errorf("with the key: %v\n%s", err, out)
		case key != "sk-local-test" && (err == nil || !strings.Contains(string(out), "401")):
			t.Errorf("with another key: %v\n%s", err, out)
		}
	}
}
