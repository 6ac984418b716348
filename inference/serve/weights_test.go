package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/student/studenttest"
	"github.com/chainedsql/chainedsql/internal/httpguard"
	"github.com/chainedsql/chainedsql/internal/regular"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// tinySwap serves ../shared/models/tiny-qwen2-f32 through a Swap whose reloads use
// Student.Successor, as `student serve` does; it returns the swap and the original directory.
func tinySwap(t *testing.T) (*serve.Swap[*student.Student], string) {
	t.Helper()
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	opts := student.Options{Tokenizer: shared.Path(t, "tokenizer/qwen2.5"), ModelID: "tiny", Generate: generate.Config{MaxBatch: 8}}
	st, err := student.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	sw := serve.NewSwap(st, dir, func(_ context.Context, d string, cur *student.Student, open *regular.Opener) (*student.Student, error) {
		o := opts
		o.Opener = open
		return cur.Successor(d, o)
	})
	t.Cleanup(func() { sw.Close() })
	return sw, dir
}

// flipped is the tiny checkpoint with its final norm negated: every logit changes sign, so
// greedy decoding picks other tokens.
func flipped(t *testing.T, dir string) string {
	return studenttest.Perturbed(t, dir, "model.norm.weight", nil)
}

func chatBody(prompt string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": prompt}}, "temperature": 0, "max_tokens": 12, "stream": stream})
	return string(b)
}

// complete returns a non-streamed greedy reply and its system_fingerprint.
func complete(t *testing.T, url, prompt string) (string, string) {
	t.Helper()
	code, out := post(t, url, chatBody(prompt, false))
	if code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	fp, _ := out["system_fingerprint"].(string)
	return out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string), fp
}

func reload(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	return postJSON(t, url+"/v1/weights", key, body)
}

func pathBody(dir string) string {
	b, _ := json.Marshal(map[string]string{"path": dir})
	return string(b)
}

// flipPrompt is a greedy prompt whose reply tells the two checkpoints apart.
const flipPrompt = "How many singers are there?"

// twoCheckpoints serves tinySwap's weights (dir) over HTTP (closed at the end of the test) and
// makes the flipped checkpoint (other) to reload.
func twoCheckpoints(t *testing.T) (sw *serve.Swap[*student.Student], srv *httptest.Server, dir, other string) {
	t.Helper()
	sw, dir = tinySwap(t)
	srv = httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
	t.Cleanup(srv.Close)
	return sw, srv, dir, flipped(t, dir)
}

// TestReloadChangesOutputs: the same greedy prompt before and after POST /v1/weights gets the
// reply of each checkpoint (equal to a server started on it), the response and GET /v1/weights
// give the path, load time and version, and reloading the first checkpoint brings its reply back.
func TestReloadChangesOutputs(t *testing.T) {
	_, srv, dir, other := twoCheckpoints(t)
	before, fp := complete(t, srv.URL, flipPrompt)
	if fp != "weights-v1" {
		t.Fatalf("fingerprint %q before any reload", fp)
	}
	code, out := reload(t, srv.URL, "", pathBody(other))
	if code != 200 || out["path"] != other || out["version"] != 2.0 || out["object"] != "weights" || out["model"] != "tiny" || !(out["load_seconds"].(float64) > 0) {
		t.Fatalf("reload: %d %v", code, out)
	}
	after, fp := complete(t, srv.URL, flipPrompt)
	if fp != "weights-v2" || after == before {
		t.Fatalf("after the reload: %q (%s), before %q", after, fp, before)
	}
	// The reply is the one a server started on the new checkpoint gives.
	ref, err := student.Open(other, student.Options{Tokenizer: shared.Path(t, "tokenizer/qwen2.5")})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, err := ref.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: flipPrompt}}, chat.Options{Temperature: chat.Float(0), MaxTokens: 12})
	if err != nil || want.Content != after {
		t.Fatalf("a student opened on the new weights says %q (%v), the reloaded server %q", want.Content, err, after)
	}
	resp, err := http.Get(srv.URL + "/v1/weights")
	if err != nil {
		t.Fatal(err)
	}
	var info serve.WeightsInfo
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.Version != 2 || info.Path != other || info.Draining != 0 {
		t.Fatalf("GET /v1/weights: %+v", info)
	}
	if code, out := reload(t, srv.URL, "", pathBody(dir)); code != 200 || out["version"] != 3.0 {
		t.Fatalf("reload back: %d %v", code, out)
	}
	if again, fp := complete(t, srv.URL, flipPrompt); again != before || fp != "weights-v3" {
		t.Fatalf("back on the first weights: %q (%s), first %q", again, fp, before)
	}
}

