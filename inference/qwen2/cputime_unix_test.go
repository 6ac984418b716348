//go:build unix

package qwen2

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) of every thread of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
