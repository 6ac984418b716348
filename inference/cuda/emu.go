//go:build cudaemu && cgo

package cuda

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fno-strict-aliasing
#include <stdlib.h>
#include <string.h>
#include "emu.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// emuDevice is a Device whose kernels run on the CPU (cudaemu.h). Its memory is C heap memory
// with a canary after every allocation, checked after each launch, so a kernel writing past a
// buffer's end fails the launch instead of corrupting memory unseen; copies are checked to lie
// inside one allocation. A failed launch makes every later operation fail, as a sticky CUDA
// error does. While a graph is captured, what CUDA refuses in a capture (a copy between host
// and device, a synchronisation, a free) fails and invalidates the capture, as it does there.
type emuDevice struct {
	allocs     map[Ptr]int // address → size
	capturing  bool
	captured   []emuLaunch
	captureErr error // the first operation refused during the capture
	err        error
}

type emuFunc struct {
	name string
	k    C.int
}

func (f *emuFunc) Name() string { return f.name }

// emuLaunch is a kernel launch, or (f nil) a memset of n bytes at p (src 0) or a copy of n
// bytes from src to p, as a graph records them.
type emuLaunch struct {
	f           *emuFunc
	grid, block Dim
	shared      int
	slots       []uint64
	p, src      Ptr
	n           int
}

// refuse fails an operation CUDA does not allow while the stream is captured, and invalidates
// the capture.
func (d *emuDevice) refuse(what string) error {
	err := fmt.Errorf("cudaemu: %s while a graph is being captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)", what)
	if d.captureErr == nil {
		d.captureErr = err
	}
	return err
}

func openEmulator() (Device, error) {
	return &emuDevice{allocs: map[Ptr]int{}}, nil
}

// multiprocessors is the OS threads the emulator runs blocks on, its counterpart of a
// device's multiprocessors.
func (d *emuDevice) multiprocessors() int { return runtime.GOMAXPROCS(0) }

func (d *emuDevice) Name() string {
	return fmt.Sprintf("cudaemu (the kernels compiled for the CPU, %d threads)", runtime.GOMAXPROCS(0))
}

func (d *emuDevice) Alloc(n int) (Ptr, error) {
	if n < 0 {
		return 0, fmt.Errorf("cudaemu: allocating %d bytes", n)
	}
	p := Ptr(C.emu_alloc(C.uint64_t(n)))
	if p == 0 {
		return 0, fmt.Errorf("cudaemu: out of memory allocating %d bytes", n)
	}
	d.allocs[p] = n
	return p, nil
}

func (d *emuDevice) Free(p Ptr) {
	if d.capturing {
		d.refuse("free")
		return
	}
	if _, ok := d.allocs[p]; ok {
		delete(d.allocs, p)
		C.emu_free(C.uint64_t(p))
	}
}

// span checks that [p, p+n) lies in one allocation.
func (d *emuDevice) span(p Ptr, n int) error {
	if n == 0 {
		return nil
	}
	for base, size := range d.allocs {
		if p >= base && uint64(p)+uint64(n) <= uint64(base)+uint64(size) {
			return nil
		}
	}
	return fmt.Errorf("cudaemu: %d bytes at %#x are not inside one allocation", n, uint64(p))
}

func (d *emuDevice) CopyIn(p Ptr, src unsafe.Pointer, n int) error {
	if d.capturing {
		return d.refuse("copy to the device")
	}
	if err := d.span(p, n); err != nil {
		return err
	}
	if n > 0 {
		C.emu_copy_in(C.uint64_t(p), src, C.uint64_t(n))
	}
	return nil
}

func (d *emuDevice) CopyOut(dst unsafe.Pointer, p Ptr, n int) error {
	if d.capturing {
		return d.refuse("copy from the device")
	}
	if err := d.span(p, n); err != nil {
		return err
	}
	if n > 0 {
		C.emu_copy_out(dst, C.uint64_t(p), C.uint64_t(n))
	}
	return d.Sync()
}

func (d *emuDevice) Zero(p Ptr, n int) error {
	if err := d.span(p, n); err != nil {
		return err
	}
	if d.capturing {
		d.captured = append(d.captured, emuLaunch{p: p, n: n})
		return nil
	}
	if d.err != nil {
		return d.err
	}
	if n > 0 {
		C.emu_zero(C.uint64_t(p), C.uint64_t(n))
	}
	return nil
}

func (d *emuDevice) Copy(dst, src Ptr, n int) error {
	if err := d.span(dst, n); err != nil {
		return err
	}
	if err := d.span(src, n); err != nil {
		return err
	}
	if n > 0 && uint64(dst) < uint64(src)+uint64(n) && uint64(src) < uint64(dst)+uint64(n) {
		return fmt.Errorf("cudaemu: copy of %d bytes from %#x to %#x: the ranges overlap", n, uint64(src), uint64(dst))
	}
	if d.capturing {
		d.captured = append(d.captured, emuLaunch{p: dst, src: src, n: n})
		return nil
	}
	if d.err != nil {
		return d.err
	}
	if n > 0 {
		C.emu_copy(C.uint64_t(dst), C.uint64_t(src), C.uint64_t(n))
	}
	return nil
}

