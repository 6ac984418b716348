package generate

import (
	"maps"
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

	// Scratch of nucleusDraw, filled by sample's pass over the logits: each probability's
	// bucket (noBucket for 0), and each bucket's count and mass (allocated on first use).
	buckets []uint16
	hist    *histogram

	// The last draw's softmax, for logProb: its largest logit and sum of exponentials.
	lastMax   float32
	lastTotal float64

	// The request's logit bias (biasVals[i] added to the logit of biasIDs[i], ids ascending)
	// and biased's scratch row.
	biasIDs  []int
	biasVals []float32
	withBias []float32
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

// setBias gives s a logit bias: bias[id] is added to logit id before every draw (biased).
func (s *sampler) setBias(bias map[int]float32) {
	s.biasIDs = slices.Sorted(maps.Keys(bias))
	s.biasVals = make([]float32, len(s.biasIDs))
	for i, id := range s.biasIDs {
		s.biasVals[i] = bias[id]
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
	k := s.topK
	if k >= len(p) {
		k = 0
	}
	nucleus := k == 0 && s.topP < 1
	var total float64
	if nucleus {
		total = s.expBuckets(logits, p, m, inv)
	} else {
		for i, v := range logits {
			if v != v {
				p[i] = 0
				continue
			}
			e := math.Exp(float64(v-m) * inv)
			p[i] = e
			total += e
		}
	}
	s.lastTotal = total
	u := s.rng.Float64() // the one random number of this draw
	if k == 0 && s.topP >= 1 {
		return s.draw(p, nil, total, u)
	}
	if nucleus {
		if id, ok := s.nucleusDraw(p, total, u); ok {
			return id
		}
	}
	return s.sortedDraw(p, k, total, u)
}

// histogram is the count and the mass of the probabilities in each bucket.
type histogram struct {
	count [numBuckets]int32
	mass  [numBuckets]float64
}

// ln2Hi and ln2Lo split ln 2 as math.Exp's amd64 assembly does.
const (
	ln2Hi = 0.69314718055966295651160180568695068359375
	ln2Lo = 0.28235290563031577122588448175013436025525412068e-12
)

// noBucket marks a probability of 0 (a NaN logit, or exp underflowing) in sampler.buckets.
const noBucket = math.MaxUint16

// expBuckets is sample's one pass for nucleusDraw: it sets p[i] to math.Exp((logits[i]-m)·inv)
// (0 for NaN) and each id's bucket, counts and sums the buckets, and returns the sum of p. Every
// sum is added in id order, as the separate passes it replaces added them.
func (s *sampler) expBuckets(logits []float32, p []float64, m float32, inv float64) float64 {
	if cap(s.buckets) < len(logits) {
		s.buckets = make([]uint16, len(logits))
	}
	s.buckets = s.buckets[:len(logits)]
	bk := s.buckets
	if s.hist == nil {
		s.hist = new(histogram)
	} else {
		*s.hist = histogram{}
	}
	count, mass := &s.hist.count, &s.hist.mass
	total := 0.0
	for i, v := range logits {
		if v != v {
			p[i], bk[i] = 0, noBucket
			continue
		}
		var e float64
		if x := float64(v-m) * inv; expFMA && x >= -700 {
			// math.Exp(x) bit for bit: the operations of its amd64 assembly's FMA path
			// (Shibata's method: x = k·ln2 + r, a degree-8 polynomial of r/16 squared four
			// times, times 2^k; no denormal result above -700), inline rather than a call
			// per logit. Every product that an addition uses is converted explicitly, which
			// keeps the compiler from fusing what the assembly does not (GOAMD64=v3).
			k := math.RoundToEven(float64(x * math.Log2E)) // CVTSD2SL: to nearest, ties to even
			r := math.FMA(-k, ln2Hi, x)
			r = math.FMA(-k, ln2Lo, r)
			r = float64(r * 0.0625)
			q := math.FMA(2.4801587301587301587e-5, r, 1.9841269841269841270e-4)
			q = math.FMA(q, r, 1.3888888888888888889e-3)
			q = math.FMA(q, r, 8.3333333333333333333e-3)
			q = math.FMA(q, r, 4.1666666666666666667e-2)
			q = math.FMA(q, r, 1.6666666666666666667e-1)
			q = math.FMA(q, r, 0.5)
			q = math.FMA(q, r, 1)
			r = float64(r * q)
			r = float64(r * float64(r+2))
			r = float64(r * float64(r+2))
			r = float64(r * float64(r+2))
			r = math.FMA(r, float64(r+2), 1)
			e = float64(r * math.Float64frombits(uint64(int64(k)+0x3ff)<<52))
		} else {
			e = math.Exp(x)
		}
		p[i] = e
		total += e
		if e > 0 {
			b := bucketOf(e)
			bk[i] = uint16(b)
			count[b]++
			mass[b] += e
		} else {
			bk[i] = noBucket
		}
	}
	return total
}

// sortedDraw is the rule that defines the draw: the candidates sorted by falling probability
// (lower id first on ties), cut to the k most likely, then to the shortest prefix whose mass,
// summed in that order, reaches top-p of what is left; u times the kept mass is then walked
// down the same order. Only the k kept tokens are sorted; without top-k, nucleusDraw gives
// its result in linear time and this runs only when a sum lands within rounding of a boundary.
func (s *sampler) sortedDraw(p []float64, k int, total, u float64) int {
	cand := s.candidates(p, k, total)
	if k > 0 && len(cand) > k {
		selectTop(p, cand, k)
		cand = cand[:k]
	}
	sortRank(p, cand)
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
	return s.draw(p, cand, kept, u)
}

// nucleusDraw draws from the top-p nucleus (no top-k) without sorting it. The pass computing
// p (expBuckets) has bucketed the probabilities by their leading bits (bucketOf: a higher
// bucket holds only higher probabilities) and summed each bucket's mass; the bucket where the mass in rank order reaches
// top-p, and then the one where it passes u times the nucleus's mass, are found from the sums,
// and a weighted quickselect over that bucket's ids alone finds the token. Its sums are added
// in another order than sortedDraw's, so they differ from them by rounding, at most about
// n·2⁻⁵³ of the total each for n tokens; when both boundaries are further than sixteen times
// that from the value placed between them, sortedDraw would cut and draw the same tokens, and
// the result is returned with ok. Otherwise (a flat distribution cut exactly at a tie, a draw
// within rounding of a boundary) ok is false and sortedDraw decides.
func (s *sampler) nucleusDraw(p []float64, total, u float64) (id int, ok bool) {
	count, mass := &s.hist.count, &s.hist.mass
	tol := 16 * float64(len(p)) * 0x1p-53 * total
	need := s.topP * total
	// cut: the bucket holding the nucleus's last token, and the mass of the buckets above it.
	cut, above := crossing(mass, need)
	if cut < 0 {
		return 0, false
	}
	ids := s.bucket(cut, int(count[cut]))
	j, before, ok := selectMass(p, ids, need-above)
	before += above
	if !ok || need-before <= tol || before+p[ids[j]]-need <= tol {
		return 0, false
	}
	kept := before + p[ids[j]]
	x := u * kept
	at, aboveAt := crossing(mass, x)
	if at < cut || at < 0 { // at == cut: within the nucleus's part of the cut bucket
		return 0, false
	}
	if at == cut {
		ids = ids[:j+1]
	} else {
		ids = s.bucket(at, int(count[at]))
	}
	j, before, ok = selectMass(p, ids, x-aboveAt)
	before += aboveAt
	if !ok || x-before <= tol || before+p[ids[j]]-x <= tol {
		return 0, false
	}
	return ids[j], true
}

// bucketBits is how many leading mantissa bits tell buckets apart: 256 buckets a binade, so
// that the bucket a draw lands in holds few ids (about 600 when 151,936 probabilities lie
// within one binade, as a random model's do), and the quickselect over it is short.
const bucketBits = 8

// numBuckets is how many buckets bucketOf sorts probabilities into.
const numBuckets = 1 + 65<<bucketBits

// bucketOf is the bucket of a probability v in (0, 1]: its exponent and bucketBits leading
// mantissa bits, so buckets rise with v, each spanning 2⁻ᵇᵘᶜᵏᵉᵗᴮⁱᵗˢ of a binade; everything below
// 2⁻⁶⁴ shares bucket 0.
func bucketOf(v float64) int {
	const low = (1023 - 64) << bucketBits // 2⁻⁶⁴'s exponent and leading bits
	b := int(math.Float64bits(v)>>(52-bucketBits)) - low + 1
	return min(max(b, 0), numBuckets-1)
}

// crossing returns the highest-first bucket at which the mass summed from the top bucket down
// first exceeds x, and the mass of the buckets above it; -1 when the whole mass does not.
func crossing(mass *[numBuckets]float64, x float64) (b int, above float64) {
	for b = numBuckets - 1; b >= 0; b-- {
		if x < above+mass[b] {
			return b, above
		}
		above += mass[b]
	}
	return -1, above
}

// bucket collects the n ids in bucket b (into the sampler's scratch), from the buckets
// expBuckets noted.
func (s *sampler) bucket(b, n int) []int {
	// Branch-free: every id is written at j, which moves on only past the bucket's (so the
	// scratch has room for one more).
	s.cand = slices.Grow(s.cand[:0], n+1)[:n+1]
	cand, j, want := s.cand, 0, uint16(b)
	for i, v := range s.buckets {
		cand[j] = i
		if v == want {
			j++
		}
	}
	s.cand = cand[:n]
	return s.cand
}

// ranksBefore reports whether id a comes before id b in falling probability order, the lower
// id first on ties: a strict total order on ids.
func ranksBefore(p []float64, a, b int) bool {
	return p[a] > p[b] || (p[a] == p[b] && a < b)
}

// sortRank sorts ids by falling probability, the lower id first on ties.
func sortRank(p []float64, ids []int) {
	slices.SortFunc(ids, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return a - b
	})
}

// partition rearranges ids[lo:hi] (hi > lo) around a pivot, the median of its first, middle
// and last entries: it returns the pivot's new place m, every id of ids[lo:m] ranked before it
// and every one of ids[m+1:hi] after, and the probability mass of ids[lo:m].
func partition(p []float64, ids []int, lo, hi int) (m int, mass float64) {
	a, b, c := lo, lo+(hi-lo)/2, hi-1
	if ranksBefore(p, ids[b], ids[a]) {
		a, b = b, a
	}
	if ranksBefore(p, ids[c], ids[b]) {
		b = c
		if ranksBefore(p, ids[b], ids[a]) {
			b = a
		}
	}
	ids[b], ids[hi-1] = ids[hi-1], ids[b]
	pv := ids[hi-1]
	m = lo
	for i := lo; i < hi-1; i++ {
		if id := ids[i]; ranksBefore(p, id, pv) {
			ids[i], ids[m] = ids[m], id
			mass += p[id]
			m++
		}
	}
	ids[m], ids[hi-1] = pv, ids[m]
	return m, mass
}

// selectTop rearranges ids so that ids[:k] are the k that rank first (in no order).
func selectTop(p []float64, ids []int, k int) {
	lo, hi := 0, len(ids)
	for hi-lo > 1 {
		m, _ := partition(p, ids, lo, hi)
		switch {
		case m == k:
			return
		case m > k:
			hi = m
		default:
			lo = m + 1
		}
	}
}

// selectMass finds, in expected linear time, the token at which the probability mass of ids,
// summed in falling probability order, first exceeds x: it rearranges ids so that ids[j] is
// that token and ids[:j] the ones ranked before it, and returns j and their mass. ok is false
// when the whole mass does not exceed x.
func selectMass(p []float64, ids []int, x float64) (j int, before float64, ok bool) {
	lo, hi := 0, len(ids)
	for lo < hi {
		m, left := partition(p, ids, lo, hi)
		if x < before+left {
			hi = m
			continue
		}
		before += left
		if x < before+p[ids[m]] {
			return m, before, true
		}
		before += p[ids[m]]
		lo = m + 1
	}
	return 0, before, false
}

// candidates returns, in no order, a set of ids that surely holds the top-k tokens (k > 0) or
// the top-p nucleus (k == 0). Rather than ranking the whole vocabulary (151,936 entries for
// Qwen2) for every token, it collects the ids above a threshold that it lowers sixteen-fold
// until the set is provably large enough: the kept tokens are always the most likely ones, so
// once the ids above the threshold number k (or carry top-p of the mass) every kept token is
// among them.
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
	return s.cand
}

