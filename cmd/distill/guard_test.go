package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// envProbe sends one request to a running env server and returns the status, the error
// message and the Retry-After header.
func envProbe(t *testing.T, base, method, path, host, key, contentType, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Status  int    `json:"status"`
			Message string `json:"message"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &e)
	if resp.StatusCode != 200 && e.Error.Status != resp.StatusCode {
		t.Errorf("%s %s: %d answered %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode, e.Error.Message, resp.Header.Get("Retry-After")
}

// TestEnvServeGuard drives the built `distill env serve` as a web page and a second trainer
// would: a foreign Host (DNS rebinding) is 403, a text/plain score request 415, a request
// without the key 401, a body that stalls 408 after --body-timeout; a client at
// --max-episodes-per-client gets 429 with Retry-After while another key still starts episodes;
// --allow-host answers the name given; the Python client of docs/ENV.md works with
// $CHAINEDSQL_API_KEY.
func TestEnvServeGuard(t *testing.T) {
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	task := tasks[3]
	bin := testbin.Build(t, ".")
	t.Setenv("CHAINEDSQL_API_KEY", "trainer-a, trainer-b") // the server's keys, and the client's (the first)
	srv := startEnv(t, bin, "--tasks", "sample", "--db-root", root, "--max-episodes", "4", "--max-episodes-per-client", "2",
		"--body-timeout", "500ms", "--allow-host", "env.internal")
	u, _ := url.Parse(srv.url)
	score := `{"task_id": "` + task.ID + `", "completions": ["<sql>SELECT 1</sql>"]}`
	create := `{"task_id": "` + task.ID + `"}`
	jsonCT := "application/json"
	for _, c := range []struct {
		name, method, path, host, key, ct, body string
		status                                  int
		says                                    string
	}{
		{"a foreign Host", "POST", "/v1/score", "rebind.attacker.example:" + u.Port(), "trainer-a", jsonCT, score, 403, "--allow-host"},
		{"text/plain", "POST", "/v1/score", "", "trainer-a", "text/plain", score, 415, "application/json"},
		{"no key", "POST", "/v1/score", "", "", jsonCT, score, 401, "CHAINEDSQL_API_KEY"},
		{"no key, a GET", "GET", "/v1/tasks", "", "", "", "", 401, "Bearer"},
		{"a wrong key", "GET", "/v1/tasks", "", "trainer-c", "", "", 401, "not one of its keys"},
		{"the key", "POST", "/v1/score", "", "trainer-b", jsonCT, score, 200, ""},
		{"an allowed name", "GET", "/v1/tasks?limit=1", "env.internal", "trainer-a", "", "", 200, ""},
	} {
		if code, msg, _ := envProbe(t, srv.url, c.method, c.path, c.host, c.key, c.ct, c.body); code != c.status || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, msg, c.status, c.says)
		}
	}

	// A body that stalls: 408 once --body-timeout passes.
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/score HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer trainer-a\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, len(score), score[:10])
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	began := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	conn.Close()
	if took := time.Since(began); resp.StatusCode != http.StatusRequestTimeout || took > 10*time.Second {
		t.Errorf("a stalled body: %d after %v", resp.StatusCode, took)
	}

	// Per-client episodes: trainer-a at its cap of 2 gets 429; trainer-b is not locked out.
	for i := range 2 {
		if code, msg, _ := envProbe(t, srv.url, "POST", "/v1/episodes", "", "trainer-a", jsonCT, create); code != 200 {
			t.Fatalf("trainer-a's episode %d: %d %s", i, code, msg)
		}
	}
	code, msg, retry := envProbe(t, srv.url, "POST", "/v1/episodes", "", "trainer-a", jsonCT, create)
	if n, err := strconv.Atoi(retry); code != 429 || !strings.Contains(msg, "--max-episodes-per-client") || err != nil || n < 1 || n > 600 {
		t.Errorf("trainer-a over its cap: %d %q, Retry-After %q", code, msg, retry)
	}
	if code, msg, _ := envProbe(t, srv.url, "POST", "/v1/episodes", "", "trainer-b", jsonCT, create); code != 200 {
		t.Errorf("trainer-b locked out: %d %s", code, msg)
	}

	// The Python client sends the first key of $CHAINEDSQL_API_KEY, which the server (restarted
	// with the default caps) takes as its keys.
	srv.stop(t)
	srv = startEnv(t, bin, "--tasks", "sample", "--db-root", root)
	runClient(t, python3(t), srv.url, task, datasets.SQLite)
	srv.stop(t)
}
