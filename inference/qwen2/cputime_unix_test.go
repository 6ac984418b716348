//go:build unix

package qwen2

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) of every thread of the process so far. Another
// thread's time is counted as the scheduler accounts it, at its ticks and switches, so a
// difference over a millisecond or two can miss a busy worker's share: sum differences over a
// run (meanCPU), do not take their median.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