// TestReloadThroughLink: a trainer that reloads one symbolic link ("latest") re-pointed at each
// step's checkpoint gets each checkpoint's own directory as path, its link as requested_path,
// and the reply of the checkpoint the link named when it was posted.
func TestReloadThroughLink(t *testing.T) {
	sw, srv, dir, other := twoCheckpoints(t)
	before, _ := complete(t, srv.URL, flipPrompt)
	latest := filepath.Join(t.TempDir(), "latest")
	for i, target := range []string{other, dir} {
		os.Remove(latest)
		if err := os.Symlink(target, latest); err != nil {
			t.Fatal(err)
		}
		want, err := filepath.EvalSymlinks(target)
		if err != nil {
			t.Fatal(err)
		}
		code, out := reload(t, srv.URL, "", pathBody(latest))
		if code != 200 || out["path"] != want || out["requested_path"] != latest || out["version"] != float64(i+2) {
			t.Fatalf("reload %d through %s -> %s: %d %v", i+1, latest, target, code, out)
		}
		if info := sw.Weights(); info.Path != want || info.RequestedPath != latest {
			t.Fatalf("Weights after reload %d: %+v", i+1, info)
		}
		got, _ := complete(t, srv.URL, flipPrompt)
		if (target == dir) != (got == before) {
			t.Fatalf("reload %d through the link to %s: %q, the first weights say %q", i+1, target, got, before)
		}
	}
}

// TestReloadDrainsInFlight: requests running when the weights are replaced finish on the old
// weights, which stay open until the last of them ends and are closed then; new requests get
// the new weights.
func TestReloadDrainsInFlight(t *testing.T) {
	sw, dir := tinySwap(t)
	other := flipped(t, dir)
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "List the stadiums."}}
	opts := chat.Options{Temperature: chat.Float(0), MaxTokens: 12}
	ctx := context.Background()
	refOld, err := sw.Stream(ctx, msgs, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Four requests stop at their first piece of text until the reload is done.
	gate := make(chan struct{})
	var started, wg sync.WaitGroup
	replies := make([]chat.Reply, 4)
	errs := make([]error, 4)
	for i := range replies {
		started.Add(1)
		wg.Go(func() {
			first := true
			replies[i], errs[i] = sw.Stream(ctx, msgs, opts, func(string) error {
				if first {
					first = false
					started.Done()
					<-gate
				}
				return nil
			})
		})
	}
	started.Wait()
	info, err := sw.Reload(ctx, other)
	if err != nil || info.Version != 2 || info.Draining != 1 {
		t.Fatalf("reload with 4 requests running: %+v %v", info, err)
	}
	newRep, err := sw.Stream(ctx, msgs, opts, nil)
	if err != nil || newRep.Content == refOld.Content {
		t.Fatalf("a new request after the reload: %q %v (old weights said %q)", newRep.Content, err, refOld.Content)
	}
	close(gate)
	wg.Wait()
	for i, r := range replies {
		if errs[i] != nil || r.Content != refOld.Content {
			t.Errorf("in-flight request %d: %q %v, want the old weights' %q", i, r.Content, errs[i], refOld.Content)
		}
	}
	if d := sw.Weights().Draining; d != 0 {
		t.Fatalf("%d old weights still held after their requests ended", d)
	}
}

