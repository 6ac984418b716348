package generate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/shared"
)

var tinyIDs = []int{151644, 872, 198, 9707, 11, 1879, 0, 151645}

// tinyGreedy reads the 16-token greedy continuation of tinyIDs that llama.cpp produced.
func tinyGreedy(t *testing.T, dir string) []int {
	f, err := os.Open(filepath.Join(dir, "reference_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ref struct {
		Greedy struct {
			Tokens []int `json:"tokens"`
		} `json:"greedy_continuation"`
	}
	if err := json.NewDecoder(f).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Greedy.Tokens) != 16 {
		t.Fatalf("reference continuation has %d tokens", len(ref.Greedy.Tokens))
	}
	return ref.Greedy.Tokens
}

// TestTinyModel drives the real Qwen2 forward pass: the reference greedy continuation, alone and
// in a batch of four, stopping on eos, and a second turn served from the kept cache.
func TestTinyModel(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := tinyGreedy(t, dir)
	g := newGen(t, m, generate.Config{StopIDs: m.EOS()})
	ctx := context.Background()

	res, err := g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want) {
		t.Fatalf("greedy continuation\n got %v\nwant %v", res.Tokens, want)
	}
	// With eos ids on, the first token (151645, <|im_end|>) ends the request.
	res, err = g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16})
	if err != nil || len(res.Tokens) != 0 || res.FinishReason != generate.FinishStop || res.StopID != 151645 {
		t.Fatalf("eos stop: %+v %v", res, err)
	}

	var wg sync.WaitGroup
	got := make([][]int, 4)
	for i := range got {
		wg.Go(func() {
			r, err := g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, IgnoreEOS: true})
			if err != nil {
				t.Error(err)
			}
			got[i] = r.Tokens
		})
	}
	wg.Wait()
	for i, toks := range got {
		if !slices.Equal(toks, want) {
			t.Fatalf("batched request %d: %v", i, toks)
		}
	}

	// Turn two re-sends the history: only the new tokens are prefilled, the output continues
	// the reference.
	prompt := append(slices.Clone(tinyIDs), want[:8]...)
	res, err = g.Generate(ctx, generate.Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.CachedTokens < len(tinyIDs) || !slices.Equal(res.Tokens, want[8:]) {
		t.Fatalf("second turn: cached %d, tokens %v, want %v", res.CachedTokens, res.Tokens, want[8:])
	}
}
