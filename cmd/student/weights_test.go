package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/inference/student/studenttest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestServeReloadsWeights drives the built `student serve --api-key --weights-root` on the tiny
// model: a greedy reply (--temperature 0: go-openai leaves a temperature of 0 out of the
// request), POST /v1/weights of a changed checkpoint under the root (401 without the key, 422
// for a missing directory in the root, 403 for one outside it), then another reply for the same
// prompt from the new weights, with the version in system_fingerprint and GET /v1/weights;
// SIGINT still stops it cleanly.
func TestServeReloadsWeights(t *testing.T) {
	bin := testbin.Build(t, ".")
	other := studenttest.Perturbed(t, shared.Path(t, "models/tiny-qwen2-f32"), "model.norm.weight", nil)
	root := filepath.Dir(other)
	cmd, base, sc := startServe(t, bin, "--max-tokens", "8", "--api-key", "sk-train", "--temperature", "0", "--weights-root", root)
	logged := collect(sc)
	cfg := openai.DefaultConfig("sk-train")
	cfg.BaseURL = base + "/v1"
	oc := openai.NewClientWithConfig(cfg)
	ask := func() openai.ChatCompletionResponse {
		t.Helper()
		resp, err := oc.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "tiny", Temperature: 0,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "How many concerts?"}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	weights := func(method, key, body string) (int, map[string]any) {
		t.Helper()
		r, _ := http.NewRequest(method, base+"/v1/weights", strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	first := ask()
	if first.SystemFingerprint != "weights-v1" {
		t.Fatalf("fingerprint %q", first.SystemFingerprint)
	}
	body, _ := json.Marshal(map[string]string{"path": other})
	if code, out := weights("POST", "", string(body)); code != 401 {
		t.Fatalf("reload without the key: %d %v", code, out)
	}
	missing, _ := json.Marshal(map[string]string{"path": filepath.Join(root, "missing")})
	if code, out := weights("POST", "sk-train", string(missing)); code != 422 {
		t.Fatalf("reload of a missing directory: %d %v", code, out)
	}
	if code, out := weights("POST", "sk-train", `{"path":"/nonexistent/checkpoint"}`); code != 403 {
		t.Fatalf("reload of a directory outside --weights-root: %d %v", code, out)
	}
	if code, out := weights("POST", "sk-train", string(body)); code != 200 || out["version"] != 2.0 || out["path"] != other {
		t.Fatalf("reload: %d %v", code, out)
	}
	second := ask()
	if second.SystemFingerprint != "weights-v2" || second.Choices[0].Message.Content == first.Choices[0].Message.Content {
		t.Fatalf("after the reload: %q (%s); before %q", second.Choices[0].Message.Content, second.SystemFingerprint, first.Choices[0].Message.Content)
	}
	if code, out := weights("GET", "sk-train", ""); code != 200 || out["version"] != 2.0 || out["draining"] != 0.0 {
		t.Fatalf("GET /v1/weights: %d %v", code, out)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select { // the log is read to its end (the process exited) before Wait
	case log := <-logged:
		if !strings.Contains(log, "weights: version 2 from "+other) {
			t.Errorf("no reload in the log:\n%s", log)
		}
	case <-time.After(time.Minute):
		t.Fatal("no exit a minute after SIGINT")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGINT: %v", err)
	}
}

// TestServeWeightsRootDefault: `student serve` without --weights-root reloads weights only from
// the directory holding --model's (links resolved), which it says at start: the model's own
// directory loads, a checkpoint elsewhere is 403 naming the root and the flag, and one named
// through ".." out of it too.
func TestServeWeightsRootDefault(t *testing.T) {
	bin := testbin.Build(t, ".")
	model := shared.Path(t, "models/tiny-qwen2-f32")
	resolved, err := filepath.EvalSymlinks(model)
	if err != nil {
		t.Fatal(err)
	}
	resolved, _ = filepath.Abs(resolved)
	root := filepath.Dir(resolved)
	other := studenttest.Perturbed(t, model, "model.norm.weight", nil)
	_, base, _, before := startLogged(t, bin, append(append([]string{"serve"}, tinyArgs(t)...), "--addr", "127.0.0.1:0")...)
	if want := "POST /v1/weights loads weights only from under " + root + " (--weights-root, by default the directory holding --model's)"; !strings.Contains(strings.Join(before, "\n"), want) {
		t.Errorf("start-up log lacks %q:\n%s", want, strings.Join(before, "\n"))
	}
	for _, c := range []struct {
		path string
		code int
	}{{other, 403}, {root + "/../elsewhere", 403}, {model, 200}} {
		code, out := postJSON(t, base+"/v1/weights", "", map[string]string{"path": c.path})
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != c.code || (code == 403 && !strings.Contains(msg, "outside the weights root "+root+": this server loads weights only from there (its --weights-root)")) {
			t.Errorf("reload of %s: %d %v, want %d", c.path, code, out, c.code)
		}
	}
}

// startServe starts the built student binary bin as `serve` on the tiny model, model id tiny, on
// a free loopback port with the extra flags args; it returns the process (killed at the end of
// the test), its base URL (without /v1) and its stderr past the listening line.
func startServe(t *testing.T, bin string, args ...string) (*exec.Cmd, string, *bufio.Scanner) {
	t.Helper()
	return startListening(t, bin, "serve", append([]string{"--addr", "127.0.0.1:0", "--model-id", "tiny"}, args...)...)
}

// startListening starts the built student binary bin as command sub on the tiny model with
// the extra flags args (one of which makes it listen on a free loopback port), as startServe.
func startListening(t *testing.T, bin, sub string, args ...string) (*exec.Cmd, string, *bufio.Scanner) {
	t.Helper()
	cmd, base, sc, _ := startLogged(t, bin, append([]string{sub}, append(tinyArgs(t), args...)...)...)
	return cmd, base, sc
}

// startLogged starts the built student binary bin with args (which make it listen on a free
// loopback port), as startListening, and also returns the lines of stderr before the
// listening line.
func startLogged(t *testing.T, bin string, args ...string) (*exec.Cmd, string, *bufio.Scanner, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`on (http://[0-9.:]+)/v1`)
	var before []string
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			return cmd, m[1], sc, before
		}
		before = append(before, sc.Text())
	}
	t.Fatalf("%s never listened: %v\n%s", args[0], sc.Err(), strings.Join(before, "\n"))
	return nil, "", nil, nil
}

// collect reads sc to its end (the process exited) and sends what it read.
func collect(sc *bufio.Scanner) <-chan string {
	logged := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		logged <- b.String()
	}()
	return logged
}
