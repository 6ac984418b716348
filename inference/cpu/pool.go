package cpu

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var (
	nthreads  atomic.Int32
	simdOff   tierSwitch // set by UseSIMD(false) or CHAINEDSQL_NOSIMD=1
	avx512Off tierSwitch // set by CHAINEDSQL_NOAVX512=1 (and tests): the AVX2 tier instead
)

func init() {
	nthreads.Store(int32(runtime.GOMAXPROCS(0)))
	if v := os.Getenv("CHAINEDSQL_NOSIMD"); v != "" && v != "0" {
		simdOff.Store(true)
	}
	if v := os.Getenv("CHAINEDSQL_NOAVX512"); v != "" && v != "0" {
		avx512Off.Store(true)
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

// SIMD reports whether assembly kernels are in use: the CPU has AVX-512 or AVX2 and they are
// not switched off.
func SIMD() bool { return use512() || useAVX2() }

// Kernels names the kernel tier in use: "avx512" (with "+vnni" and "+bf16" for the AVX512_VNNI
// and AVX512_BF16 kernels), "avx2" or "go" (portable).
func Kernels() string { return tierKernels(vec.Load().id) }

// tierKernels is Kernels for tier.
func tierKernels(tier int) string {
	switch tier {
	case tier512:
		s := "avx512"
		if hasVNNI {
			s += "+vnni"
		}
		if hasBF16 {
			s += "+bf16"
		}
		return s
	case tierAVX2:
		return "avx2"
	}
	return "go"
}

// use512 reports whether the AVX-512 kernels (kernels_amd64.s) are in use: the tier pickTier
// chose.
func use512() bool { return vec.Load().id == tier512 }

// useAVX2 reports whether the AVX2 kernels (kernels_avx2_amd64.s) are in use: SIMD on, AVX2
// there, AVX-512 not or switched off (the tier pickTier chose).
func useAVX2() bool { return vec.Load().id == tierAVX2 }

// plainOff switches the kernels that round x (the Q8 ones that quantise it: dot4Q8VNNI,
// dot4Q8VNNIFar, avx2Dot4Q8I, avx2Dot4Q8IFar, their H twins, gemmQ8VNNI, avx2GemmQ8; gemmBF16) and the AVX2 shift/mask bf16 kernel
// (avx2MvBF16P) off: tests use it to reach dot4Q8, avx2MvQ8 (and dot4Q8H, avx2MvQ8H), avx2MvBF16 and the f32-widening
// matrix-matrix path too, and BenchmarkGemmAB to compare with that path.
var plainOff atomic.Bool

// useVNNI reports whether Q8 matrix-vector products may quantise x and use dot4Q8VNNI.
func useVNNI() bool { return use512() && hasVNNI && !plainOff.Load() }

// task is one parallelParts call: rows [0, rows) cut into n parts of size rows each (the last
// maybe shorter), taken in order by the caller and the workers through next; the one finishing
// the last part closes done.
type task struct {
	f func(lo, hi int)
	// idle, if set, is called by a thread that has run parts of the task and finds none left,
	// with the index of the first part it ran: the worker always (it waits for the next task),
	// the caller while the workers still run theirs. It must not touch what the task's caller
	// frees once the task is done (prefetchNext reads only the next product's weights).
	idle       func(first int)
	rows, size int
	n          int32
	next       atomic.Int32
	finished   atomic.Int32
	done       chan struct{}
}

// run takes and runs parts until none is left; it returns the index of the first part it ran,
// -1 if none.
func (t *task) run() int {
	first := -1
	for {
		c := t.next.Add(1) - 1
		if c >= t.n {
			return first
		}
		if first < 0 {
			first = int(c)
		}
		lo := int(c) * t.size
		t.f(lo, min(lo+t.size, t.rows))
		if t.finished.Add(1) == t.n {
			close(t.done)
		}
	}
}

// The worker pool. Decode runs ~170 matrix-vector products per token of 0.1-1 ms each, split
// over the threads, so handing out work must cost far less than that: waking a parked goroutine
// takes tens of microseconds on a loaded VM. Workers are started once (as many as the largest
// thread count asked for, minus one: the caller works too) and, between tasks, spin on pool.cur
// for spinFor before parking on pool.wake; a caller that publishes a task wakes parked workers.
// Parts are taken dynamically (partsPerThread per thread, or fewer where the caller asks), so a
// worker whose core is busy with another process does not hold up the call for long. One task
// runs at a time: a caller that finds the pool busy (several goroutines multiplying at once,
// already parallel) runs its rows itself.
var pool struct {
	mu       sync.Mutex
	workers  int
	started  atomic.Int32 // workers, stored after they and wake exist: ensureWorkers' lock-free check
	cur      atomic.Pointer[task]
	sleepers atomic.Int32
	wake     chan struct{}
}

const spinFor = 100 * time.Microsecond

// ensureWorkers starts workers until there are n. Every parallel call asks, so the usual
// answer (enough already) takes no lock: a mutex per product was 0.5% of q8 decode's time
// (a profile of `student bench`, Zen 5).
func ensureWorkers(n int) {
	if int(pool.started.Load()) >= n {
		return
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.wake == nil {
		pool.wake = make(chan struct{}, 256)
	}
	for pool.workers < n {
		pool.workers++
		go worker()
	}
	pool.started.Store(int32(pool.workers))
}

// worker runs the parts of each published task, spinning briefly between tasks and parking
// after spinFor without one.
func worker() {
	var last *task
	for {
		t := pool.cur.Load()
		if t == nil || t == last {
			t = waitTask(last)
		}
		last = t
		if first := t.run(); first >= 0 && t.idle != nil {
			t.idle(first)
		}
	}
}

// waitTask returns the next published task other than last: spinning first, then parked.
func waitTask(last *task) *task {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		if t := pool.cur.Load(); t != nil && t != last {
			return t
		}
		if i%64 == 63 {
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		pool.sleepers.Add(1)
		if t := pool.cur.Load(); t != nil && t != last { // published before we counted ourselves
			pool.sleepers.Add(-1)
			return t
		}
		<-pool.wake
		pool.sleepers.Add(-1)
		if t := pool.cur.Load(); t != nil && t != last {
			return t
		}
	}
}

// minParallelWork is the number of multiply-adds below which a product runs on the calling
// goroutine alone: about 10 µs of work, where handing parts to a worker (and waking it) would
// cost a sizeable part of the gain (attention over a short cache, the 128-row KV projections of
// a small model).
const minParallelWork = 1 << 15

// partsPerThread is how many parts parallelRows cuts a call into per thread: enough that a
// worker whose core is busy with another process does not hold up the call for long.
const partsPerThread = 4

// parallelWork is parallelRows for a call of work multiply-adds: serial below minParallelWork.
func parallelWork(work, rows, align int, f func(lo, hi int)) {
	parallelWorkParts(work, rows, align, partsPerThread, f)
}

// parallelWorkParts is parallelWork with perThread parts per thread.
func parallelWorkParts(work, rows, align, perThread int, f func(lo, hi int)) {
	parallelWorkIdle(work, rows, align, perThread, f, nil)
}

// parallelWorkIdle is parallelWorkParts with task.idle set to idle (parallelPartsIdle).
func parallelWorkIdle(work, rows, align, perThread int, f func(lo, hi int), idle func(first int)) {
	if work < minParallelWork {
		f(0, rows)
		return
	}
	parallelPartsIdle(rows, align, perThread*Threads(), f, idle)
}

// parallelRows runs f over [0,rows) cut into partsPerThread parts per thread (parallelParts).
func parallelRows(rows, align int, f func(lo, hi int)) {
	parallelParts(rows, align, partsPerThread*Threads(), f)
}

// parallelPartsIdle is parallelParts with task.idle set to idle (nil: none).
func parallelPartsIdle(rows, align, parts int, f func(lo, hi int), idle func(first int)) {
	th := Threads()
	size := partSize(rows, align, parts)
	if th <= 1 || size >= rows {
		f(0, rows)
		return
	}
	ensureWorkers(th - 1)
	t := &task{f: f, idle: idle, rows: rows, size: size, n: int32((rows + size - 1) / size), done: make(chan struct{})}
	if !pool.cur.CompareAndSwap(nil, t) {
		f(0, rows)
		return
	}
	for s := pool.sleepers.Load(); s > 0; s-- {
		select {
		case pool.wake <- struct{}{}:
		default:
		}
	}
	if first := t.run(); first >= 0 && idle != nil && t.finished.Load() != t.n {
		idle(first)
	}
	join(t)
	pool.cur.CompareAndSwap(t, nil)
}

// partSize is the rows of each part (the last maybe shorter) when parallelParts cuts rows into
// at most parts: ⌈rows/parts⌉ rounded up to a multiple of align.
func partSize(rows, align, parts int) int {
	align = max(align, 1)
	return ((rows+parts-1)/parts + align - 1) / align * align
}

// parallelParts runs f over [0,rows) cut into at most parts contiguous parts of ⌈rows/parts⌉
// rows rounded up to a multiple of align (the caller's multi-row kernel height; the last part
// maybe shorter), on the calling goroutine and the worker pool; the parts are taken in order
// by whoever is free. (Parts balanced to within one align of each other made bf16 prefill 2-4%
// slower on Zen 5, docs/BENCHMARKS.md, "Issue 30: q8 products in one part per thread".)
func parallelParts(rows, align, parts int, f func(lo, hi int)) {
	parallelPartsIdle(rows, align, parts, f, nil)
}

// join waits for the workers' last parts of t. It spins first (up to spinFor): the wait is
// usually a fraction of one part, far shorter than parking the caller on t.done and having a
// worker wake it, which costs tens of microseconds on a VM, paid ~170 times per decoded token
// (measured, bf16 0.5B decode alternating the two per token in one process: 20.5-22.4 tok/s
// parked, 23.0-25.5 spinning).
func join(t *task) {
	deadline := time.Now().Add(spinFor)
	for i := 0; t.finished.Load() != t.n; i++ {
		if i%64 == 63 {
			if time.Now().After(deadline) {
				<-t.done
				return
			}
			runtime.Gosched()
		}
	}
}
