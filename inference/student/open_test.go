package student

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/internal/shared"
)

func openTiny(t *testing.T) *Student {
	t.Helper()
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	tok := shared.Path(t, "tokenizer/qwen2.5")
	s, err := Open(dir, Options{Tokenizer: tok, Sampling: Sampling{MaxTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenTinyChat(t *testing.T) {
	s := openTiny(t)
	if s.ModelID() != "tiny-qwen2-f32" {
		t.Fatalf("model id %q", s.ModelID())
	}
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "Hello, world!"}}
	r, err := s.Chat(context.Background(), msgs, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := s.Prompt(msgs)
	if err != nil {
		t.Fatal(err)
	}
	// The prompt is the ChatML rendering: <|im_start|>system ... <|im_start|>assistant\n.
	if prompt[0] != 151644 || prompt[len(prompt)-1] != 198 || r.Usage.PromptTokens != len(prompt) {
		t.Fatalf("prompt %v, usage %+v", prompt, r.Usage)
	}
	// The reply is the greedy continuation, decoded, up to the first stop token.
	res, err := s.Generator().Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if want := s.Tokenizer().Decode(res.Tokens); r.Content != want {
		t.Fatalf("chat %q, direct generation %q", r.Content, want)
	}
	wantReason := chat.FinishLength
	if res.FinishReason == generate.FinishStop {
		wantReason = chat.FinishStop
	}
	if r.FinishReason != wantReason {
		t.Fatalf("finish %q, generation %q", r.FinishReason, res.FinishReason)
	}
	// Sampled replies are reproducible with a seed.
	o := chat.Options{Temperature: chat.Float(1), TopP: chat.Float(0.9), Seed: chat.Int64(7), MaxTokens: 6}
	a, err := s.Chat(context.Background(), msgs, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Chat(context.Background(), msgs, o)
	if err != nil || a.Content != b.Content {
		t.Fatalf("seeded replies differ: %q vs %q (%v)", a.Content, b.Content, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrNoTokenizer) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("no tokenizer: %v", err)
	}
	if _, err := Open(dir, Options{Tokenizer: shared.Path(t, "tokenizer/qwen2.5"), DType: "f8"}); err == nil || !strings.Contains(err.Error(), "f8") {
		t.Fatalf("bad dtype: %v", err)
	}
	if _, err := Open(t.TempDir()+"/nope", Options{}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing dir: %v", err)
	}
}

// TestLoadModelKVCache: KVCache reaches the CPU model (a bf16 cache holds half the bytes of an
// f32 one for the same tokens), a bad type is an error naming it, and the CUDA backends, whose
// cache is bf16, refuse "f32".
func TestLoadModelKVCache(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	bytesFor := func(kv string) int64 {
		m, err := LoadModel(dir, Options{KVCache: kv})
		if err != nil {
			t.Fatalf("KVCache %q: %v", kv, err)
		}
		defer m.Close()
		c, err := m.NewCache(16)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		if err := m.Forward(context.Background(), []lm.Step{{Cache: c, Tokens: []int{1, 2, 3}}}); err != nil {
			t.Fatal(err)
		}
		kb, ok := m.(interface{ KVBlocks() (int, int64) })
		if !ok {
			t.Fatalf("%T has no KVBlocks", m)
		}
		_, b := kb.KVBlocks()
		return b
	}
	if f32, bf16 := bytesFor(""), bytesFor("bf16"); f32 == 0 || bf16*2 != f32 {
		t.Errorf("KV bytes: f32 %d, bf16 %d; want bf16 half of f32", f32, bf16)
	}
	if _, err := LoadModel(dir, Options{KVCache: "f16"}); err == nil || !strings.Contains(err.Error(), "f16") {
		t.Errorf("KVCache f16: %v", err)
	}
	if _, err := LoadModel(dir, Options{KVCache: "f32", Backend: "cuda-emulated"}); err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Errorf("cuda-emulated with an f32 KV cache: %v", err)
	}
}
