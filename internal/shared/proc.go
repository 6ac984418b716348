package shared

import "github.com/chainedsql/chainedsql/internal/rss"

// PeakRSS is the process's peak resident set in bytes (rss.Peak), for benchmarks' memory
// figures; 0 where /proc is unavailable.
func PeakRSS() int64 { return rss.Peak() }
