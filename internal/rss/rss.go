// Package rss reads the process's resident memory figures from /proc (Linux).
package rss

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Peak is the process's peak resident set (VmHWM of /proc/self/status) in bytes; 0 where /proc
// is unavailable.
func Peak() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