// TestReloadUnderLoad: clients keep sending streamed and plain requests over HTTP while the
// weights flip four times; every request completes, and each reply is the one of the weights
// its system_fingerprint names.
func TestReloadUnderLoad(t *testing.T) {
	sw, dir := tinySwap(t)
	srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
	defer srv.Close()
	other := flipped(t, dir)
	const prompt = "Which singer is the oldest?"
	want := map[bool]string{} // by "odd version" (the first checkpoint)
	want[true], _ = complete(t, srv.URL, prompt)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients()
	var mu sync.Mutex
	seen := map[string]int{}
	versions := map[string]bool{}
	for c := range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				text, fp, err := streamOrNot(srv.URL, prompt, c%2 == 0)
				if err != nil {
					t.Errorf("client %d: %v", c, err)
					return
				}
				mu.Lock()
				seen[fp+"\x00"+text]++
				versions[fp] = true
				mu.Unlock()
			}
		})
	}
	// Each version serves some requests before the next reload.
	waitFor := func(fp string) {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			ok := versions[fp]
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no reply from %s within a minute", fp)
			}
		}
	}
	for i := range 4 {
		waitFor(serve.Fingerprint(int64(i + 1)))
		d := other
		if i%2 == 1 {
			d = dir
		}
		if code, out := reload(t, srv.URL, "", pathBody(d)); code != 200 {
			t.Fatalf("reload %d: %d %v", i, code, out)
		}
		if i == 0 {
			want[false], _ = complete(t, srv.URL, prompt)
		}
	}
	waitFor(serve.Fingerprint(5))
	stopClients()
	for k, n := range seen {
		fp, text, _ := strings.Cut(k, "\x00")
		var v int
		if _, err := fmt.Sscanf(fp, "weights-v%d", &v); err != nil {
			t.Fatalf("%d replies with fingerprint %q", n, fp)
		}
		if text != want[v%2 == 1] {
			t.Errorf("%d replies on %s said %q, want %q", n, fp, text, want[v%2 == 1])
		}
	}
	if len(versions) != 5 || sw.Weights().Version != 5 || sw.Weights().Draining != 0 {
		t.Fatalf("replies came from %v; weights now %+v", versions, sw.Weights())
	}
}

