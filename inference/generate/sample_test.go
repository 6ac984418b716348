package generate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// bruteKept is the kept set by full sort: top-k, then the top-p nucleus of what is left.
func bruteKept(logits []float32, temp, topP float64, topK int) map[int]float64 {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	if topK > 0 && topK < len(ids) {
		ids = ids[:topK]
	}
	m := float64(logits[ids[0]])
	p := map[int]float64{}
	total := 0.0
	for _, id := range ids {
		p[id] = math.Exp((float64(logits[id]) - m) / temp)
		total += p[id]
	}
	if topP > 0 && topP < 1 {
		cum := 0.0
		for i, id := range ids {
			cum += p[id]
			if cum >= topP*total {
				for _, drop := range ids[i+1:] {
					delete(p, drop)
				}
				break
			}
		}
	}
	total = 0
	for _, v := range p {
		total += v
	}
	for id := range p {
		p[id] /= total
	}
	return p
}

func TestSamplerMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		logits := make([]float32, 1000)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 3)
		}
		temp := 0.3 + r.Float64()
		topP := []float64{0, 0.5, 0.9, 1}[trial%4]
		topK := []int{0, 1, 5, 50, 6000}[trial%5]
		want := bruteKept(logits, temp, topP, topK)
		s := newSampler(temp, topP, topK, int64(trial))
		const draws = 2000
		counts := map[int]int{}
		for range draws {
			id := s.sample(logits)
			if _, ok := want[id]; !ok {
				t.Fatalf("trial %d (T=%.2f p=%v k=%d): drew %d (logit %.3f) outside the kept set of %d", trial, temp, topP, topK, id, logits[id], len(want))
			}
			counts[id]++
		}
		// Every token with at least 5% probability shows up near its frequency.
		for id, p := range want {
			if p < 0.05 {
				continue
			}
			got := float64(counts[id]) / draws
			if math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/draws)+0.01 {
				t.Fatalf("trial %d: token %d drawn %.3f of the time, probability %.3f", trial, id, got, p)
			}
		}
	}
}

func TestSamplerGreedyAndSeed(t *testing.T) {
	logits := []float32{0.1, 2, float32(math.NaN()), 2, -1}
	if id := newSampler(0, 1, 0, 1).sample(logits); id != 1 {
		t.Fatalf("greedy picked %d, want the first maximum 1", id)
	}
	if id := argmax([]float32{float32(math.NaN()), -5, -3}); id != 2 {
		t.Fatalf("argmax with NaN: %d", id)
	}
	a, b := newSampler(1, 1, 0, 42), newSampler(1, 1, 0, 42)
	flat := make([]float32, 100)
	for range 50 {
		if a.sample(flat) != b.sample(flat) {
			t.Fatal("same seed, different draws")
		}
	}
}

// TestLogProb: the recorded log-probabilities are a distribution over the whole vocabulary at
// the request's temperature (1 when greedy), whatever top-k and top-p cut.
func TestLogProb(t *testing.T) {
	logits := []float32{2, -1, 0.5, 7, float32(math.NaN()), 3, -20}
	for _, temp := range []float64{0, 0.6, 1, 2} {
		s := newSampler(temp, 0.5, 2, 1)
		sum := 0.0
		for id := range logits {
			if id == 4 {
				continue
			}
			lp := s.logProb(logits, id)
			if lp > 0 {
				t.Fatalf("T=%g: log-prob %v of %d > 0", temp, lp, id)
			}
			sum += math.Exp(float64(lp))
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("T=%g: probabilities sum to %v", temp, sum)
		}
		if a, b := s.logProb(logits, 3), s.logProb(logits, 5); !(a > b) {
			t.Errorf("T=%g: the larger logit has log-prob %v <= %v", temp, a, b)
		}
	}
	// After a draw, the draw's own softmax gives the same numbers.
	for _, temp := range []float64{0.6, 1.3} {
		s := newSampler(temp, 0.9, 0, 5)
		tok := s.sample(logits)
		if got, want := s.logProb(logits, tok), newSampler(temp, 1, 0, 1).logProb(logits, tok); math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("T=%g: log-prob %v after the draw, %v computed afresh", temp, got, want)
		}
	}
	// Temperature 2 flattens: the top token's log-prob is lower than at 0.6.
	if hot, cold := newSampler(2, 1, 0, 1).logProb(logits, 3), newSampler(0.6, 1, 0, 1).logProb(logits, 3); !(hot < cold) {
		t.Errorf("top token: %v at T=2, %v at T=0.6", hot, cold)
	}
}
