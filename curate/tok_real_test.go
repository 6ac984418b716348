//go:build chainedsql_tokenizer

package curate

import (
	"testing"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// loadTokenizer loads the shared Qwen2.5 tokenizer (skips when shared data is absent).
func loadTokenizer(tb testing.TB) Tokenizer {
	tb.Helper()
	p := shared.Path(tb, "tokenizer/qwen2.5/tokenizer.json")
	tok, err := tokenizer.Load(p)
	if err != nil {
		tb.Fatalf("load tokenizer: %v", err)
	}
	return Adapt(tok)
}
