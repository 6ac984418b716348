package datasets

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// The subsets a task is assigned to.
const (
	SubsetTrain = "train"
	SubsetVal   = "val"
)

// DefaultSubsets is the assignment of the commands' defaults (distill env's --val-fraction 0.1
// --seed 0) and of env.Config.Subsets nil.
var DefaultSubsets = Subsets{ValFraction: 0.1, Seed: 0}

// Subsets assigns each task to the train or the validation subset by a hash of its id and a
// seed: a task's subset depends on nothing else, so it stays the same when tasks are added or
// removed, and a trainer can compute it in Python (docs/ENV.md, "Train and validation subsets").
// It is the one assignment of `distill env serve`'s task listing, `distill env prompts` and
// `student rollout`'s subset selection.
type Subsets struct {
	// ValFraction is the expected share of tasks in the validation subset, in [0, 1].
	ValFraction float64
	// Seed chooses the assignment: another seed draws another validation subset.
	Seed int64
}

// Check returns an error for a ValFraction outside [0, 1].
func (s Subsets) Check() error {
	if math.IsNaN(s.ValFraction) || s.ValFraction < 0 || s.ValFraction > 1 {
		return fmt.Errorf("validation fraction %g: want a number from 0 to 1", s.ValFraction)
	}
	return nil
}

// Of is the subset of task id: SubsetVal when u < ValFraction, else SubsetTrain, where u is
// the first 8 bytes of SHA-256("SEED:ID") (the seed in decimal), big-endian, as a fraction of
// 2^64 in [0, 1), cut to 53 bits so that it is exact as a float64.
func (s Subsets) Of(id string) string {
	h := sha256.Sum256([]byte(strconv.FormatInt(s.Seed, 10) + ":" + id))
	u := float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53)
	if u < s.ValFraction {
		return SubsetVal
	}
	return SubsetTrain
}
