//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// EnvDriver names a driver library to load instead of libcuda.so.1 (tests use it for fake
// drivers); EnvCUBLAS a cuBLAS library to load instead of the first of libcublas.so.13, .12
// and .11 that works with the driver ("off" runs the backend's own GEMM kernel everywhere).
const (
	EnvDriver = "CHAINEDSQL_CUDA_DRIVER"
	EnvCUBLAS = "CHAINEDSQL_CUDA_CUBLAS"
)

// minDriver is the oldest driver CUDA version that JIT-compiles the embedded PTX (ISA 7.8, from
// CUDA 11.8's nvcc): 11080 as cuDriverGetVersion reports it.
const minDriver = 11080

// driverDevice is a Device on the NVIDIA driver.
type driverDevice struct {
	name   string
	ctx    unsafe.Pointer
	stream unsafe.Pointer
	mod    unsafe.Pointer
	funcs  map[string]*driverFunc
	slots  *C.uint64_t // 32 argument slots in C memory
	blas   unsafe.Pointer
	ws     Ptr
	args   []uint64
	mem    int // bytes of device memory
	sms    int // streaming multiprocessors
}

type driverFunc struct {
	name   string
	fn     unsafe.Pointer
	shared int // dynamic shared memory the function was opened for
}

func (f *driverFunc) Name() string { return f.name }

