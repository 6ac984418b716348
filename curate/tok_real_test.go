package curate

import (
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

var (
	tokOnce sync.Once
	tokReal *tokenizer.Tokenizer
	tokErr  error
)

// loadTokenizer loads the shared Qwen2.5 tokenizer (skips when shared data is absent). It is
// loaded once per test binary: a Tokenizer is safe for concurrent use, and loading the 7 MB
// tokenizer.json takes most of a second.
func loadTokenizer(tb testing.TB) Tokenizer {
	tb.Helper()
	p := shared.Path(tb, "tokenizer/qwen2.5/tokenizer.json")
	tokOnce.Do(func() { tokReal, tokErr = tokenizer.Load(p) })
	if tokErr != nil {
		tb.Fatalf("load tokenizer: %v", tokErr)
	}
	return Adapt(tokReal)
}
