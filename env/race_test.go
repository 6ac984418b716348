//go:build race

package env

// raceEnabled: the race detector's runtime holds several times the heap per small object, so
// heap measures of small records are not the ones of a normal build.
const raceEnabled = true