// streamOrNot sends one greedy request, streamed or not, and returns its text and fingerprint.
func streamOrNot(url, prompt string, stream bool) (string, string, error) {
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(prompt, stream)))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", "", fmt.Errorf("status %d", resp.StatusCode)
	}
	if !stream {
		var c struct {
			SystemFingerprint string `json:"system_fingerprint"`
			Choices           []struct{ Message struct{ Content string } }
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			return "", "", err
		}
		return c.Choices[0].Message.Content, c.SystemFingerprint, nil
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	var text strings.Builder
	fp, done := "", false
	for l := range strings.SplitSeq(body.String(), "\n") {
		if l == "data: [DONE]" {
			done = true
			continue
		}
		if !strings.HasPrefix(l, "data: ") {
			continue
		}
		var c struct {
			SystemFingerprint string `json:"system_fingerprint"`
			Choices           []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(l[6:]), &c); err != nil || len(c.Choices) == 0 {
			return "", "", fmt.Errorf("bad event %q", l)
		}
		if fp != "" && c.SystemFingerprint != fp {
			return "", "", fmt.Errorf("fingerprints %s and %s in one stream", fp, c.SystemFingerprint)
		}
		fp = c.SystemFingerprint
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if !done {
		return "", "", fmt.Errorf("stream without [DONE]: %q", body.String())
	}
	return text.String(), fp, nil
}

// TestReloadRefusals: a missing directory, a checkpoint of another architecture, one that does
// not load, a bad body and a second reload while one loads are refused with the old weights
// still serving; a guarded server wants the key for a reload.
func TestReloadRefusals(t *testing.T) {
	sw, dir := tinySwap(t)
	ts := httptest.NewUnstartedServer(nil)
	g, err := httpguard.New(ts.Listener.Addr(), httpguard.Options{Name: "student serve", APIKeys: []string{"sk-reload"}, MaxBody: serve.MaxBodyBytes})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = g.Server(serve.Handler(sw, nil, serve.Config{}), nil)
	ts.Start()
	defer ts.Close()
	const key = "sk-reload"
	other := flipped(t, dir)
	rope := studenttest.Perturbed(t, dir, "model.norm.weight", func(c []byte) []byte {
		return bytes.Replace(c, []byte(`"rope_theta": 1000000.0`), []byte(`"rope_theta": 10000.0`), 1)
	})
	wide := studenttest.Perturbed(t, dir, "model.norm.weight", func(c []byte) []byte {
		return bytes.Replace(c, []byte(`"hidden_size": 64`), []byte(`"hidden_size": 128`), 1)
	})
	// The trainer's tokenizer.json beside its weights: the server's own one is accepted, one
	// with a token more is not.
	tokJSON, err := os.ReadFile(shared.Path(t, "tokenizer/qwen2.5/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "tokenizer.json"), tokJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	var tj map[string]any
	if err := json.Unmarshal(tokJSON, &tj); err != nil {
		t.Fatal(err)
	}
	added := tj["added_tokens"].([]any)
	extra := maps.Clone(added[len(added)-1].(map[string]any))
	extra["id"], extra["content"] = extra["id"].(float64)+1, "<|policy_extra|>"
	tj["added_tokens"] = append(added, extra)
	moreTokens := flipped(t, dir)
	if b, err := json.Marshal(tj); err != nil || os.WriteFile(filepath.Join(moreTokens, "tokenizer.json"), b, 0o644) != nil {
		t.Fatal("writing a tokenizer.json with a token more")
	}
	for _, c := range []struct {
		name, key, body, want string
		status                int
	}{
		{"without the key", "", pathBody(other), "Authorization", 401},
		{"another key", "sk-other", pathBody(other), "bearer token", 401},
		{"a missing directory", key, pathBody(dir + "-nope"), "no such file", 422},
		{"another rope_theta", key, pathBody(rope), "rope_theta is 10000, serving 1e+06", 422},
		{"weights of another shape", key, pathBody(wide), "config.json implies [151936 128]", 422},
		{"another tokenizer", key, pathBody(moreTokens), "151666 tokens, serving 151665", 422},
		{"no path", key, `{}`, "path", 400},
		{"an unknown field", key, `{"path":"x","dtype":"q8"}`, "dtype", 400},
	} {
		code, out := reload(t, ts.URL, c.key, c.body)
		e, _ := out["error"].(map[string]any)
		if code != c.status || e == nil || !strings.Contains(e["message"].(string), c.want) {
			t.Errorf("%s: %d %v; want %d mentioning %q", c.name, code, out, c.status, c.want)
		}
		if e != nil && code == 422 && packagePrefix.MatchString(e["message"].(string)) {
			t.Errorf("%s: a package prefix in %q", c.name, e["message"])
		}
		if w := sw.Weights(); w.Version != 1 || w.Path != dir {
			t.Fatalf("%s: now serving %+v", c.name, w)
		}
	}
	r, _ := http.NewRequest("GET", ts.URL+"/v1/weights", nil)
	if resp, err := http.DefaultClient.Do(r); err != nil || resp.StatusCode != 401 {
		t.Errorf("GET /v1/weights without the key: %v %v", resp, err)
	}
	if code, out := reload(t, ts.URL, key, pathBody(other)); code != 200 || out["version"] != 2.0 {
		t.Fatalf("with the key: %d %v", code, out)
	}
}

// packagePrefix matches a message that begins with one of the runtime's package prefixes.
var packagePrefix = regexp.MustCompile(`^(student|serve|generate|chattmpl|cuda|cpu|qwen2|tokenizer|safetensors)[: ]`)

// TestReloadMessages: the messages of a refused reload (the loader's error, a reload while
// another runs) carry no package prefixes, with the weights still serving after them.
func TestReloadMessages(t *testing.T) {
	st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	sw := serve.NewSwap(st, "/toy", func(ctx context.Context, dir string, cur *student.Student, _ *regular.Opener) (*student.Student, error) {
		if dir == "/slow" {
			close(started)
			<-release
		}
		return nil, fmt.Errorf("student: weights directory: stat %s: no such file or directory", dir)
	})
	defer sw.Close()
	srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
	defer srv.Close()
	done := make(chan int)
	go func() {
		r, _ := http.NewRequest("POST", srv.URL+"/v1/weights", strings.NewReader(pathBody("/slow")))
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-started
	code, out := reload(t, srv.URL, "", pathBody("/other"))
	close(release)
	if msg, _ := out["error"].(map[string]any)["message"].(string); code != 409 || !strings.HasPrefix(msg, "a weights reload is already running") {
		t.Errorf("a reload while another runs: %d %v", code, out)
	}
	if code := <-done; code != 422 {
		t.Errorf("the slow reload: %d", code)
	}
	code, out = reload(t, srv.URL, "", pathBody("/nonexistent"))
	want := "weights directory: stat /nonexistent: no such file or directory (still serving weights version 1 from /toy)"
	if msg, _ := out["error"].(map[string]any)["message"].(string); code != 422 || msg != want {
		t.Errorf("a missing directory: %d %v; want 422 %q", code, out, want)
	}
}

// A backend that is not a Swap has no /v1/weights.
func TestNoWeightsRouteWithoutSwap(t *testing.T) {
	srv, _ := newServer(t, 0)
	code, out := reload(t, srv.URL, "", `{"path":"/tmp"}`)
	if code != 404 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "/v1/models") {
		t.Fatalf("%d %v", code, out)
	}
}

// TestReloadRefusesSpecialFiles: a checkpoint whose config.json is a FIFO, or whose
// model.safetensors is a link to /dev/zero, is refused at once, and the next reload loads.
// Without the check the FIFO's open waited for a writer for good, and every later reload was
// 409 (a reload in progress).
func TestReloadRefusesSpecialFiles(t *testing.T) {
	sw, dir := tinySwap(t)
	copyOf := func() string {
		d := t.TempDir()
		for _, name := range []string{"config.json", "generation_config.json", "model.safetensors"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	fifo := copyOf()
	cfg := filepath.Join(fifo, "config.json")
	os.Remove(cfg)
	if err := syscall.Mkfifo(cfg, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Should a load still open the FIFO, this unblocks it when the test ends.
	t.Cleanup(func() {
		if f, err := os.OpenFile(cfg, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	zero := copyOf()
	os.Remove(filepath.Join(zero, "model.safetensors"))
	if err := os.Symlink("/dev/zero", filepath.Join(zero, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, says string }{{fifo, "config.json is not a regular file"}, {zero, "model.safetensors is not a regular file"}} {
		done := make(chan error, 1)
		go func() {
			_, err := sw.Reload(context.Background(), c.dir)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("reload of %s: %v, want %q", c.dir, err, c.says)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reload of %s still running after 10 s", c.dir)
		}
	}
	if info, err := sw.Reload(context.Background(), copyOf()); err != nil || info.Version != 2 {
		t.Fatalf("the next reload: %+v %v", info, err)
	}
}

// TestReloadConfined: a Swap confined to a root reloads a directory in it (named directly,
// through a link inside it, or holding a link to a file inside it) and refuses, 403
// weights_outside_root without calling the loader, one outside it: named directly, through
// "..", through a link in the root leading out, or holding a .safetensors or .json link leading
// out; the weights serving stay. Without a root every one of them loads.
func TestReloadConfined(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "ckpt"), filepath.Join(base, "elsewhere")
	for _, d := range []string{"step-1", "step-2", "shard-in", "shard-out", "config-out"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(outside, "model.safetensors"), filepath.Join(outside, "config.json"), filepath.Join(root, "step-1", "model.safetensors")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(root, "latest"):                         filepath.Join(root, "step-2"),
		filepath.Join(root, "escape"):                         outside,
		filepath.Join(root, "shard-in", "model.safetensors"):  filepath.Join(root, "step-1", "model.safetensors"),
		filepath.Join(root, "shard-out", "model.safetensors"): filepath.Join(outside, "model.safetensors"),
		filepath.Join(root, "config-out", "config.json"):      filepath.Join(outside, "config.json"),
		filepath.Join(root, "step-2", "notes.txt"):            "/etc/hostname", // not read by a loader: no matter
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	accepted := []string{filepath.Join(root, "step-1"), filepath.Join(root, "latest"), filepath.Join(root, "shard-in"), filepath.Join(root, "step-2") + "/../step-1"}
	refused := []string{outside, root + "/../elsewhere", filepath.Join(root, "escape"), filepath.Join(root, "shard-out"), filepath.Join(root, "config-out"), "/"}

	for _, confined := range []bool{true, false} {
		var loads []string
		st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
		if err != nil {
			t.Fatal(err)
		}
		sw := serve.NewSwap(st, filepath.Join(root, "step-1"), func(_ context.Context, dir string, _ *student.Student, _ *regular.Opener) (*student.Student, error) {
			loads = append(loads, dir)
			return student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
		})
		defer sw.Close()
		if confined {
			if err := sw.Confine(filepath.Join(base, ".", "ckpt")); err != nil || sw.Root() != root {
				t.Fatalf("Confine: %v, root %q", err, sw.Root())
			}
			if err := sw.Confine(filepath.Join(root, "step-1", "model.safetensors")); err == nil {
				t.Errorf("Confine to a file: no error")
			}
			if err := sw.Confine(filepath.Join(base, "missing")); err == nil {
				t.Errorf("Confine to a missing directory: no error")
			}
		}
		srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
		defer srv.Close()
		for _, dir := range accepted {
			if code, out := reload(t, srv.URL, "", pathBody(dir)); code != 200 {
				t.Errorf("confined %v: %s: %d %v", confined, dir, code, out)
			}
		}
		version := sw.Weights().Version
		for _, dir := range refused {
			code, out := reload(t, srv.URL, "", pathBody(dir))
			if !confined {
				if code != 200 {
					t.Errorf("unconfined: %s: %d %v", dir, code, out)
				}
				continue
			}
			e, _ := out["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if code != 403 || e["code"] != "weights_outside_root" || !strings.Contains(msg, "outside the weights root "+root) || !strings.Contains(msg, "--weights-root") || packagePrefix.MatchString(msg) {
				t.Errorf("%s: %d %v; want 403 weights_outside_root naming the root", dir, code, out)
			}
		}
		if confined {
			if len(loads) != len(accepted) || sw.Weights().Version != version {
				t.Errorf("%d loads for %d accepted directories (%v), version %d after the refusals, want %d", len(loads), len(accepted), loads, sw.Weights().Version, version)
			}
		}
	}
}

// TestReloadConfinedRepointed: a link inside the root that passes the check as the request
// arrives and is re-pointed out of the root before the loader opens what it leads to (a
// config.json link, or a directory on the way to the checkpoint, swapped for a link to a
// directory outside) is refused: 403 weights_outside_root, the weights unchanged. The loader
// here re-points the link and then reads config.json as every loader reads (through the Opener
// it is handed).
// Unconfined, the same loads succeed; after each reload the file outside reads again.
func TestReloadConfinedRepointed(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "ckpt"), filepath.Join(base, "elsewhere")
	for _, d := range []string{filepath.Join(root, "step"), filepath.Join(root, "run", "step"), filepath.Join(outside, "step")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "step", "inside.json"), filepath.Join(root, "run", "step", "config.json"), filepath.Join(outside, "config.json"), filepath.Join(outside, "step", "config.json")} {
		if err := os.WriteFile(f, []byte(`{"secret":false}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "step", "config.json")
	before := func() error { // as the request arrives: both inside the root
		os.Remove(link)
		os.Remove(filepath.Join(root, "run"))
		os.Rename(filepath.Join(root, "run.old"), filepath.Join(root, "run"))
		return os.Symlink(filepath.Join(root, "step", "inside.json"), link)
	}
	after := map[string]func() error{ // between the check and the open
		filepath.Join(root, "step"): func() error {
			os.Remove(link)
			return os.Symlink(filepath.Join(outside, "config.json"), link)
		},
		filepath.Join(root, "run", "step"): func() error {
			if err := os.Rename(filepath.Join(root, "run"), filepath.Join(root, "run.old")); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(root, "run"))
		},
	}
	for _, confined := range []bool{true, false} {
		st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
		if err != nil {
			t.Fatal(err)
		}
		sw := serve.NewSwap(st, filepath.Join(root, "step"), func(_ context.Context, dir string, _ *student.Student, open *regular.Opener) (*student.Student, error) {
			if err := after[dir](); err != nil {
				return nil, err
			}
			if _, err := open.ReadJSON(filepath.Join(dir, "config.json")); err != nil {
				return nil, err
			}
			return student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
		})
		defer sw.Close()
		if confined {
			if err := sw.Confine(root); err != nil {
				t.Fatal(err)
			}
		}
		srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
		defer srv.Close()
		for _, dir := range []string{filepath.Join(root, "step"), filepath.Join(root, "run", "step")} {
			if err := before(); err != nil {
				t.Fatal(err)
			}
			version := sw.Weights().Version
			code, out := reload(t, srv.URL, "", pathBody(dir))
			e, _ := out["error"].(map[string]any)
			msg, _ := e["message"].(string)
			switch {
			case !confined && code != 200:
				t.Errorf("unconfined: %s: %d %v", dir, code, out)
			case confined && (code != 403 || e["code"] != "weights_outside_root" || !strings.Contains(msg, "outside the weights root "+root) || sw.Weights().Version != version):
				t.Errorf("%s re-pointed out of the root after the check: %d %v (version %d, was %d); want 403 weights_outside_root", dir, code, out, sw.Weights().Version, version)
			}
			if _, err := regular.ReadJSON(filepath.Join(dir, "config.json")); err != nil {
				t.Errorf("after the reload, reading %s/config.json: %v", dir, err)
			}
		}
	}
}

// TestReloadConfinedUncoupled: a confined reload confines only its own opens. While one Swap,
// confined to a root, is loading a directory in it (its loader held before it opens anything),
// another Swap without a root reloads the same directory, whose weights.bin links out of the
// root, and a plain regular.ReadFile reads it too: both succeed. The confined reload then
// opens weights.bin through its Opener and is refused (ErrOutsideRoot). Before, confinement
// was a process-wide registry by path: the unconfined load was refused too.
func TestReloadConfinedUncoupled(t *testing.T) {
	base := t.TempDir()
	root, dir, outside := filepath.Join(base, "ckpt"), filepath.Join(base, "ckpt", "step"), filepath.Join(base, "elsewhere.bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(dir, "weights.bin")
	if err := os.Symlink(outside, shard); err != nil {
		t.Fatal(err)
	}
	toy := func() (*student.Student, error) {
		return student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	}
	started, resume := make(chan struct{}), make(chan struct{})
	swap := func(confined bool) *serve.Swap[*student.Student] {
		st, err := toy()
		if err != nil {
			t.Fatal(err)
		}
		sw := serve.NewSwap(st, dir, func(_ context.Context, d string, _ *student.Student, open *regular.Opener) (*student.Student, error) {
			if confined {
				close(started)
				<-resume
			}
			if _, err := open.ReadFile(filepath.Join(d, "weights.bin"), 1<<20); err != nil {
				return nil, err
			}
			return toy()
		})
		t.Cleanup(func() { sw.Close() })
		if confined {
			if err := sw.Confine(root); err != nil {
				t.Fatal(err)
			}
		}
		return sw
	}
	confined, plain := swap(true), swap(false)
	done := make(chan error, 1)
	go func() { _, err := confined.Reload(context.Background(), dir); done <- err }()
	<-started
	if _, err := plain.Reload(context.Background(), dir); err != nil {
		t.Errorf("unconfined reload while a confined one of the same directory loads: %v", err)
	}
	if _, err := regular.ReadFile(shard, 1<<20); err != nil {
		t.Errorf("plain read while a confined reload of its directory loads: %v", err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, serve.ErrOutsideRoot) || confined.Weights().Version != 1 {
		t.Errorf("confined reload of a shard linking out: %v (version %d), want ErrOutsideRoot and version 1", err, confined.Weights().Version)
	}
	if plain.Weights().Version != 2 {
		t.Errorf("unconfined swap at version %d, want 2", plain.Weights().Version)
	}
}

// TestReloadConfinedShardLink: with the real loader (Student.Successor), a checkpoint in the
// root whose index names a shard that is not a .safetensors file (weights.bin, which the check
// as the request arrives does not look at) and is a link out of the root is refused as the
// loader opens it: 403 weights_outside_root, the weights unchanged; unconfined it loads. A hard
// link inside the root to the same file outside is loaded: the root is of paths (ROLLOUT).
func TestReloadConfinedShardLink(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "ckpt"), flipped(t, shared.Path(t, "models/tiny-qwen2-f32"))
	shard := filepath.Join(outside, "model.safetensors")
	f, err := safetensors.Open(shard)
	if err != nil {
		t.Fatal(err)
	}
	weightMap := map[string]string{}
	for _, n := range f.Names() {
		weightMap[n] = "weights.bin"
	}
	f.Close()
	files := map[string][]byte{}
	files[safetensors.IndexFile], _ = json.Marshal(map[string]any{"weight_map": weightMap})
	for _, name := range []string{"config.json", "generation_config.json"} {
		if files[name], err = os.ReadFile(filepath.Join(outside, name)); err != nil {
			t.Fatal(err)
		}
	}
	link, hard := filepath.Join(root, "link"), filepath.Join(root, "hard")
	for _, d := range []string{link, hard} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(shard, filepath.Join(link, "weights.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(shard, filepath.Join(hard, "weights.bin")); err != nil {
		t.Skipf("hard link: %v", err)
	}
	for _, confined := range []bool{true, false} {
		sw, _ := tinySwap(t)
		if confined {
			if err := sw.Confine(root); err != nil {
				t.Fatal(err)
			}
		}
		srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
		defer srv.Close()
		version := sw.Weights().Version
		code, out := reload(t, srv.URL, "", pathBody(link))
		e, _ := out["error"].(map[string]any)
		switch {
		case !confined && code != 200:
			t.Errorf("unconfined: %d %v", code, out)
		case confined && (code != 403 || e["code"] != "weights_outside_root" || sw.Weights().Version != version):
			t.Errorf("a shard weights.bin linking out of the root: %d %v (version %d, was %d); want 403 weights_outside_root", code, out, sw.Weights().Version, version)
		}
		if code, out := reload(t, srv.URL, "", pathBody(hard)); code != 200 {
			t.Errorf("confined %v: a hard link inside the root: %d %v, want 200", confined, code, out)
		}
	}
}

// TestReloadConfinedNoOracle: a confined server's refusals tell a client nothing of the files
// outside its root. Before, a directory named outside the root was resolved with
// filepath.EvalSymlinks and the refusal named the result ("/proc/self/root/etc/passwd (/etc/passwd
// once its links are followed)", absent for a missing file: an existence oracle for any path
// the server could stat, through /proc/self/root, and a reader of links such as /proc/self/cwd);
// a link in the root to a missing path outside was not refused (the loader said "no such file",
// or, for tokenizer.json, loaded without it) while one to an existing path was, naming where it
// led. Now each pair below (outside what they name exists, and does not) gets the same 403,
// naming nothing beyond the request and the links' own text, and nothing is loaded.
func TestReloadConfinedNoOracle(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "ckpt"), filepath.Join(base, "elsewhere")
	for _, d := range []string{filepath.Join(root, "tok-there"), filepath.Join(root, "tok-missing"), filepath.Join(outside, "secret-dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(base, "hop-there"):                     filepath.Join(outside, "secret-dir"),
		filepath.Join(base, "hop-missing"):                   filepath.Join(outside, "no-dir"),
		filepath.Join(root, "out-there"):                     filepath.Join(base, "hop-there"),
		filepath.Join(root, "out-missing"):                   filepath.Join(base, "hop-missing"),
		filepath.Join(outside, "there.json"):                 filepath.Join(outside, "secret.json"),
		filepath.Join(root, "tok-there", "tokenizer.json"):   filepath.Join(outside, "there.json"),
		filepath.Join(root, "tok-missing", "tokenizer.json"): filepath.Join(outside, "missing.json"),
		filepath.Join(base, "alias"):                         root, // the root by another path
		filepath.Join(root, "via-alias"):                     filepath.Join(base, "alias", "tok-there"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	var loads []string
	st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	sw := serve.NewSwap(st, root, func(_ context.Context, dir string, _ *student.Student, _ *regular.Opener) (*student.Student, error) {
		loads = append(loads, dir)
		return student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	})
	defer sw.Close()
	if err := sw.Confine(root); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serve.Handler(sw, nil, serve.Config{}))
	defer srv.Close()
	for _, pair := range [][2]string{
		{filepath.Join(base, "hop-there"), filepath.Join(base, "hop-missing")},           // named outside
		{filepath.Join(root, "out-there"), filepath.Join(root, "out-missing")},           // a link out
		{filepath.Join(root, "out-there", "x"), filepath.Join(root, "out-missing", "x")}, // one on the way
		{filepath.Join(root, "tok-there"), filepath.Join(root, "tok-missing")},           // an entry's
	} {
		var msgs [2]string
		for i, dir := range pair {
			code, out := reload(t, srv.URL, "", pathBody(dir))
			e, _ := out["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if code != 403 || e["code"] != "weights_outside_root" {
				t.Errorf("%s: %d %v; want 403 weights_outside_root", dir, code, out)
			}
			for _, secret := range []string{"secret", "no-dir"} { // beyond the first link
				if strings.Contains(msg, secret) {
					t.Errorf("%s: the refusal names what lies outside the root (%q): %s", dir, secret, msg)
				}
			}
			msgs[i] = strings.ReplaceAll(strings.ReplaceAll(msg, "there", "X"), "missing", "X")
		}
		if msgs[0] != msgs[1] {
			t.Errorf("the refusals tell a file outside the root that exists from one that does not:\n%s\n%s", msgs[0], msgs[1])
		}
	}
	if len(loads) != 0 {
		t.Errorf("loaded %v", loads)
	}
	// A link that names the root through a link to it leads back in: loaded (its
	// tokenizer.json link is another matter: removed here).
	if err := os.Remove(filepath.Join(root, "tok-there", "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if code, out := reload(t, srv.URL, "", pathBody(filepath.Join(root, "via-alias"))); code != 200 || len(loads) != 1 || loads[0] != filepath.Join(root, "tok-there") {
		t.Errorf("a link back into the root through an alias of it: %d %v, loads %v", code, out, loads)
	}
}
