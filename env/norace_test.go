//go:build !race

package env

// raceEnabled: see race_test.go.
const raceEnabled = false
