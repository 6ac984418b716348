package main

import (
	"fmt"
	"runtime/pprof"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// startProfile starts a CPU profile (pprof) written to path, nothing when path is empty; stop
// ends it and commits the file (abort drops it: for an error before stop).
func startProfile(path string) (stop func() error, abort func(), err error) {
	if path == "" {
		return func() error { return nil }, func() {}, nil
	}
	prof, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(prof); err != nil {
		prof.Abort()
		return nil, nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	stopped := false
	stop = func() error {
		stopped = true
		pprof.StopCPUProfile()
		if err := prof.Commit(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}
	abort = func() {
		if !stopped {
			pprof.StopCPUProfile()
		}
		prof.Abort()
	}
	return stop, abort, nil
}
