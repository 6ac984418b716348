package datasets

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestSubsetsAssignment: the assignment is a function of the id and the seed alone (adding
// tasks moves none), its validation share is close to the fraction, another seed draws another
// subset, and the fractions 0 and 1 put every task in one subset.
func TestSubsetsAssignment(t *testing.T) {
	ids := make([]string, 20000)
	for i := range ids {
		ids[i] = fmt.Sprintf("bird-train/%d", i)
	}
	s := Subsets{ValFraction: 0.1, Seed: 7}
	first := make([]string, len(ids))
	val := 0
	for i, id := range ids {
		if first[i] = s.Of(id); first[i] == SubsetVal {
			val++
		}
	}
	// Binomial(20000, 0.1): standard deviation about 42; 6 of them is 250.
	if math.Abs(float64(val)-2000) > 250 {
		t.Errorf("%d of %d in val at fraction 0.1", val, len(ids))
	}
	more := append(slices.Clone(ids), "bird-dev/1", "spider-dev/3", "sample/x")
	for i, id := range more[:len(ids)] {
		if got := s.Of(id); got != first[i] {
			t.Fatalf("%s: %s, then %s with more tasks", id, first[i], got)
		}
	}
	moved := 0
	other := Subsets{ValFraction: 0.1, Seed: 8}
	for i, id := range ids {
		if other.Of(id) != first[i] {
			moved++
		}
	}
	if moved < 2000 { // two independent 10% draws differ on about 18%
		t.Errorf("seed 8 changes the subset of only %d of %d tasks", moved, len(ids))
	}
	for _, id := range ids[:500] {
		if (Subsets{ValFraction: 0, Seed: 7}).Of(id) != SubsetTrain || (Subsets{ValFraction: 1, Seed: 7}).Of(id) != SubsetVal {
			t.Fatalf("%s: fractions 0 and 1 do not put it in train and val", id)
		}
	}
	for _, f := range []float64{-0.1, 1.5, math.NaN()} {
		if err := (Subsets{ValFraction: f}).Check(); err == nil {
			t.Errorf("fraction %g accepted", f)
		}
	}
}
