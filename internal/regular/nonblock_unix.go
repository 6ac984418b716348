//go:build unix

package regular

import "syscall"

// nonBlock makes an open of a FIFO return at once instead of waiting for a writer (it has no
// effect on a regular file's reads).
const nonBlock = syscall.O_NONBLOCK
