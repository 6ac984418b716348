package cpu

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

var (
	nthreads atomic.Int32
	simdOff  atomic.Bool // set by UseSIMD(false) or CHAINEDSQL_NOSIMD=1
)

func init() {
	nthreads.Store(int32(runtime.GOMAXPROCS(0)))
	if v := os.Getenv("CHAINEDSQL_NOSIMD"); v != "" && v != "0" {
		simdOff.Store(true)
	}
}

// SetThreads sets how many goroutines the kernels split work over (at least 1). Safe to call
// concurrently with running kernels; calls that already started keep their split.
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	nthreads.Store(int32(n))
}

// Threads returns the current thread count.
func Threads() int { return int(nthreads.Load()) }

// UseSIMD switches the assembly kernels on (the default where the CPU has them) or off (portable
// Go everywhere, as with CHAINEDSQL_NOSIMD=1). It returns the previous setting.
func UseSIMD(on bool) (was bool) { return !simdOff.Swap(!on) }

// SIMD reports whether the assembly kernels are in use: the CPU supports them and they are not
// switched off.
func SIMD() bool { return hasAVX512 && !simdOff.Load() }

// job is one chunk of a parallelRows call, run by a pool worker.
type job struct {
	f      func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

// The worker pool: decode runs ~170 matrix-vector products per token, each split over the
// threads, so the split must cost microseconds. Workers are started once (lazily, as many as the
// largest thread count asked for minus one, since the caller runs a chunk itself) and then wait on
// one channel; callers from several goroutines may share them.
var pool struct {
	mu      sync.Mutex
	workers int
	jobs    chan job
}

func ensureWorkers(n int) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.jobs == nil {
		pool.jobs = make(chan job, 64)
	}
	for pool.workers < n {
		pool.workers++
		go func(jobs <-chan job) {
			for j := range jobs {
				j.f(j.lo, j.hi)
				j.wg.Done()
			}
		}(pool.jobs)
	}
}

var wgPool = sync.Pool{New: func() any { return new(sync.WaitGroup) }}

// parallelRows runs f over [0,rows) split into contiguous chunks, one per thread, each chunk
// boundary a multiple of align (the caller's multi-row kernel height). The calling goroutine runs
// the first chunk; the rest go to the worker pool.
func parallelRows(rows, align int, f func(lo, hi int)) {
	t := Threads()
	if align < 1 {
		align = 1
	}
	chunk := (rows + t - 1) / t
	chunk = (chunk + align - 1) / align * align
	if t <= 1 || chunk >= rows {
		f(0, rows)
		return
	}
	ensureWorkers(t - 1)
	wg := wgPool.Get().(*sync.WaitGroup)
	for lo := chunk; lo < rows; lo += chunk {
		wg.Add(1)
		pool.jobs <- job{f: f, lo: lo, hi: min(lo+chunk, rows), wg: wg}
	}
	f(0, chunk)
	wg.Wait()
	wgPool.Put(wg)
}