func cuErr(r C.cu_result) string {
	buf := make([]byte, 256)
	C.cud_error_text(r, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

func check(what string, r C.cu_result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", what, cuErr(r))
}

func openDriver() (Device, error) {
	var cpath *C.char
	lib := "libcuda.so.1"
	if p := os.Getenv(EnvDriver); p != "" {
		lib = p
		cpath = C.CString(p)
		defer C.free(unsafe.Pointer(cpath))
	}
	ebuf := make([]byte, 512)
	if C.cud_open(cpath, (*C.char)(unsafe.Pointer(&ebuf[0])), C.int(len(ebuf))) != 0 {
		msg := C.GoString((*C.char)(unsafe.Pointer(&ebuf[0])))
		if strings.Contains(msg, "too old") {
			return nil, fmt.Errorf("cuda: %w: NVIDIA driver too old: %s", ErrUnavailable, msg)
		}
		return nil, fmt.Errorf("cuda: %w: no NVIDIA driver: cannot load %s (%s)", ErrUnavailable, lib, msg)
	}
	var count, version, major, minor, sms C.int
	var mem C.size_t
	name := make([]byte, 256)
	r := C.cud_init(&count, &version, (*C.char)(unsafe.Pointer(&name[0])), C.int(len(name)), &major, &minor, &sms, &mem)
	if version > 0 && version < minDriver {
		return nil, fmt.Errorf("cuda: %w: NVIDIA driver too old: it supports CUDA %d.%d, the kernels need %d.%d or later", ErrUnavailable, version/1000, version%1000/10, minDriver/1000, minDriver%1000/10)
	}
	if r != 0 || count == 0 {
		why := "no CUDA device"
		if r != 0 {
			why += ": " + cuErr(r)
		}
		return nil, fmt.Errorf("cuda: %w: %s", ErrUnavailable, why)
	}
	if major < 8 {
		return nil, fmt.Errorf("cuda: %w: device 0 (%s) is compute capability %d.%d; the kernels need 8.0 (Ampere) or later", ErrUnavailable, C.GoString((*C.char)(unsafe.Pointer(&name[0]))), major, minor)
	}
	d := &driverDevice{
		name:  fmt.Sprintf("%s (sm_%d%d, %d MiB, driver CUDA %d.%d)", C.GoString((*C.char)(unsafe.Pointer(&name[0]))), major, minor, mem>>20, version/1000, version%1000/10),
		funcs: map[string]*driverFunc{},
		slots: (*C.uint64_t)(C.malloc(C.size_t(8 * maxArgs))),
		mem:   int(mem),
		sms:   int(sms),
	}
	if err := check("primary context", C.cud_ctx(&d.ctx, &d.stream)); err != nil {
		C.free(unsafe.Pointer(d.slots))
		return nil, err
	}
	cptx := C.CString(ptxSource)
	defer C.free(unsafe.Pointer(cptx))
	log := make([]byte, 8192)
	if r := C.cud_module(d.ctx, cptx, &d.mod, (*C.char)(unsafe.Pointer(&log[0])), C.int(len(log))); r != 0 {
		d.Close()
		why := cuErr(r)
		if r == 222 { // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
			return nil, fmt.Errorf("cuda: %w: NVIDIA driver too old to compile the kernels' PTX: %s", ErrUnavailable, why)
		}
		return nil, fmt.Errorf("cuda: loading the kernels' PTX: %s: %s", why, strings.TrimSpace(C.GoString((*C.char)(unsafe.Pointer(&log[0])))))
	}
	d.openBLAS(int(version) / 1000)
	return d, nil
}

// maxArgs is the most parameters a kernel launch may take.
const maxArgs = 32

// cublasWorkspace is the workspace handed to cuBLAS (so that it allocates nothing while a
// graph is captured).
const cublasWorkspace = 32 << 20

// openBLAS loads cuBLAS when present; without it Gemm reports false and the device's name
// says why (the products then run on the backend's own kernels).
func (d *driverDevice) openBLAS(driverMajor int) {
	path := os.Getenv(EnvCUBLAS)
	if path == "off" {
		d.name += ", cuBLAS off"
		return
	}
	ws, err := d.Alloc(cublasWorkspace)
	if err != nil {
		d.name += ", no cuBLAS: " + err.Error()
		return
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	ebuf, which := make([]byte, 1024), make([]byte, 512)
	if C.cublas_open(d.ctx, d.stream, cpath, C.int(driverMajor), C.cu_ptr(ws), cublasWorkspace, &d.blas,
		(*C.char)(unsafe.Pointer(&which[0])), C.int(len(which)), (*C.char)(unsafe.Pointer(&ebuf[0])), C.int(len(ebuf))) != 0 {
		d.blas = nil
		d.Free(ws)
		d.name += ", no cuBLAS (" + C.GoString((*C.char)(unsafe.Pointer(&ebuf[0]))) + ")"
		return
	}
	d.ws = ws
	d.name += ", cuBLAS " + C.GoString((*C.char)(unsafe.Pointer(&which[0])))
}

func (d *driverDevice) Name() string { return d.name }

func (d *driverDevice) multiprocessors() int { return d.sms }

func (d *driverDevice) hasBLAS() bool { return d.blas != nil }

func (d *driverDevice) Alloc(n int) (Ptr, error) {
	var p C.cu_ptr
	if err := check(fmt.Sprintf("allocating %d bytes", n), C.cud_alloc(d.ctx, &p, C.size_t(max(n, 1)))); err != nil {
		return 0, err
	}
	return Ptr(p), nil
}

func (d *driverDevice) Free(p Ptr) {
	if p != 0 {
		C.cud_free(d.ctx, C.cu_ptr(p))
	}
}

func (d *driverDevice) CopyIn(p Ptr, src unsafe.Pointer, n int) error {
	if n == 0 {
		return nil
	}
	return check("copy to device", C.cud_htod(d.ctx, d.stream, C.cu_ptr(p), src, C.size_t(n)))
}

func (d *driverDevice) CopyOut(dst unsafe.Pointer, p Ptr, n int) error {
	if n == 0 {
		return d.Sync()
	}
	return check("copy from device", C.cud_dtoh(d.ctx, d.stream, dst, C.cu_ptr(p), C.size_t(n)))
}

func (d *driverDevice) Copy(dst, src Ptr, n int) error {
	if n == 0 {
		return nil
	}
	return check("device-to-device copy", C.cud_dtod(d.ctx, d.stream, C.cu_ptr(dst), C.cu_ptr(src), C.size_t(n)))
}

func (d *driverDevice) Zero(p Ptr, n int) error {
	return check("memset", C.cud_zero(d.ctx, d.stream, C.cu_ptr(p), C.size_t(n)))
}

func (d *driverDevice) Func(name string) (Func, error) {
	if f := d.funcs[name]; f != nil {
		return f, nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := &driverFunc{name: name}
	if err := check("kernel "+name, C.cud_func(d.ctx, d.mod, cname, &f.fn)); err != nil {
		return nil, err
	}
	d.funcs[name] = f
	return f, nil
}

func (d *driverDevice) Launch(f Func, grid, block Dim, shared int, args ...any) error {
	df, ok := f.(*driverFunc)
	if !ok {
		return fmt.Errorf("cuda: launch of %T, not a driver kernel", f)
	}
	if len(args) > maxArgs {
		return fmt.Errorf("cuda: kernel %s: %d arguments, at most %d", df.name, len(args), maxArgs)
	}
	if err := checkArgs(df.name, args); err != nil {
		return err
	}
	if err := checkLaunch(df.name, grid, block); err != nil {
		return err
	}
	var err error
	if d.args, err = argSlots(d.args, args); err != nil {
		return fmt.Errorf("cuda: kernel %s: %w", df.name, err)
	}
	if shared > 48<<10 && shared > df.shared {
		if err := check("kernel "+df.name+" shared memory", C.cud_set_shared(d.ctx, df.fn, C.int(shared))); err != nil {
			return err
		}
		df.shared = shared
	}
	slots := unsafe.Slice((*uint64)(unsafe.Pointer(d.slots)), maxArgs)
	copy(slots, d.args)
	gx, gy, gz := grid.norm()
	bx, by, bz := block.norm()
	return check("launch "+df.name, C.cud_launch(d.ctx, d.stream, df.fn, C.uint(gx), C.uint(gy), C.uint(gz), C.uint(bx), C.uint(by), C.uint(bz), C.uint(shared), d.slots, C.int(len(d.args))))
}

func (d *driverDevice) Sync() error { return check("synchronize", C.cud_sync(d.ctx, d.stream)) }

func (d *driverDevice) BeginCapture() error {
	return check("begin graph capture", C.cud_begin_capture(d.ctx, d.stream))
}

func (d *driverDevice) EndCapture() (Graph, error) {
	g := &driverGraph{d: d}
	if err := check("end graph capture", C.cud_end_capture(d.ctx, d.stream, &g.exec)); err != nil {
		return nil, err
	}
	return g, nil
}

func (d *driverDevice) Gemm(N, T, K int, w, x, out Ptr, ldo int, beta float32) (bool, error) {
	if d.blas == nil {
		return false, nil
	}
	if s := C.cublas_gemm_bf16(d.ctx, d.blas, C.int(N), C.int(T), C.int(K), C.cu_ptr(w), C.cu_ptr(x), C.cu_ptr(out), C.int(ldo), C.float(beta)); s != 0 {
		return true, fmt.Errorf("cuda: cublasGemmEx %d×%d×%d: status %d", N, T, K, s)
	}
	return true, nil
}

func (d *driverDevice) Close() error {
	if d.ctx == nil {
		return nil
	}
	C.cublas_close(d.ctx, d.blas)
	d.Free(d.ws)
	err := check("release context", C.cud_close(d.ctx, d.stream, d.mod))
	d.ctx, d.stream, d.blas, d.mod = nil, nil, nil, nil
	C.free(unsafe.Pointer(d.slots))
	return err
}

// memInfo returns the free and total device memory.
func (d *driverDevice) memInfo() (free, total int, err error) {
	var f, t C.size_t
	err = check("memory info", C.cud_mem_info(d.ctx, &f, &t))
	return int(f), int(t), err
}

type driverGraph struct {
	d    *driverDevice
	exec unsafe.Pointer
}

func (g *driverGraph) Launch() error {
	return check("graph launch", C.cud_graph_launch(g.d.ctx, g.d.stream, g.exec))
}

func (g *driverGraph) Destroy() {
	if g.exec != nil {
		C.cud_graph_destroy(g.d.ctx, g.exec)
		g.exec = nil
	}
}
