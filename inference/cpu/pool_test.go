package cpu

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelRows: every row is visited exactly once, part boundaries are multiples of align,
// for several thread counts and concurrent callers (one of which gets the pool, the others run
// serially), including calls after the workers have parked; parallelParts cuts parts of
// ⌈rows/parts⌉ rows rounded up to align, the last maybe shorter.
func TestParallelRows(t *testing.T) {
	check := func(rows, align int) error {
		seen := make([]atomic.Int32, rows)
		parallelRows(rows, align, func(lo, hi int) {
			if lo%align != 0 || lo > hi || hi > rows {
				panic(fmt.Sprintf("part [%d,%d) of %d rows, align %d", lo, hi, rows, align))
			}
			for r := lo; r < hi; r++ {
				seen[r].Add(1)
			}
		})
		for r := range seen {
			if c := seen[r].Load(); c != 1 {
				return fmt.Errorf("rows=%d align=%d threads=%d: row %d visited %d times", rows, align, Threads(), r, c)
			}
		}
		return nil
	}
	for _, th := range []int{1, 2, 3, 4} {
		restore := withThreads(th)
		for _, rows := range []int{1, 3, 4, 5, 31, 32, 33, 128, 1000} {
			for _, align := range []int{1, 4, 16} {
				if err := check(rows, align); err != nil {
					t.Fatal(err)
				}
			}
		}
		restore()
	}
	defer withThreads(3)()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := check(50+g*7+i%13, 4); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, c := range []struct{ rows, align, parts, want int }{
		{896, 32, 8, 7}, {896, 32, 2, 2}, {1152, 32, 8, 8}, {1152, 32, 2, 2}, {100, 32, 8, 4},
		{1000, 4, 8, 8}, {5, 4, 8, 2}, {896, 64, 8, 7}, {4864, 64, 8, 8},
	} {
		if err := checkParts(c.rows, c.align, c.parts, c.want); err != nil {
			t.Error(err)
		}
	}
	time.Sleep(2 * spinFor) // the workers park; the next call must wake them
	if err := check(1000, 4); err != nil {
		t.Fatal(err)
	}

	// A worker really runs parts: whoever takes part 0 waits until another part has run,
	// which with one caller can only happen on a worker.
	time.Sleep(2 * spinFor)
	var others atomic.Int32
	var stuck atomic.Bool
	parallelRows(64, 4, func(lo, hi int) {
		if lo != 0 {
			others.Add(1)
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for others.Load() == 0 {
			if time.Now().After(deadline) {
				stuck.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	if stuck.Load() {
		t.Fatal("no worker ran a part while the holder of part 0 waited 10 s")
	}
}

// checkParts runs parallelParts(rows, align, parts) at 3 threads and checks that f saw want
// parts covering [0, rows) in order, each of ⌈rows/parts⌉ rows rounded up to align but the last,
// which may be shorter.
func checkParts(rows, align, parts, want int) error {
	defer withThreads(3)()
	var mu sync.Mutex
	var got [][2]int
	parallelParts(rows, align, parts, func(lo, hi int) {
		mu.Lock()
		got = append(got, [2]int{lo, hi})
		mu.Unlock()
	})
	slices.SortFunc(got, func(a, b [2]int) int { return a[0] - b[0] })
	size := ((rows+parts-1)/parts + align - 1) / align * align
	if len(got) != want {
		return fmt.Errorf("parallelParts(%d, %d, %d): %d parts %v, want %d", rows, align, parts, len(got), got, want)
	}
	for i, p := range got {
		if p[0] != i*size || p[1] != min(rows, (i+1)*size) {
			return fmt.Errorf("parallelParts(%d, %d, %d): parts %v, want parts of %d rows", rows, align, parts, got, size)
		}
	}
	return nil
}
