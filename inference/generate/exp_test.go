package generate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpBucketsIsMathExp: the probabilities of expBuckets (math.Exp's operations written out
// where the CPU has FMA) are math.Exp's bit for bit, over logit differences from float32 steps
// near 0 down to underflow, at temperatures from 0.05 to 3, NaNs and infinities included.
func TestExpBucketsIsMathExp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 1 << 16
	logits := make([]float32, n)
	p := make([]float64, n)
	s := newSampler(1, 0.9, 0, 1)
	for round := range 60 {
		m := float32(r.NormFloat64() * 10)
		spread := []float64{0.05, 3, 40, 400}[round%4]
		for i := range logits {
			logits[i] = m - float32(r.ExpFloat64()*spread)
		}
		logits[0], logits[1], logits[2], logits[3] = m, float32(math.NaN()), float32(math.Inf(-1)), -math.MaxFloat32
		inv := 1 / (0.05 + 3*r.Float64())
		if round%5 == 0 {
			inv = 1 / 0.05
		}
		total := s.expBuckets(logits, p, m, inv)
		sum := 0.0
		for i, v := range logits {
			want := 0.0
			if v == v {
				want = math.Exp(float64(v-m) * inv)
			}
			if math.Float64bits(p[i]) != math.Float64bits(want) {
				t.Fatalf("round %d: exp((%v - %v)·%v) = %v (%#x), math.Exp %v (%#x)", round, v, m, inv, p[i], math.Float64bits(p[i]), want, math.Float64bits(want))
			}
			sum += want
		}
		if total != sum {
			t.Fatalf("round %d: total %v, the sum in id order %v", round, total, sum)
		}
	}
}
