//go:build race

package teachers

// raceEnabled: the race detector slows the reading of a reply byte by byte about tenfold, so
// the huge replies of the memory tests are smaller under it (hugeSize).
const raceEnabled = true
