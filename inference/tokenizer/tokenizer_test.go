package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/internal/shared"
	"golang.org/x/text/unicode/norm"
)

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen loads the shared Qwen2.5 tokenizer once per test binary (skips when it is absent).
func qwen(tb testing.TB) *Tokenizer {
	tb.Helper()
	dir := shared.Path(tb, "tokenizer/qwen2.5")
	qwenOnce.Do(func() { qwenTok, qwenErr = Load(dir) })
	if qwenErr != nil {
		tb.Fatalf("Load(%s): %v", dir, qwenErr)
	}
	return qwenTok
}

type goldenLine struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readGolden(tb testing.TB, rel string) []goldenLine {
	tb.Helper()
	f, err := os.Open(shared.Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		var g goldenLine
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			tb.Fatalf("%s line %d: %v", rel, n, err)
		}
		if g.IDs == nil {
			tb.Fatalf("%s line %d: no ids", rel, n)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(out) == 0 {
		tb.Fatalf("%s: no lines", rel)
	}
	return out
}

// TestGolden checks every line of the golden files, produced by Hugging Face's tokenizers,
// for ids, offsets and the round trip.
func TestGolden(t *testing.T) {
	tok := qwen(t)
	for _, rel := range []string{"tokenizer/golden.jsonl", "tokenizer/golden_hf_divergent.jsonl"} {
		lines := readGolden(t, rel)
		bad := 0
		for i, g := range lines {
			got := tok.Encode(g.Text)
			if !slices.Equal(got, g.IDs) {
				bad++
				if bad <= 10 {
					t.Errorf("%s line %d %q:\n got  %v\n want %v", rel, i+1, g.Text, got, g.IDs)
				}
				continue
			}
			ids, offs := tok.EncodeOffsets(g.Text)
			if !slices.Equal(ids, g.IDs) {
				t.Errorf("%s line %d: EncodeOffsets ids %v differ from Encode %v", rel, i+1, ids, got)
			}
			checkOffsets(t, tok, g.Text, ids, offs)
			if want := norm.NFC.String(g.Text); tok.Decode(ids) != want && !hasAdded(tok, g.Text) {
				t.Errorf("%s line %d: Decode = %q, want %q", rel, i+1, tok.Decode(ids), want)
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d lines differ", rel, bad, len(lines))
		}
		t.Logf("%s: %d lines", rel, len(lines))
	}
}

func hasAdded(tok *Tokenizer, s string) bool {
	for c := range tok.AddedIDs() {
		if strings.Contains(s, c) {
			return true
		}
	}
	return false
}

// checkOffsets checks that offs tile text and, where text is NFC already, that each range
// holds exactly the token's bytes.
func checkOffsets(tb testing.TB, tok *Tokenizer, text string, ids []int, offs []Offset) {
	tb.Helper()
	if len(offs) != len(ids) {
		tb.Fatalf("%q: %d offsets for %d ids", text, len(offs), len(ids))
	}
	pos := 0
	for i, o := range offs {
		if o.Start != pos || o.End < o.Start || o.End > len(text) {
			tb.Fatalf("%q: offset %d is %v after position %d", text, i, o, pos)
		}
		pos = o.End
	}
	if pos != len(text) {
		tb.Fatalf("%q: offsets end at %d of %d", text, pos, len(text))
	}
	if norm.NFC.IsNormalString(text) {
		for i, o := range offs {
			if text[o.Start:o.End] != tok.TokenBytes(ids[i]) {
				tb.Fatalf("%q: token %d (id %d, %q) has range %v = %q", text, i, ids[i], tok.TokenBytes(ids[i]), o, text[o.Start:o.End])
			}
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := qwen(t)
	for _, c := range []struct {
		tok string
		id  int
	}{{"<|endoftext|>", 151643}, {"<|im_start|>", 151644}, {"<|im_end|>", 151645}, {"<tool_call>", 151657}, {"Ġthe", 279}, {"a", 64}} {
		if id, ok := tok.TokenID(c.tok); !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.tok, id, ok, c.id)
		}
	}
	if _, ok := tok.TokenID("no such token"); ok {
		t.Error("TokenID found a token that does not exist")
	}
	text := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>"
	ids := tok.Encode(text)
	want := []int{151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198, 151657, 87, 151658, 151645}
	if !slices.Equal(ids, want) {
		t.Fatalf("Encode(%q) = %v, want %v", text, ids, want)
	}
	if got := tok.Decode(ids); got != text {
		t.Fatalf("Decode = %q, want %q", got, text)
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(151657) || tok.IsSpecial(64) {
		t.Error("IsSpecial wrong for <|im_end|>, <tool_call> or a")
	}
	if n := tok.VocabSize(); n != 151665 {
		t.Errorf("VocabSize = %d, want 151665", n)
	}
	// Leftmost-longest: a longer added token sharing a prefix wins, a partial one is text.
	if ids := tok.Encode("<|im_start"); slices.Contains(ids, 151644) {
		t.Errorf("partial marker encoded as the special token: %v", ids)
	}
}

// TestNFCOffsets checks that text NFC rewrites is encoded as its normal form and that the
// offsets still tile the original text, the rewritten stretch going to its first token.
func TestNFCOffsets(t *testing.T) {
	tok := qwen(t)
	for _, text := range []string{
		"cafe\u0301 au lait", "e\u0301", "SELECT 'Ame\u0301lie' FROM t", "\u1100\u1161\u11a8 x",
		"a\u0323\u0307b", "x<|im_end|>\u0301y", "\u0301", "Å and Å",
	} {
		ids, offs := tok.EncodeOffsets(text)
		if want := tok.Encode(text); !slices.Equal(ids, want) {
			t.Fatalf("%q: EncodeOffsets ids %v, Encode %v", text, ids, want)
		}
		checkOffsets(t, tok, text, ids, offs)
		if !hasAdded(tok, text) {
			if nf := norm.NFC.String(text); !slices.Equal(ids, tok.Encode(nf)) {
				t.Errorf("%q: ids differ from those of its NFC form %q", text, nf)
			}
			if got, want := tok.Decode(ids), norm.NFC.String(text); got != want {
				t.Errorf("%q: Decode = %q, want %q", text, got, want)
			}
		}
	}
}

// TestPieces checks the pre-tokenizer scanner on the alternatives of the Qwen2 pattern,
// including the backtracking cases (A4's optional space, A5's last newline, A6's lookahead).
func TestPieces(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"it's", []string{"it", "'s"}},
		{"IT'S we'RE they'Ll I'ſ", []string{"IT", "'S", " we", "'RE", " they", "'Ll", " I", "'ſ"}},
		{"'sa 'x", []string{"'s", "a", " '", "x"}},
		{"hello world", []string{"hello", " world"}},
		{"\tword \u00a0nb", []string{"\tword", " ", "\u00a0nb"}},
		{"x\ny", []string{"x", "\n", "y"}},
		{"12345", []string{"1", "2", "3", "4", "5"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"a \n\n  b", []string{"a", " \n\n", " ", " b"}},
		{"x = 1;\n", []string{"x", " =", " ", "1", ";\n"}},
		{" +++\r\n\r\nz", []string{" +++\r\n\r\n", "z"}},
		{"(a)", []string{"(a", ")"}},
		{"  (", []string{" ", " ("}},
		{" \u0085y", []string{" ", "\u0085y"}},
		{" \ufeffy", []string{" \ufeff", "y"}},
		{"中文字符 テスト", []string{"中文字符", " テスト"}},
		{"\r\n", []string{"\r\n"}},
		{"a\t\tb", []string{"a", "\t", "\tb"}},
		{"\xff\xfeab", []string{"\xff\xfe", "ab"}},
	} {
		var got []string
		for i := 0; i < len(c.in); {
			j := nextPiece(c.in, i)
			if j <= i {
				t.Fatalf("%q: no progress at %d", c.in, i)
			}
			got = append(got, c.in[i:j])
			i = j
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("pieces(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestBPELinearMatchesHeap checks the two merge loops against each other on real text and on
// long runs that force many merges.
func TestBPELinearMatchesHeap(t *testing.T) {
	tok := qwen(t)
	st := &state{}
	words := []string{" the", "SELECT", " information_schema", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		strings.Repeat(" ", 100), strings.Repeat("ab", 40), "中文字符中文字符中文字符中文字符中文字符", "\xff\x00\x01"}
	for _, g := range readGolden(t, "tokenizer/golden.jsonl") {
		for i := 0; i < len(g.Text); {
			j := nextPiece(g.Text, i)
			words = append(words, g.Text[i:j])
			i = j
		}
	}
	for _, w := range words {
		var lin []int32
		if len(w) <= longWord {
			lin = slices.Clone(tok.bpe(st, w, nil))
		} else {
			lin = slices.Clone(tok.bpeLinear(st, w, nil))
		}
		hp := tok.bpeHeap(st, w, nil)
		if !slices.Equal(lin, hp) {
			t.Fatalf("%q: linear %v, heap %v", w, lin, hp)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tok := qwen(t)
	for _, s := range []string{
		"", "SELECT COUNT(*) FROM \"frpm\" WHERE `County Name` = 'Alameda';",
		"<think>\nLet me check.\n</think>\n<sql>SELECT 1</sql>", "emoji 👩‍👩‍👧‍👦 and flags 🇨🇳",
		"tabs\tand\u3000ideographic spaces", "\n\n\n", strings.Repeat("long ", 1000),
	} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("round trip %q = %q", s, got)
		}
	}
	// Decode of ids that split a character replaces the broken sequence, as HF does.
	ids := tok.Encode("é")
	if len(ids) != 1 {
		t.Skip("é is one token")
	}
	if got := tok.Decode([]int{tok.byteIDOf(0xC3)}); got != "\uFFFD" {
		t.Errorf("Decode of a lone lead byte = %q, want U+FFFD", got)
	}
	if got := tok.Decode([]int{-1, 1 << 30}); got != "" {
		t.Errorf("Decode of unknown ids = %q, want empty", got)
	}
}

func (t *Tokenizer) byteIDOf(b byte) int { return int(t.byteID[b]) }

func TestConcurrent(t *testing.T) {
	tok := qwen(t)
	lines := readGolden(t, "tokenizer/golden.jsonl")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 {
				for i := (w + k) % 7; i < len(lines); i += 3 {
					if got := tok.Encode(lines[i].Text); !slices.Equal(got, lines[i].IDs) {
						t.Errorf("goroutine %d: line %d differs", w, i+1)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// tinyTokenizer returns a small tokenizer.json in the Qwen2 layout, as a JSON tree: the 256
// byte tokens, merges building "Ġthe", "in" and "ing", and two added tokens.
func tinyTokenizer() map[string]any {
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	merges := []any{}
	for i, m := range [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"in", "g"}} {
		vocab[m[0]+m[1]] = 256 + i
		merges = append(merges, []any{m[0], m[1]})
	}
	bl := func() map[string]any {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	}
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": []any{
			map[string]any{"id": 300, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
			map[string]any{"id": 301, "content": "<|im_end|>x", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			bl(),
		}},
		"post_processor": bl(), "decoder": bl(),
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
}

// writeTokenizer writes m as tokenizer.json in a fresh directory and returns its path.
func writeTokenizer(t *testing.T, m map[string]any) string {
	t.Helper()
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := t.TempDir() + "/tokenizer.json"
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTinyTokenizer(t *testing.T) {
	m := tinyTokenizer()
	tok, err := Load(writeTokenizer(t, m))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{
		"the thing":                 {'t', 257, 256, 'h', 260},
		" the<|im_end|>x<|im_end|>": {258, 301, 300},
		"e\u0301":                   {0xc3, 0xa9}, // NFC makes é, bytes C3 A9 (no merge)
	}
	check := func(tok *Tokenizer, form string) {
		for text, ids := range want {
			// byte tokens have the ids of their bytes only where the byte maps to itself
			exp := make([]int, len(ids))
			for i, id := range ids {
				exp[i] = id
				if id < 256 {
					exp[i] = int(tok.byteID[id])
				}
			}
			if got := tok.Encode(text); !slices.Equal(got, exp) {
				t.Errorf("%s merges: Encode(%q) = %v, want %v", form, text, got, exp)
			}
		}
	}
	check(tok, "pair")
	// The same merges written as "a b" strings load to the same tokenizer.
	ms := m["model"].(map[string]any)["merges"].([]any)
	for i, x := range ms {
		pair := x.([]any)
		ms[i] = pair[0].(string) + " " + pair[1].(string)
	}
	tok2, err := Load(writeTokenizer(t, m))
	if err != nil {
		t.Fatalf("string merges: %v", err)
	}
	check(tok2, "string")
	// ignore_merges: a piece that is a vocab token is that token, whatever the merges say.
	m = tinyTokenizer()
	vocab := m["model"].(map[string]any)["vocab"].(map[string]any)
	vocab["xyz"] = 400
	for _, ignore := range []bool{false, true} {
		m["model"].(map[string]any)["ignore_merges"] = ignore
		tok, err := Load(writeTokenizer(t, m))
		if err != nil {
			t.Fatal(err)
		}
		want := []int{int(tok.byteID['x']), int(tok.byteID['y']), int(tok.byteID['z'])}
		if ignore {
			want = []int{400}
		}
		if got := tok.Encode("xyz"); !slices.Equal(got, want) {
			t.Errorf("ignore_merges=%v: Encode(xyz) = %v, want %v", ignore, got, want)
		}
	}
	// The directory form finds tokenizer.json.
	p := writeTokenizer(t, tinyTokenizer())
	if _, err := Load(p[:strings.LastIndexByte(p, '/')]); err != nil {
		t.Fatalf("Load(dir): %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	sub := func(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }
	pre := func(m map[string]any, i int) map[string]any {
		return sub(m, "pre_tokenizer")["pretokenizers"].([]any)[i].(map[string]any)
	}
	for _, c := range []struct {
		name, want string
		f          func(m map[string]any)
	}{
		{"unknown top field", `unknown field "extra"`, func(m map[string]any) { m["extra"] = 1 }},
		{"truncation", "truncation: unsupported", func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 5} }},
		{"no model", "model: missing", func(m map[string]any) { delete(m, "model") }},
		{"model type", `model.type: unsupported "Unigram"`, func(m map[string]any) { sub(m, "model")["type"] = "Unigram" }},
		{"model field", `model: unknown field "frobnicate"`, func(m map[string]any) { sub(m, "model")["frobnicate"] = true }},
		{"dropout", "model.dropout: unsupported 0.1", func(m map[string]any) { sub(m, "model")["dropout"] = 0.1 }},
		{"byte fallback", "model.byte_fallback: unsupported true", func(m map[string]any) { sub(m, "model")["byte_fallback"] = true }},
		{"missing byte", "model.vocab: lacks the byte-level token", func(m map[string]any) { delete(sub(m, "model")["vocab"].(map[string]any), "!") }},
		{"normalizer", `normalizer: unsupported type "NFKC"`, func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"normalizer field", `normalizer: unknown field "x"`, func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFC", "x": 1} }},
		{"pre_tokenizer", "pre_tokenizer: missing", func(m map[string]any) { m["pre_tokenizer"] = nil }},
		{"pattern", "pre_tokenizer.pretokenizers[0].pattern: unsupported", func(m map[string]any) { pre(m, 0)["pattern"] = map[string]any{"Regex": `\w+`} }},
		{"behavior", `pre_tokenizer.pretokenizers[0].behavior: unsupported "Removed"`, func(m map[string]any) { pre(m, 0)["behavior"] = "Removed" }},
		{"prefix space", "pre_tokenizer.pretokenizers[1].add_prefix_space: unsupported true", func(m map[string]any) { pre(m, 1)["add_prefix_space"] = true }},
		{"decoder", `decoder: unsupported type "WordPiece"`, func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }},
		{"post processor", `post_processor: unsupported type "TemplateProcessing"`, func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "TemplateProcessing"}
		}},
		{"lstrip", `added_tokens[0] ("<|im_end|>"): lstrip=true`, func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true }},
		{"added field", `added_tokens[1]: unknown field "weird"`, func(m map[string]any) { m["added_tokens"].([]any)[1].(map[string]any)["weird"] = true }},
		{"merge unknown", `model.merges[0] ("Ġ" "nope") names unknown token "nope"`, func(m map[string]any) {
			sub(m, "model")["merges"].([]any)[0] = []any{"Ġ", "nope"}
		}},
		{"merge result", `model.merges[1] ("h" "i") produces unknown token "hi"`, func(m map[string]any) {
			sub(m, "model")["merges"].([]any)[1] = []any{"h", "i"}
		}},
		{"merge form", `model.merges[1] "a b c": want two tokens`, func(m map[string]any) {
			sub(m, "model")["merges"] = []any{"Ġ t", "a b c"}
		}},
		{"merge triple", `model.merges[0]: want two tokens, not 3`, func(m map[string]any) {
			sub(m, "model")["merges"].([]any)[0] = []any{"a", "b", "c"}
		}},
	} {
		m := tinyTokenizer()
		c.f(m)
		p := writeTokenizer(t, m)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: Load error %v, want one naming %s and containing %q", c.name, err, p, c.want)
		}
	}
	if _, err := Load(t.TempDir() + "/missing"); err == nil {
		t.Error("Load of a missing path succeeded")
	}
	bad := t.TempDir() + "/tokenizer.json"
	if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "malformed JSON") {
		t.Errorf("malformed file: %v", err)
	}
}

func FuzzEncode(f *testing.F) {
	tok := qwen(f)
	for _, s := range []string{"", "hello world", "SELECT * FROM t WHERE a >= 1;\n", "it's 'RE", " \u0085y", " \ufeffx",
		"e\u0301\u0323", "<|im_start|>user\nx<|im_end|>", "\t\t\n \n  x", "中文 テスト 한국어", "\xff\xc3", "𑏅", "12.5e-3",
		"\u1100\u1161\u11a8", "<|im_end|>\u0301", strings.Repeat("a", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, offs := tok.EncodeOffsets(s)
		if plain := tok.Encode(s); !slices.Equal(ids, plain) {
			t.Fatalf("%q: EncodeOffsets ids %v, Encode %v", s, ids, plain)
		}
		checkOffsets(t, tok, s, ids, offs)
		if !utf8.ValidString(s) {
			return
		}
		got := tok.Decode(ids)
		if norm.NFC.IsNormalString(s) {
			if got != s {
				t.Fatalf("round trip %q = %q", s, got)
			}
		} else if !hasAdded(tok, s) {
			if want := norm.NFC.String(s); got != want {
				t.Fatalf("round trip of non-NFC %q = %q, want its NFC form %q", s, got, want)
			}
		}
	})
}

// TestPiecesAgainstRegex checks the scanner on 3,000 random texts split by Python's regex
// module, a backtracking engine with lookahead (testdata/gen_pieces.py wrote the file).
func TestPiecesAgainstRegex(t *testing.T) {
	type line struct {
		Text   string   `json:"text"`
		Pieces []string `json:"pieces"`
	}
	for n, c := range readTestdata[line](t, "pieces.jsonl", 3000) {
		var got []string
		for i := 0; i < len(c.Text); {
			j := nextPiece(c.Text, i)
			got = append(got, c.Text[i:j])
			i = j
		}
		if !slices.Equal(got, c.Pieces) {
			t.Errorf("line %d: pieces(%q) = %q, want %q", n+1, c.Text, got, c.Pieces)
		}
	}
}

// readTestdata reads testdata/name, one JSON value a line, and fails below min lines.
func readTestdata[T any](tb testing.TB, name string, min int) []T {
	tb.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			tb.Fatalf("%s line %d: %v", name, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil || len(out) < min {
		tb.Fatalf("read %d lines of %s: %v", len(out), name, err)
	}
	return out
}

// TestEncodeSplitSpecial checks HF's split_special_tokens=True: every golden text without a
// special token's text gets its golden ids (non-special added tokens such as <tool_call> stay
// one id), and the special tokens' text is encoded as plain text, ids built from golden pieces.
func TestEncodeSplitSpecial(t *testing.T) {
	tok := qwen(t)
	specials := tok.SpecialIDs()
	hasSpecial := func(s string) bool {
		for c := range specials {
			if strings.Contains(s, c) {
				return true
			}
		}
		return false
	}
	same, split := 0, 0
	for _, rel := range []string{"tokenizer/golden.jsonl", "tokenizer/golden_hf_divergent.jsonl"} {
		for i, g := range readGolden(t, rel) {
			got := tok.EncodeSplitSpecial(g.Text)
			if !hasSpecial(g.Text) {
				same++
				if !slices.Equal(got, g.IDs) {
					t.Errorf("%s line %d %q: EncodeSplitSpecial = %v, want the golden %v", rel, i+1, g.Text, got, g.IDs)
				}
				continue
			}
			split++
			for _, id := range got {
				if tok.IsSpecial(id) {
					t.Errorf("%s line %d %q: EncodeSplitSpecial gave the control id %d: %v", rel, i+1, g.Text, id, got)
					break
				}
			}
			if want := norm.NFC.String(g.Text); tok.Decode(got) != want {
				t.Errorf("%s line %d: Decode(EncodeSplitSpecial) = %q, want %q", rel, i+1, tok.Decode(got), want)
			}
		}
	}
	t.Logf("%d golden texts unchanged, %d with special tokens encoded as text", same, split)
	// Pre-tokens "<|", "im", "_start" (golden "<|im_start": 27 91 318 4906), "|>" (golden
	// "<|IM_START|>": … 91 29), "endoftext" (golden "<|endoftext|": … 8691 723 427 91); "|>\n"
	// is one pre-token, 91 397 (golden "<observation>\n": … 397).
	for text, want := range map[string][]int{
		"<|im_start|>":                        {27, 91, 318, 4906, 91, 29},
		"<|endoftext|>":                       {27, 91, 8691, 723, 427, 91, 29},
		"a<|im_end|>b":                        {64, 27, 91, 318, 6213, 91, 29, 65},
		"<tool_call><|im_start|>":             {151657, 27, 91, 318, 4906, 91, 29},
		"<|im_start|>user\nHello<|im_end|>\n": {27, 91, 318, 4906, 91, 29, 872, 198, 9707, 27, 91, 318, 6213, 91, 397},
	} {
		if got := tok.EncodeSplitSpecial(text); !slices.Equal(got, want) {
			t.Errorf("EncodeSplitSpecial(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestSplitSpecialPassesOver checks HF's rule that a special token found in split mode is passed
// over whole: an added token inside it is not matched again.
func TestSplitSpecialPassesOver(t *testing.T) {
	m := tinyTokenizer()
	m["added_tokens"] = append(m["added_tokens"].([]any),
		map[string]any{"id": 302, "content": "<|q|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		map[string]any{"id": 303, "content": "q", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false})
	tok, err := Load(writeTokenizer(t, m))
	if err != nil {
		t.Fatal(err)
	}
	b := func(s string) []int {
		var ids []int
		for i := range len(s) {
			ids = append(ids, int(tok.byteID[s[i]]))
		}
		return ids
	}
	for text, want := range map[string][]int{
		"<|q|>":         b("<|q|>"),
		"q<|q|>q":       append(append([]int{303}, b("<|q|>")...), 303),
		"<|im_end|>x":   {301}, // not special: split out in both modes
		"<|im_end|><|q": slices.Concat(b("<|im_end|>"), b("<|"), []int{303}),
	} {
		if got := tok.EncodeSplitSpecial(text); !slices.Equal(got, want) {
			t.Errorf("EncodeSplitSpecial(%q) = %v, want %v", text, got, want)
		}
	}
	if got := tok.Encode("<|q|>"); !slices.Equal(got, []int{302}) {
		t.Errorf("Encode(<|q|>) = %v, want [302]", got)
	}
}

// TestSplitSpecialAgainstJS checks EncodeSplitSpecial on 120 hostile texts (special tokens' text
// at the edges, doubled, cut short, split by a zero-width joiner, NFC-sensitive, next to \r\n,
// in long runs, beside <tool_call>) against Hugging Face's JS port of tokenizers with special
// tokens not split out (testdata/gen_split_special.mjs wrote the file); Encode against the
// port's plain encode, which shows the port agrees with this tokenizer at all.
func TestSplitSpecialAgainstJS(t *testing.T) {
	tok := qwen(t)
	type line struct {
		Text  string `json:"text"`
		IDs   []int  `json:"ids"`
		Split []int  `json:"split"`
	}
	for n, c := range readTestdata[line](t, "split_special.jsonl", 100) {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("line %d: Encode(%q) = %v, want %v", n+1, c.Text, got, c.IDs)
		}
		if got := tok.EncodeSplitSpecial(c.Text); !slices.Equal(got, c.Split) {
			t.Errorf("line %d: EncodeSplitSpecial(%q) = %v, want %v", n+1, c.Text, got, c.Split)
		}
	}
}
