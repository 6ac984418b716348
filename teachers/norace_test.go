//go:build !race

package teachers

// raceEnabled: see race_test.go.
const raceEnabled = false
