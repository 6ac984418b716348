//go:build race

package cpu

// raceEnabled: the race detector slows the scalar reference ~15×, so the shape tests take a
// subset of their shapes under -race (concurrency, its point, is still covered).
const raceEnabled = true
