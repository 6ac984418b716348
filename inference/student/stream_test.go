package student

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestTextStreamDecodes: through the Qwen2.5 tokenizer, textStream fed random mixes of
// single-byte tokens (lead bytes, continuation bytes, invalid bytes, ASCII), tokens that hold
// part of a character, whole tokens and U+FFFD itself emits the tokenizer's decoding of the ids
// it consumed, each piece extending a prefix of it, cut at the first stop string (or, keeping
// it, through the token that completed it, with the bytes of a character that token began),
// one entry per id; and it never holds more than the 3 bytes of a character not yet complete,
// however many tokens they came in or however long a run of lead bytes is.
func TestTextStreamDecodes(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	single := byteIDs(t, tok)
	var partial []int // tokens whose bytes are not UTF-8 (part of a character)
	for id := range tok.VocabSize() {
		if b := tok.TokenBytes(id); len(b) > 1 && !utf8.ValidString(b) {
			partial = append(partial, id)
		}
	}
	interesting := []byte("a \xc2\xc3\xe0\xe4\xed\xef\xf0\xf4\x80\x8f\x9f\xa0\xb8\xbf\xc0\xf5\xff")
	plain := tok.Encode("SELECT 中文 😀 \uFFFD</sql>👨‍👩‍👧")
	stopSets := [][]string{nil, {"</sql>"}, {"😀"}, {"\uFFFD"}, {"中", "\xff"}}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 3000 {
		var ids []int
		for range rng.IntN(40) {
			switch rng.IntN(4) {
			case 0, 1:
				ids = append(ids, single[interesting[rng.IntN(len(interesting))]])
			case 2:
				ids = append(ids, partial[rng.IntN(len(partial))])
			default:
				ids = append(ids, plain[rng.IntN(len(plain))])
			}
		}
		stops, keep := stopSets[run%len(stopSets)], run%2 == 1
		var out strings.Builder
		var entries int
		ts := &textStream{tok: tok, stops: stops, keepStop: keep, logProbs: true, emit: func(text string, lps []TokenLogProb) error {
			out.WriteString(text)
			entries += len(lps)
			return nil
		}}
		for _, id := range ids {
			hit, err := ts.add([]generate.Token{{ID: id}})
			if err != nil {
				t.Fatal(err)
			}
			if len(ts.open) > 3 {
				t.Fatalf("%q: %d bytes held", tok.Decode(ids), len(ts.open))
			}
			if d := tok.Decode(ids[:ts.ids]); !strings.HasPrefix(d, out.String()) {
				t.Fatalf("%q: emitted %q, not a prefix of the decoding %q", tok.Decode(ids), out.String(), d)
			}
			if hit {
				break
			}
		}
		if err := ts.flush(); err != nil {
			t.Fatal(err)
		}
		stopped := ts.stopped
		whole := tok.Decode(ids[:ts.ids])
		want := whole
		if cut := firstStop(whole, stops); stopped && !keep {
			want = whole[:cut]
		} else if !stopped && cut >= 0 {
			t.Errorf("%q (ids %v): stops %q not found", whole, ids, stops)
		}
		if out.String() != want || ts.text.String() != want {
			t.Errorf("ids %v, stops %q, keep %v: emitted %q, want %q", ids, stops, keep, out.String(), want)
		}
		if entries+len(ts.pendingLPs) != ts.ids || len(ts.lps) != ts.ids {
			t.Errorf("ids %v: %d entries emitted and %d left for %d ids", ids, entries, len(ts.pendingLPs), ts.ids)
		}
	}
	// A long run of lead bytes, each cutting the one before it short.
	lead := single[0xe4]
	ts := &textStream{tok: tok, emit: func(string, []TokenLogProb) error { return nil }}
	for range 100_000 {
		if _, err := ts.add([]generate.Token{{ID: lead}}); err != nil {
			t.Fatal(err)
		}
		if len(ts.open) > 1 {
			t.Fatalf("a run of lead bytes holds %d bytes", len(ts.open))
		}
	}
}