// draw returns the id at which u·total, less the probabilities p[id] of cand in order (all
// ids in id order when cand is nil), falls below zero: a draw with probability p[id]/total
// for u uniform in [0, 1).
func (s *sampler) draw(p []float64, cand []int, total, u float64) int {
	u *= total
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
	m, t, logZ := s.norm(logits)
	return logProbOf(logits[tok], m, t, logZ)
}

// logProbs is logProb and, for top > 0, the top most likely tokens of logits (fewer when fewer
// are possible) with their log-probabilities under the same softmax, most likely first, the
// lower id first on ties: the one normalisation serves all of them, so the sampled token's
// value and its entry among the top are equal.
func (s *sampler) logProbs(logits []float32, tok, top int) (float32, []TokenProb) {
	m, t, logZ := s.norm(logits)
	lp := logProbOf(logits[tok], m, t, logZ)
	if top <= 0 {
		return lp, nil
	}
	ids := topIDs(logits, top)
	out := make([]TokenProb, len(ids))
	for i, id := range ids {
		out[i] = TokenProb{ID: id, LogProb: logProbOf(logits[id], m, t, logZ)}
	}
	return lp, out
}

// norm returns what the log-softmax of logits divided by the temperature (1 at temperature 0) needs:
// the largest logit m, the temperature t and logZ, the log of the sum of exp((l-m)/t) over the
// logits that are not NaN. Right after sample drew from logits at a temperature, it reuses
// that draw's sum (sample computes none when greedy).
func (s *sampler) norm(logits []float32) (m float32, t, logZ float64) {
	t = s.temperature
	if t <= 0 {
		t = 1
	} else if s.topK != 1 && s.lastTotal > 0 && len(s.probs) == len(logits) {
		return s.lastMax, t, math.Log(s.lastTotal)
	}
	m = logits[argmax(logits)]
	sum := 0.0
	for _, v := range logits {
		if v == v {
			sum += math.Exp(float64(v-m) / t)
		}
	}
	return m, t, math.Log(sum)
}

