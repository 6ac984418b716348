package student

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
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
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Fatalf("no tokenizer: %v", err)
	}
	if _, err := Open(dir, Options{Tokenizer: shared.Path(t, "tokenizer/qwen2.5"), DType: "f8"}); err == nil || !strings.Contains(err.Error(), "f8") {
		t.Fatalf("bad dtype: %v", err)
	}
	if _, err := Open(t.TempDir()+"/nope", Options{}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing dir: %v", err)
	}
}
