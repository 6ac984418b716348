package policies_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/internal/shared"
)

func TestStudentPolicy(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	t.Setenv(policies.EnvStudentTokenizer, shared.Path(t, "tokenizer/qwen2.5"))
	t.Setenv(policies.EnvStudentThreads, "zero")
	if _, err := policies.Resolve("student:"+dir, nil); err == nil || !strings.Contains(err.Error(), policies.EnvStudentThreads) {
		t.Fatalf("bad thread count: %v", err)
	}
	t.Setenv(policies.EnvStudentThreads, "2")
	t.Setenv(policies.EnvStudentMmap, "yes")
	if _, err := policies.Resolve("student:"+dir, nil); err == nil || !strings.Contains(err.Error(), policies.EnvStudentMmap) {
		t.Fatalf("bad mmap setting: %v", err)
	}
	t.Setenv(policies.EnvStudentMmap, "1")
	h, err := policies.Resolve("student:"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "student-tiny-qwen2-f32" || h.Model != "tiny-qwen2-f32" || h.Close == nil {
		t.Fatalf("handle %+v", h)
	}
	r, err := h.Policy.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "Hi"}}, chat.Options{MaxTokens: 3})
	if err != nil || r.Usage.PromptTokens == 0 || r.Model != "tiny-qwen2-f32" {
		t.Fatalf("chat: %+v %v", r, err)
	}
	if h.Stats == nil {
		t.Fatal("student handle has no Stats for usage.json")
	}
	// The reply can arrive before the generator has counted its last token, so only the
	// admission counters are exact here.
	b, err := json.Marshal(h.Stats())
	var st map[string]int
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || st["requests"] != 1 || st["prompt_tokens"] != r.Usage.PromptTokens || st["generated"] < 1 {
		t.Fatalf("client stats %s (%v), want 1 request of %d prompt tokens", b, err, r.Usage.PromptTokens)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Resolve("student:"+t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("directory without a model: %v", err)
	}
}
