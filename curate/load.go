package curate

import (
	"context"
	"fmt"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
)

// LoadTokenizer loads a tokenizer.json (or the directory holding one) as a curate Tokenizer.
func LoadTokenizer(path string) (Tokenizer, error) {
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	return Adapt(tok), nil
}

// Verify recomputes every row's token counts with the tokenizer at tokenizerPath and compares
// them with the stored ones. See VerifyWith.
func Verify(ctx context.Context, dir, tokenizerPath string) (*VerifyReport, error) {
	tok, err := LoadTokenizer(tokenizerPath)
	if err != nil {
		return nil, fmt.Errorf("curate verify: %w", err)
	}
	return VerifyWith(ctx, dir, tok, 0)
}
