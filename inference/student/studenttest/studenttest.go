// Package studenttest makes checkpoints for tests of the student runtime: a copy of a model
// directory with some weights changed, as a trainer's step would leave it.
package studenttest

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/inference/safetensors"
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
