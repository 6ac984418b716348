package gentest

import (
	"math"
	"slices"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Sample is the rule by which generate's host sampler picks a token and a
// generate.SamplingModel must pick it, written out plainly (the whole row sorted, in float64)
// for tests of both. p_i = exp(float64(l_i - max)/T), NaNs impossible. At temperature 0 or
// top-k 1 the token is the argmax (the lowest index on ties). Otherwise, with no cut (top-k 0
// or at least len(l), top-p 0 or 1) it is the first index at which the mass summed in index
// order exceeds U times the total; with one, the ids are ranked by falling p (the lower id
// first on ties), cut to the top k, then to the shortest prefix whose mass reaches top-p of
// what is left, and walked the same way. margin is how close U times the kept mass came to a
// boundary between two tokens, relative to that mass (1 for the argmax): a sampler summing in
// another order may pick the neighbour only when it is within rounding. logProb is the token's
// log-softmax of l/T (T 1 at temperature 0) over the whole row, as Result.LogProbs reports it.
func Sample(l []float32, s lm.Sampling) (tok int, margin, logProb float64) {
	best, found := 0, false
	for i, v := range l {
		if v == v && (!found || v > l[best]) {
			best, found = i, true
		}
	}
	invT := 1.0
	if s.Temperature > 0 {
		invT = 1 / s.Temperature
	}
	p := make([]float64, len(l))
	z := 0.0
	for i, v := range l {
		if v == v {
			p[i] = math.Exp(float64(v-l[best]) * invT)
			z += p[i]
		}
	}
	lp := func(i int) float64 { return min(float64(l[i]-l[best])*invT-math.Log(z), 0) }
	if s.Temperature <= 0 || s.TopK == 1 {
		return best, 1, lp(best)
	}
	ids := make([]int, 0, len(l))
	for i, v := range p {
		if v > 0 {
			ids = append(ids, i)
		}
	}
	topP := s.TopP
	if topP <= 0 {
		topP = 1
	}
	if (s.TopK > 0 && s.TopK < len(l)) || topP < 1 {
		slices.SortFunc(ids, func(a, b int) int { // ties: the lower id first
			switch {
			case p[a] > p[b]:
				return -1
			case p[a] < p[b]:
				return 1
			}
			return a - b
		})
		if s.TopK > 0 && s.TopK < len(ids) {
			ids = ids[:s.TopK]
		}
		if topP < 1 {
			kept, cum := 0.0, 0.0
			for _, id := range ids {
				kept += p[id]
			}
			for j, id := range ids {
				if cum += p[id]; cum >= topP*kept {
					ids = ids[:j+1]
					break
				}
			}
		}
	}
	kept := 0.0
	for _, id := range ids {
		kept += p[id]
	}
	x, run := s.U*kept, 0.0
	for _, id := range ids {
		run += p[id]
		if run > x {
			return id, min(run-x, x-(run-p[id])) / kept, lp(id)
		}
	}
	last := ids[len(ids)-1]
	return last, 0, lp(last)
}
