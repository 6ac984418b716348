//go:build race

package judge

// raceEnabled: the race detector slows reading rows ~8×, so TestForgottenJoinBounded's two
// million rows (90 s under -race) are left to runs without it; the keeper's code runs under
// -race in TestBoundedVerdicts, and every engine's filtering in sandboxtest.CheckFilter.
const raceEnabled = true
