// Package studenttest makes checkpoints and students for tests of the student runtime: a copy of
// a model directory with some weights changed, as a trainer's step would leave it; a scripted
// student over the real tokenizer.
package studenttest

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// Perturbed copies the model directory dir (config.json, generation_config.json, a single
// model.safetensors of f32 tensors) into a new temporary directory, with every value of the
// named f32 tensor negated, and returns that directory. edit, when not nil, may change the
// copied config.json text before it is written.
func Perturbed(tb testing.TB, dir, tensor string, edit func(config []byte) []byte) string {
	tb.Helper()
	out := tb.TempDir()
	for _, name := range []string{"config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			tb.Fatal(err)
		}
		if name == "config.json" && edit != nil {
			b = edit(b)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		tb.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	h, err := safetensors.ParseHeader(raw[8:8+n], int64(len(raw))-8-int64(n), dir)
	if err != nil {
		tb.Fatal(err)
	}
	data := raw[8+n:]
	found := false
	for _, t := range h.Tensors {
		if t.Name != tensor {
			continue
		}
		if t.DType != safetensors.F32 {
			tb.Fatalf("%s is %v, not F32", tensor, t.DType)
		}
		found = true
		for i := t.Begin; i < t.End; i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(-v))
		}
	}
	if !found {
		tb.Fatalf("%s has no tensor %s", dir, tensor)
	}
	if err := os.WriteFile(filepath.Join(out, safetensors.SingleFile), raw, 0o644); err != nil {
		tb.Fatal(err)
	}
	return out
}

// MidReplySpecial returns the Qwen2.5 tokenizer of ../shared (the test is skipped without it)
// and a student over it and a scripted toy model that answers every assistant turn with the ids
// of before, the special token special, the ids of after and <|im_end|>: a policy that samples a
// special token inside its reply. The ids of before are returned too; the student is closed when
// the test ends.
func MidReplySpecial(tb testing.TB, before, special, after string) (*student.Student, *tokenizer.Tokenizer, []int) {
	tb.Helper()
	tok, err := tokenizer.Load(shared.Path(tb, "tokenizer/qwen2.5"))
	if err != nil {
		tb.Fatal(err)
	}
	imEnd, _ := tok.TokenID(chattmpl.ImEnd)
	sp, ok := tok.TokenID(special)
	if !ok || !tok.IsSpecial(sp) {
		tb.Fatalf("%s is not a special token of the tokenizer", special)
	}
	head := tok.EncodeSplitSpecial(before)
	script := slices.Concat(head, []int{sp}, tok.EncodeSplitSpecial(after))
	s, err := student.New(gentest.ScriptedIDs(tok.VocabSize(), tok.Encode(chattmpl.GenerationPrompt), script, imEnd), tok, student.Config{ModelID: "scripted"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, tok, head
}