// logProbOf is the log-softmax of a logit v given norm's m, t and logZ, at most 0.
func logProbOf(v, m float32, t, logZ float64) float32 {
	return float32(min(float64(v-m)/t-logZ, 0))
}

// topIDs returns the ids of the n largest logits (fewer when fewer are not NaN), largest first,
// the lower id first on ties, in one pass over logits keeping a sorted list of n.
func topIDs(logits []float32, n int) []int {
	n = min(n, len(logits))
	if n <= 0 {
		return nil
	}
	ids := make([]int, 0, n)
	for i, v := range logits {
		if v != v {
			continue
		}
		if len(ids) == n && !(v > logits[ids[n-1]]) {
			continue // not above the last kept (an equal logit has a higher id: after it)
		}
		if len(ids) < n {
			ids = append(ids, i)
		} else {
			ids[n-1] = i
		}
		for j := len(ids) - 1; j > 0 && v > logits[ids[j-1]]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	return ids
}

// biased returns logits with s's logit bias added (the logits themselves without one), in s's
// scratch: the model's row is left as it is.
func (s *sampler) biased(logits []float32) []float32 {
	if len(s.biasIDs) == 0 {
		return logits
	}
	s.withBias = append(s.withBias[:0], logits...)
	for i, id := range s.biasIDs {
		s.withBias[id] += s.biasVals[i]
	}
	return s.withBias
}
