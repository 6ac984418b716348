//go:build !chainedsql_tokenizer

package curate

import (
	"strings"
	"sync"
	"testing"
)

// loadTokenizer returns a test double until inference/tokenizer is committed (then the tests
// run on the real Qwen2.5 tokenizer with -tags chainedsql_tokenizer, tok_real_test.go).
//
// The double has the properties curate relies on: ChatML markers are single special tokens
// split out first, text is cut into runs of ASCII letters, runs of spaces and newlines (so, as
// with Qwen's pre-tokenizer, the header's "\n" joins a content's leading newlines), and single
// bytes; ids decode back to the text.
func loadTokenizer(tb testing.TB) Tokenizer {
	return &doubleTok{vocab: map[string]int{"<|im_start|>": 0, "<|im_end|>": 1}, inv: []string{"<|im_start|>", "<|im_end|>"}}
}

type doubleTok struct {
	mu    sync.Mutex
	vocab map[string]int
	inv   []string
}

func (t *doubleTok) TokenID(s string) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.vocab[s]
	return id, ok && id < 2
}

func (t *doubleTok) Encode(s string) []int { ids, _ := t.EncodeOffsets(s); return ids }

func (t *doubleTok) EncodeOffsets(s string) ([]int, []Offset) {
	var ids []int
	var offs []Offset
	letter := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
	space := func(b byte) bool { return b == ' ' || b == '\n' }
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < len(s); {
		j := i + 1
		switch {
		case strings.HasPrefix(s[i:], "<|im_start|>"):
			j = i + len("<|im_start|>")
		case strings.HasPrefix(s[i:], "<|im_end|>"):
			j = i + len("<|im_end|>")
		case letter(s[i]):
			for j < len(s) && letter(s[j]) {
				j++
			}
		case space(s[i]):
			for j < len(s) && space(s[j]) {
				j++
			}
		}
		id, ok := t.vocab[s[i:j]]
		if !ok {
			id = len(t.inv)
			t.vocab[s[i:j]] = id
			t.inv = append(t.inv, s[i:j])
		}
		ids = append(ids, id)
		offs = append(offs, Offset{i, j})
		i = j
	}
	return ids, offs
}

func (t *doubleTok) Decode(ids []int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.inv[id])
	}
	return b.String()
}