// firstStop is where the first of stops begins in s, or -1.
func firstStop(s string, stops []string) int {
	cut := -1
	for _, st := range stops {
		if i := strings.Index(s, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	return cut
}

// byteIDs returns, for the Qwen2.5 tokenizer, the id of each single-byte token (byte fallback).
func byteIDs(t *testing.T, tok *tokenizer.Tokenizer) [256]int {
	t.Helper()
	var ids [256]int
	found := 0
	for id := range tok.VocabSize() {
		if b := tok.TokenBytes(id); len(b) == 1 && ids[b[0]] == 0 {
			ids[b[0]] = id
			found++
		}
	}
	if found != 256 {
		t.Fatalf("%d single-byte tokens, want 256", found)
	}
	return ids
}

// TestSplitCharacters: through the Qwen2.5 tokenizer, a reply whose characters are split over
// byte-level tokens, however many (a stray lead byte before a 4-byte emoji sent byte by byte,
// runs of lead bytes that a later token completes, tokens that each end one character and begin
// the next, ill-formed bytes, a tail left incomplete at the end), has text equal to the tokenizer's decoding of its ids; the streamed texts
// concatenated are that text, each a prefix of it and of the decoding of the ids whose entries
// came with it, and the entries are the ids in order. Before, a character still incomplete after
// 4 tokens was decoded as it stood: the stray lead byte and the chained tokens came out as
// extra U+FFFDs where the decoding has the emoji and the Khmer letters.
func TestSplitCharacters(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID(chattmpl.ImEnd)
	bt := byteIDs(t, tok)
	bytesOf := func(s string) []int {
		var ids []int
		for i := range len(s) {
			ids = append(ids, bt[s[i]])
		}
		return ids
	}
	// A token that ends one character and begins the next (Khmer U+1792, e1 9e 92).
	chain := -1
	for id := range tok.VocabSize() {
		if tok.TokenBytes(id) == "\x92\xe1\x9e" {
			chain = id
		}
	}
	if chain < 0 {
		t.Fatal("no token \\x92\\xe1\\x9e")
	}
	cases := map[string][]int{
		"chained partial tokens":   slices.Concat(bytesOf("\xe1\x9e"), []int{chain, chain, chain, chain}, bytesOf("\x92ok")),
		"stray lead before emoji":  slices.Concat(tok.Encode("hi "), bytesOf("\xf0\xf0\x9f\x98\x80"), tok.Encode(" ok")),
		"lead run then completion": slices.Concat(bytesOf("\xe4\xe4\xe4\xe4\xe4\xb8\xad"), tok.Encode("文")),
		"two strays before emoji":  slices.Concat(bytesOf("\xf0\xf0\xf0\x9f\x98\x80"), tok.Encode("!")),
		"ill-formed run":           slices.Concat(bytesOf("a\xff\xfe\xc0\xaf\xed\xa0\x80b"), tok.Encode("c")),
		"incomplete at the end":    slices.Concat(tok.Encode("SELECT 1"), bytesOf("\xf0\x9f\x98")),
		"emoji in whole tokens":    tok.Encode("👨‍👩‍👧‍👦 🏳️‍🌈 and 中文 ok"),
		"replacement character":    tok.Encode("a\uFFFD\uFFFD\uFFFD\uFFFDb"),
		"emoji byte by byte":       bytesOf("👨‍👩‍👧‍👦x"),
	}
	convo := []chat.Message{{Role: chat.RoleUser, Content: "How many?"}}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := New(gentest.ScriptedIDs(tok.VocabSize(), tok.Encode(chattmpl.GenerationPrompt), script, imEnd), tok, Config{ModelID: "scripted"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			want := tok.Decode(script)
			var streamed strings.Builder
			var seen []int
			emit := func(d Delta) error {
				for _, e := range d.LogProbs {
					seen = append(seen, int(e.ID))
				}
				streamed.WriteString(d.Text)
				if !strings.HasPrefix(want, streamed.String()) {
					t.Errorf("streamed %q, not a prefix of %q", streamed.String(), want)
				}
				if got := tok.Decode(seen); !strings.HasPrefix(got, streamed.String()) {
					t.Errorf("streamed %q with the entries of %q", streamed.String(), got)
				}
				return nil
			}
			opts := chat.Options{Temperature: chat.Float(0), MaxTokens: 64}
			choices, err := s.Complete(context.Background(), convo, opts, Sample{LogProbs: true}, emit)
			if err != nil {
				t.Fatal(err)
			}
			r := choices[0]
			var ids []int
			for _, e := range r.LogProbs {
				ids = append(ids, int(e.ID))
			}
			if !slices.Equal(ids, append(slices.Clone(script), imEnd)) {
				t.Errorf("entries %v, want the script %v and <|im_end|>", ids, script)
			}
			if r.Content != want {
				t.Errorf("reply %q, want the decoding %q", r.Content, want)
			}
			if streamed.String() != r.Content {
				t.Errorf("streamed %q, reply %q", streamed.String(), r.Content)
			}
		})
	}
}
