package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in different goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tinyArgs(t *testing.T) []string {
	return []string{"--model", shared.Path(t, "models/tiny-qwen2-f32"), "--tokenizer", shared.Path(t, "tokenizer/qwen2.5")}
}

func TestServeCommand(t *testing.T) {
	t.Parallel()
	args := append(tinyArgs(t), "--addr", "127.0.0.1:0", "--model-id", "tiny", "--max-tokens", "8")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- dispatch(ctx, append([]string{"serve"}, args...), &stdout, &stderr) }()
	re := regexp.MustCompile(`on (http://[0-9.:]+/v1)`)
	var base string
	for deadline := time.Now().Add(2 * time.Minute); base == ""; {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case c := <-code:
			t.Fatalf("serve exited %d: %s", c, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never listened: %s", stderr.String())
		}
	}
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = base
	oc := openai.NewClientWithConfig(cfg)
	list, err := oc.ListModels(ctx)
	if err != nil || len(list.Models) != 1 || list.Models[0].ID != "tiny" {
		t.Fatalf("models: %+v %v", list, err)
	}
	resp, err := oc.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "tiny", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 8 {
		t.Fatalf("usage %+v", resp.Usage)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("serve exit %d: %s", c, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop on cancel")
	}
	if !strings.Contains(stderr.String(), "chat chatcmpl-") {
		t.Fatalf("no request log: %s", stderr.String())
	}
}

func TestChatCommand(t *testing.T) {
	t.Parallel()
	old := chatInput
	defer func() { chatInput = old }()
	chatInput = strings.NewReader("Hello\nHow are you?\n/reset\nHi\n/exit\nnever read\n")
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), append([]string{"chat"}, append(tinyArgs(t), "--max-tokens", "4")...), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	sums := regexp.MustCompile(`\[(\d+)\+(\d+) tokens, (\d+) from cache`).FindAllStringSubmatch(stderr.String(), -1)
	if len(sums) != 3 || !strings.Contains(stderr.String(), "(new conversation)") {
		t.Fatalf("stderr %q", stderr.String())
	}
	// Turn two extends turn one's history (a longer prompt, mostly from the cache); after
	// /reset the prompt is short again.
	if !(sums[1][1] > sums[0][1] || len(sums[1][1]) > len(sums[0][1])) || sums[1][3] == "0" {
		t.Fatalf("second turn %v after %v", sums[1], sums[0])
	}
	// Each reply streams to stdout and ends with a new line (the tiny random model's replies
	// may themselves be new lines).
	if strings.Count(stdout.String(), "\n") < 3 || !strings.HasSuffix(stdout.String(), "\n") {
		t.Fatalf("stdout %q: want three replies", stdout.String())
	}
	var errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"chat"}, &stdout, &errb); code != 2 || !strings.Contains(errb.String(), "--model") {
		t.Fatalf("no --model: %d %s", code, errb.String())
	}
}

type refFile struct {
	Tokens    []int `json:"tokens"`
	Positions []struct {
		Top10 [][2]float64 `json:"top10"`
	} `json:"positions"`
}

// readRef reads the llama.cpp reference logits of the model in dir and returns them and their
// token ids as decimal strings, as `student logits --ids` takes them.
func readRef(t *testing.T, dir string) (refFile, []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ref.Tokens))
	for i, id := range ref.Tokens {
		ids[i] = strconv.Itoa(id)
	}
	return ref, ids
}

// checkTop compares the --top 10 output with llama.cpp's top 10 of every position.
func checkTop(t *testing.T, dtype string, js []byte, ref *refFile, tol float64) {
	t.Helper()
	var out struct {
		IDs       []int `json:"ids"`
		VocabSize int   `json:"vocab_size"`
		Positions []struct {
			Argmax int          `json:"argmax"`
			Top    [][2]float64 `json:"top"`
		} `json:"positions"`
	}
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if len(out.Positions) != len(ref.Tokens) || out.VocabSize != 151936 {
		t.Fatalf("%d positions, vocab %d", len(out.Positions), out.VocabSize)
	}
	for p, pos := range out.Positions {
		for k, want := range ref.Positions[p].Top10 {
			got := pos.Top[k]
			if math.Abs(got[1]-want[1]) > tol {
				t.Fatalf("dtype %q: position %d, rank %d: %v, llama.cpp %v", dtype, p, k, got, want)
			}
		}
		if pos.Argmax != int(pos.Top[0][0]) {
			t.Fatalf("position %d: argmax %d, top %v", p, pos.Argmax, pos.Top[0])
		}
	}
}

func TestLogitsCommand(t *testing.T) {
	t.Parallel()
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	ref, ids := readRef(t, dir)
	var stdout, stderr bytes.Buffer
	// The tiny checkpoint's weights are bf16-rounded f32, so bf16 holds them exactly; q8 only
	// approximates them, over the bf16 KV cache it keeps unless told (kv_cache says which).
	for _, c := range []struct {
		dtype, kv string
		tol       float64
	}{{"", "f32", 1e-4}, {"bf16", "f32", 1e-4}, {"q8", "bf16", 0.05}} {
		stdout.Reset()
		if code := dispatch(context.Background(), []string{"logits", "--model", dir, "--ids", strings.Join(ids, ","), "--top", "10", "--threads", "2", "--dtype", c.dtype}, &stdout, &stderr); code != 0 {
			t.Fatalf("dtype %q: exit %d: %s", c.dtype, code, stderr.String())
		}
		checkTop(t, c.dtype, stdout.Bytes(), &ref, c.tol)
		var head struct {
			KV string `json:"kv_cache"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &head); err != nil || head.KV != c.kv {
			t.Errorf("dtype %q: kv_cache %q (%v), want %q", c.dtype, head.KV, err, c.kv)
		}
	}
	// Full rows: two positions (causal, so equal to the first two of the eight-token run).
	stdout.Reset()
	if code := dispatch(context.Background(), []string{"logits", "--model", dir, "--ids", ids[0] + "," + ids[1]}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var full struct {
		Positions []struct {
			Logits []float64 `json:"logits"`
		} `json:"positions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &full); err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		row := full.Positions[p].Logits
		if len(row) != 151936 {
			t.Fatalf("position %d: %d logits", p, len(row))
		}
		for _, want := range ref.Positions[p].Top10 {
			if math.Abs(row[int(want[0])]-want[1]) > 1e-4 {
				t.Fatalf("position %d id %v: %v", p, want[0], row[int(want[0])])
			}
		}
	}
	for _, bad := range [][]string{{"--ids", "1,x"}, {"--ids", ""}, {"--ids", "1", "--dtype", "f7"}, {"--ids", "999999"}} {
		stderr.Reset()
		if code := dispatch(context.Background(), append([]string{"logits", "--model", dir}, bad...), &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d (%s)", bad, code, stderr.String())
		}
	}
}