func (d *emuDevice) Func(name string) (Func, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	k := C.emu_find(cname)
	if k < 0 {
		return nil, fmt.Errorf("cudaemu: no kernel %q", name)
	}
	return &emuFunc{name: name, k: k}, nil
}

// emuKernels lists the kernels compiled in, sorted.
func emuKernels() []string {
	var out []string
	for i := range int(C.emu_count()) {
		out = append(out, C.GoString(C.emu_name(C.int(i))))
	}
	sort.Strings(out)
	return out
}

func (d *emuDevice) Launch(f Func, grid, block Dim, shared int, args ...any) error {
	ef, ok := f.(*emuFunc)
	if !ok {
		return fmt.Errorf("cudaemu: launch of %T, not an emulator kernel", f)
	}
	if err := checkArgs(ef.name, args); err != nil {
		return err
	}
	if err := checkLaunch(ef.name, grid, block); err != nil {
		return err
	}
	slots, err := argSlots(nil, args)
	if err != nil {
		return fmt.Errorf("cudaemu: kernel %s: %w", ef.name, err)
	}
	l := emuLaunch{f: ef, grid: grid, block: block, shared: shared, slots: slots}
	if d.capturing {
		d.captured = append(d.captured, l)
		return nil
	}
	return d.run(l)
}

// run executes a launch: its blocks split over GOMAXPROCS goroutines, each block on one OS
// thread at a time.
func (d *emuDevice) run(l emuLaunch) error {
	if d.err != nil {
		return d.err
	}
	gx, gy, gz := l.grid.norm()
	bx, by, bz := l.block.norm()
	nblocks := int(gx) * int(gy) * int(gz)
	workers := min(nblocks, runtime.GOMAXPROCS(0))
	slots := (*C.uint64_t)(C.malloc(C.size_t(8 * max(1, len(l.slots)))))
	defer C.free(unsafe.Pointer(slots))
	copy(unsafe.Slice((*uint64)(unsafe.Pointer(slots)), len(l.slots)), l.slots)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := (*C.char)(C.malloc(512))
			defer C.free(unsafe.Pointer(buf))
			if C.emu_run(l.f.k, slots, C.int(len(l.slots)), C.uint(gx), C.uint(gy), C.uint(gz), C.uint(bx), C.uint(by), C.uint(bz), C.uint(l.shared), C.long(w), C.long(workers), buf, 512) != 0 {
				errs[w] = errors.New("cudaemu: " + C.GoString(buf))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.err = err
		return err
	}
	if err := d.checkCanaries(l.f.name); err != nil {
		d.err = err
		return err
	}
	return nil
}

func (d *emuDevice) checkCanaries(kernel string) error {
	for p, n := range d.allocs {
		if C.emu_canary_ok(C.uint64_t(p), C.uint64_t(n)) == 0 {
			return fmt.Errorf("cudaemu: kernel %s wrote past the end of a %d-byte buffer", kernel, n)
		}
	}
	return nil
}

func (d *emuDevice) Sync() error {
	if d.capturing {
		return d.refuse("stream synchronisation")
	}
	return d.err
}

func (d *emuDevice) BeginCapture() error {
	if d.capturing {
		return errors.New("cudaemu: capture already in progress")
	}
	d.capturing, d.captured, d.captureErr = true, nil, nil
	return nil
}

func (d *emuDevice) EndCapture() (Graph, error) {
	if !d.capturing {
		return nil, errors.New("cudaemu: no capture in progress")
	}
	g := &emuGraph{d: d, launches: d.captured}
	err := d.captureErr
	d.capturing, d.captured, d.captureErr = false, nil, nil
	if err != nil {
		return nil, fmt.Errorf("cudaemu: capture invalidated (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): %w", err)
	}
	return g, nil
}

func (d *emuDevice) Gemm(N, T, K int, w, x, out Ptr, ldo int, beta float32) (bool, error) {
	return false, nil
}

func (d *emuDevice) Close() error {
	d.capturing = false
	for p := range d.allocs {
		d.Free(p)
	}
	return nil
}

// emuGraph is a captured launch list, replayed in order (each launch's parameters as they were
// when captured, as a CUDA graph's are).
type emuGraph struct {
	d        *emuDevice
	launches []emuLaunch
}

func (g *emuGraph) Launch() error {
	if g.launches == nil {
		return errors.New("cudaemu: launch of a destroyed graph")
	}
	if g.d.capturing { // a graph launched into a capture becomes part of it
		g.d.captured = append(g.d.captured, g.launches...)
		return nil
	}
	for _, l := range g.launches {
		if l.f == nil {
			op := func() error { return g.d.Zero(l.p, l.n) }
			if l.src != 0 {
				op = func() error { return g.d.Copy(l.p, l.src, l.n) }
			}
			if err := op(); err != nil {
				return err
			}
			continue
		}
		if err := g.d.run(l); err != nil {
			return err
		}
	}
	return nil
}

func (g *emuGraph) Destroy() { g.launches = nil }
