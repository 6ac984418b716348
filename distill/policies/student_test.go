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
	env := map[string]string{policies.EnvStudentTokenizer: shared.Path(t, "tokenizer/qwen2.5"), policies.EnvStudentThreads: "2", policies.EnvStudentMmap: "1"}
	sopts, err := policies.StudentEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	h, err := policies.Resolve("student:"+dir, policies.Options{Student: sopts})
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
	if _, err := policies.Resolve("student:"+t.TempDir(), policies.Options{Student: sopts}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("directory without a model: %v", err)
	}
}

// TestStudentEnv: every documented CHAINEDSQL_STUDENT_* form lands in its option, unset ones
// leave it zero, and a malformed value is an error naming its variable.
func TestStudentEnv(t *testing.T) {
	env := map[string]string{
		policies.EnvStudentTokenizer: "/tok", policies.EnvStudentDType: "q8", policies.EnvStudentThreads: "3",
		policies.EnvStudentMmap: "1", policies.EnvStudentBackend: "cuda", policies.EnvStudentCacheTokens: "-1",
		policies.EnvStudentKV: "bf16",
	}
	o, err := policies.StudentEnv(func(k string) string { return env[k] })
	if err != nil || o.Tokenizer != "/tok" || o.DType != "q8" || o.Threads != 3 || !o.Mmap || o.Backend != "cuda" || o.Generate.CacheTokens != -1 || o.KVCache != "bf16" {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err := policies.StudentEnv(func(string) string { return "" }); err != nil || o.Tokenizer != "" || o.Threads != 0 || o.Mmap || o.Generate.CacheTokens != 0 {
		t.Fatalf("unset: %+v %v", o, err)
	}
	env[policies.EnvStudentMmap] = "0"
	if o, err := policies.StudentEnv(func(k string) string { return env[k] }); err != nil || o.Mmap {
		t.Fatalf("mmap 0: %+v %v", o, err)
	}
	for k, v := range map[string]string{policies.EnvStudentThreads: "zero", policies.EnvStudentMmap: "yes", policies.EnvStudentCacheTokens: "lots", policies.EnvStudentKV: "f16"} {
		bad := map[string]string{k: v}
		if _, err := policies.StudentEnv(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
	if _, err := policies.Resolve("student:/x", policies.Options{}); err == nil {
		t.Error("student:/x resolved without a model")
	}
	if _, err := policies.Resolve("gpt-oss", policies.Options{}); err == nil || !strings.Contains(err.Error(), "no teachers") {
		t.Errorf("a teacher without a config: %v", err)
	}
}
