package tokenizer

import (
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// BenchmarkLoad measures loading the Qwen2.5 tokenizer.json (7 MB, 151k vocab and merges).
func BenchmarkLoad(b *testing.B) {
	dir := shared.Path(b, "tokenizer/qwen2.5")
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
