package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelRows: every row is visited exactly once, chunk boundaries are multiples of align,
// for several thread counts and concurrent callers (one of which gets the pool, the others run
// serially), including calls after the workers have parked.
func TestParallelRows(t *testing.T) {
	check := func(rows, align int) error {
		seen := make([]atomic.Int32, rows)
		parallelRows(rows, align, func(lo, hi int) {
			if lo%align != 0 || lo > hi || hi > rows {
				panic(fmt.Sprintf("chunk [%d,%d) of %d rows, align %d", lo, hi, rows, align))
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
	time.Sleep(2 * spinFor) // the workers park; the next call must wake them
	if err := check(1000, 4); err != nil {
		t.Fatal(err)
	}

	// A worker really runs chunks: whoever takes chunk 0 waits until another chunk has run,
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
		t.Fatal("no worker ran a chunk while the holder of chunk 0 waited 10 s")
	}
}
