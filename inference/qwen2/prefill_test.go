package qwen2

import (
	"math"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/safetensors"
)

// Tolerances of the prefill logits of the bf16 and q8 weight types against the f32 model with
// the same weights (bf16-representable values), as a fraction of the f32 logits' largest
// magnitude. bf16: x rounded to bf16 by the AVX512_BF16 matrix-matrix kernel (2^-8 of each
// product at most; the weights are exact). q8: the weights rounded to int8 per block of 32 and x
// too (the VNNI and AVX2 integer kernels, as llama.cpp's q8_0), about 1/254 of each block's
// largest value each. docs/BENCHMARKS.md quotes these.
const (
	prefillTolBF16 = 0.01
	prefillTolQ8   = 0.03
)

// TestPrefillDTypes runs a 48-token prompt (the matrix-matrix path) through the bf16 and q8
// weight types and checks every position's logits against the f32 model's, and that the last
// position's agree with a token-by-token decode (the matrix-vector path) of the same type.
func TestPrefillDTypes(t *testing.T) {
	dir := t.TempDir()
	sp := smallSpec(safetensors.BF16)
	sp.hidden, sp.inter, sp.heads, sp.layers = 128, 352, 4, 2
	writeCheckpoint(t, dir, sp)
	ids := prompt(48, 3, sp.vocab)
	run := func(wt WeightType) []float32 {
		m := mustLoad(t, dir, Options{DType: wt})
		return forward(t, m, lm.Step{Cache: newCache(t, m, 64), Tokens: ids, AllLogits: true})[0].Logits
	}
	ref := run(F32)
	var scale float64
	for _, v := range ref {
		scale = max(scale, math.Abs(float64(v)))
	}
	for _, c := range []struct {
		wt  WeightType
		tol float64
	}{{BF16, prefillTolBF16}, {Q8, prefillTolQ8}} {
		got := run(c.wt)
		d := maxAbsDiff(got, ref) / scale
		t.Logf("%s (kernels %s): max abs difference %.3g of the largest logit %.3g", c.wt, cpu.Kernels(), d, scale)
		if d > c.tol || (c.wt == Q8 && d == 0) {
			t.Errorf("%s prefill: logits differ from f32 by %.3g of the largest, want at most %.3g (and > 0 for q8)", c.wt, d, c.tol)
		}
		m := mustLoad(t, dir, Options{DType: c.wt})
		cache := newCache(t, m, 64)
		var last []float32
		for _, id := range ids {
			last = forward(t, m, lm.Step{Cache: cache, Tokens: []int{id}})[0].Logits
		}
		V := sp.vocab
		if d := maxAbsDiff(last, got[(len(ids)-1)*V:]) / scale; d > c.tol {
			t.Errorf("%s: prefill and decode of the last position differ by %.3g of the largest logit", c.wt, d)
		}
	}
}
