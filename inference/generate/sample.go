package generate

import (
	"math"
	"math/rand/v2"
	"slices"
)

// sampler picks the next token from logits: greedy (argmax) at temperature 0, otherwise a draw
// from the temperature-scaled softmax restricted to the top-k tokens and then to the top-p
// nucleus, in that order, as Hugging Face's TopK and TopP logits warpers do. It is deterministic
// for a given seed and sequence of logits.
type sampler struct {
	temperature float64
	topP        float64 // 1 means off
	topK        int     // 0 means off
	rng         *rand.Rand

	probs []float64 // scratch: unnormalised probabilities
	cand  []int     // scratch: candidate ids

	// The last draw's softmax, for logProb: its largest logit and sum of exponentials.
	lastMax   float32
	lastTotal float64
}

func newSampler(temperature, topP float64, topK int, seed int64) *sampler {
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	return &sampler{
		temperature: temperature,
		topP:        topP,
		topK:        topK,
		rng:         rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
	}
}

// argmax returns the index of the largest logit, the lowest index on ties; NaNs are ignored
// (index 0 if all are NaN).
func argmax(logits []float32) int {
	best, bv := 0, float32(math.Inf(-1))
	found := false
	for i, v := range logits {
		if v != v { // NaN
			continue
		}
		if !found || v > bv {
			best, bv, found = i, v, true
		}
	}
	return best
}

// sample returns the next token id.
func (s *sampler) sample(logits []float32) int {
	if s.temperature <= 0 || s.topK == 1 {
		return argmax(logits)
	}
	m := logits[argmax(logits)]
	s.lastMax, s.lastTotal = m, 0
	if cap(s.probs) < len(logits) {
		s.probs = make([]float64, len(logits))
	}
	p := s.probs[:len(logits)]
	inv := 1 / s.temperature
	total := 0.0
	for i, v := range logits {
		if v != v {
			p[i] = 0
			continue
		}
		e := math.Exp(float64(v-m) * inv)
		p[i] = e
		total += e
	}
	s.lastTotal = total
	k := s.topK
	if k >= len(p) {
		k = 0
	}
	if k == 0 && s.topP >= 1 {
		return s.draw(p, nil, total)
	}
	cand := s.candidates(p, k, total)
	// Keep the k most likely, then the smallest prefix whose mass reaches top-p of what is left.
	if k > 0 && len(cand) > k {
		cand = cand[:k]
	}
	// The nucleus is measured against the mass left after top-k (all of it without top-k).
	kept := total
	if k > 0 {
		kept = 0
		for _, id := range cand {
			kept += p[id]
		}
	}
	if s.topP < 1 {
		need, cum := s.topP*kept, 0.0
		for i, id := range cand {
			cum += p[id]
			if cum >= need {
				cand = cand[:i+1]
				break
			}
		}
		kept = 0
		for _, id := range cand {
			kept += p[id]
		}
	}
	return s.draw(p, cand, kept)
}

// candidates returns, sorted by falling probability (lower id first on ties), a set of ids that
// surely holds the top-k tokens (k > 0) or the top-p nucleus (k == 0). Rather than sorting the
// whole vocabulary (151,936 entries for Qwen2) for every token, it collects the ids above a
// threshold that it lowers sixteen-fold until the set is provably large enough: the kept tokens
// are always the most likely ones, so once the ids above the threshold number k (or carry
// top-p of the mass) every kept token is among them.
func (s *sampler) candidates(p []float64, k int, total float64) []int {
	need := s.topP * total
	for t := 1.0 / 16; ; t /= 16 {
		s.cand = s.cand[:0]
		sum := 0.0
		for i, v := range p {
			if v >= t && v > 0 {
				s.cand = append(s.cand, i)
				sum += v
			}
		}
		enough := (k > 0 && len(s.cand) >= k) || (k == 0 && sum >= need)
		if enough || t < 1e-300 {
			break
		}
	}
	slices.SortFunc(s.cand, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return a - b
	})
	return s.cand
}

// draw samples an id with probability p[id]/total among cand (all ids when cand is nil).
func (s *sampler) draw(p []float64, cand []int, total float64) int {
	u := s.rng.Float64() * total
	if cand == nil {
		last := 0
		for i, v := range p {
			if v <= 0 {
				continue
			}
			last = i
			u -= v
			if u < 0 {
				return i
			}
		}
		return last
	}
	for _, id := range cand {
		u -= p[id]
		if u < 0 {
			return id
		}
	}
	return cand[len(cand)-1]
}

// logProb is tok's log-probability under the softmax of logits divided by the temperature (1
// when decoding greedily), over the whole vocabulary: before top-k and top-p. NaN logits count
// as impossible. It is <= 0. Called right after sample(logits) drew tok, it reuses that
// draw's sum of exponentials.
func (s *sampler) logProb(logits []float32, tok int) float32 {
	t := s.temperature
	if t <= 0 {
		t = 1
	} else if s.topK != 1 && s.lastTotal > 0 && len(s.probs) == len(logits) {
		// sample computed this softmax (it computes none when greedy)
		return float32(min(float64(logits[tok]-s.lastMax)/t-math.Log(s.lastTotal), 0))
	}
	m := logits[argmax(logits)]
	sum := 0.0
	for _, v := range logits {
		if v == v {
			sum += math.Exp(float64(v-m) / t)
		}
	}
	return float32(min(float64(logits[tok]-m)/t-math.Log(sum), 0))
}
