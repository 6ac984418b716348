package generate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// sortByLogit sorts ids by falling logit, keeping their order on ties.
func sortByLogit(logits []float32, ids []int) {
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
}

// bruteKept is the kept set by full sort: top-k, then the top-p nucleus of what is left.
func bruteKept(logits []float32, temp, topP float64, topK int) map[int]float64 {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	sortByLogit(logits, ids)
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
// the request's temperature (1 at temperature 0), whatever top-k and top-p cut.
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

// TestSamplerSameTokensAsSorting: for the same seed the sampler draws token for token what the
// full sort of gentest.Sample draws from the same uniform, on peaked and flat distributions (a
// random model's are nearly uniform over 151,936 ids), with ties (cuts that fall exactly on a
// boundary) and NaNs. gentest.Sample sums in another order, so a neighbour is allowed where its
// uniform lands within float64 rounding of a boundary (margin below sortMargin), and nowhere
// else.
// sortMargin bounds the rounding of a float64 sum over a vocabulary, relative to the sum.
const sortMargin = 1e-10

func TestSamplerSameTokensAsSorting(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type dist struct {
		name  string
		vocab int
		gen   func(i int) float32
	}
	dists := []dist{
		{"peaked", 1000, func(int) float32 { return float32(r.NormFloat64() * 3) }},
		{"flat", 151936, func(int) float32 { return float32(r.NormFloat64() * 0.05) }},
		{"ties", 2000, func(int) float32 { return float32(r.IntN(4)) }},
		{"equal", 64, func(int) float32 { return 1 }},
		{"nan", 500, func(i int) float32 {
			if i%7 == 0 {
				return float32(math.NaN())
			}
			return float32(r.NormFloat64())
		}},
	}
	for _, d := range dists {
		draws := 300
		if d.vocab > 100000 {
			draws = 40
			if testing.Short() {
				draws = 8
			}
		}
		for _, c := range []struct {
			temp, topP float64
			topK       int
		}{{1, 0.95, 0}, {0.7, 0.5, 0}, {1.3, 0.25, 0}, {1, 0.999, 0}, {1, 1, 50}, {0.8, 0.9, 40}, {1, 0.5, 3}} {
			logits := make([]float32, d.vocab)
			for i := range logits {
				logits[i] = d.gen(i)
			}
			seed := int64(r.Uint32())
			got := newSampler(c.temp, c.topP, c.topK, seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)) // newSampler's source
			for n := range draws {
				how := lm.Sampling{Temperature: c.temp, TopP: c.topP, TopK: c.topK, U: rng.Float64()}
				g := got.sample(logits)
				if w, margin, _ := gentest.Sample(logits, how); g != w && margin >= sortMargin {
					t.Fatalf("%s T=%g p=%g k=%d draw %d: got %d, the full sort draws %d (U %v, %.2g from a boundary)", d.name, c.temp, c.topP, c.topK, n, g, w, how.U, margin)
				}
			}
		}
	}
}

// BenchmarkSample draws one token from Qwen2's 151,936 logits as flat as a random model's
// (the nucleus holds nearly the whole vocabulary) and as peaked as a trained one's.
func BenchmarkSample(b *testing.B) {
	for _, c := range []struct {
		name  string
		scale float64
		topP  float64
		topK  int
	}{{"flat/p0.95", 0.05, 0.95, 0}, {"flat/k50", 0.05, 1, 50}, {"peaked/p0.95", 4, 0.95, 0}} {
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			logits := make([]float32, 151936)
			for i := range logits {
				logits[i] = float32(r.NormFloat64() * c.scale)
			}
			s := newSampler(1, c.topP, c.topK, 1)
			for b.Loop() {
				s.sample(logits)
			}
		})
	}
}

// TestTopLogProbs: the top tokens are the largest logits in falling order, the lower id first on
// ties and NaNs left out (as a full sort ranks them), and their log-probabilities are logProb's,
// the sampled token's equal to its entry among them.
func TestTopLogProbs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		logits := make([]float32, 1+rng.IntN(60))
		for i := range logits {
			switch rng.IntN(8) {
			case 0:
				logits[i] = float32(math.NaN())
			case 1:
				logits[i] = 1 // ties
			default:
				logits[i] = float32(rng.NormFloat64() * 3)
			}
		}
		var want []int
		for i, v := range logits {
			if v == v {
				want = append(want, i)
			}
		}
		sortByLogit(logits, want)
		n := rng.IntN(25)
		want = want[:min(n, len(want))]
		if got := topIDs(logits, n); !slices.Equal(got, want) && len(want) > 0 {
			t.Fatalf("trial %d: top %d of %v: %v, want %v", trial, n, logits, got, want)
		}
		temp := []float64{0, 0.5, 1, 1.7}[trial%4]
		s := newSampler(temp, 0.8, 0, int64(trial))
		if len(want) == 0 {
			continue
		}
		tok := s.sample(logits)
		lp, top := s.logProbs(logits, tok, n)
		if lp != s.logProb(logits, tok) || len(top) != len(want) {
			t.Fatalf("trial %d: log-prob %v (logProb %v), %d top entries for %d", trial, lp, s.logProb(logits, tok), len(top), len(want))
		}
		for j, e := range top {
			if e.ID != want[j] || e.LogProb != s.logProb(logits, e.ID) || (j > 0 && e.LogProb > top[j-1].LogProb) {
				t.Fatalf("trial %d: top entry %d %+v (want id %d, log-prob %v)", trial, j, e, want[j], s.logProb(logits, e.ID))
			}
			if e.ID == tok && e.LogProb != lp {
				t.Fatalf("trial %d: sampled token %d: %v, %v among the top", trial, tok, lp, e.LogProb)
			}
		}
	}
}

// TestLogitBias: the bias is added to a copy of the logits (the model's row is untouched), and
// draws and log-probabilities follow the biased row.
func TestLogitBias(t *testing.T) {
	logits := []float32{2, -1, 0.5, 7, 3}
	row := slices.Clone(logits)
	s := newSampler(0, 1, 0, 1)
	s.setBias(map[int]float32{3: -100, 1: 100})
	b := s.biased(logits)
	if !slices.Equal(logits, row) || b[3] != -93 || b[1] != 99 || b[0] != 2 {
		t.Fatalf("biased %v, row after %v", b, logits)
	}
	if tok := s.sample(b); tok != 1 {
		t.Fatalf("greedy draw from the biased row: %d, want 1", tok)
	}
	if lp := s.logProb(b, 1); lp < -1e-6 {
		t.Fatalf("forced token's log-prob %v, want about 0", lp)
	}
	if got := newSampler(0, 1, 0, 1).biased(logits); &got[0] != &logits[0] {
		t.Fatal("no bias: the row is not used as it is")
	}
}
