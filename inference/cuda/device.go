// Package cuda is the student runtime's CUDA backend: the Qwen2 forward pass (bf16 weights, f32
// accumulation, a paged KV cache, sampling) as kernels written in CUDA C (kernels/*.cu), shipped
// as PTX embedded in the binary and JIT-compiled by the driver, which is loaded at run time with
// dlopen: building needs no CUDA toolkit and the binary runs where there is no GPU, refusing the
// backend with one line.
//
// The same kernel sources also compile for the CPU under the cudaemu build tag, through a small
// execution model of CUDA (cudaemu.h): blocks, threads with real barriers, shared memory, warp
// shuffles and votes, atomics. Both sit behind Device, so the forward pass drives identical
// launches, buffers and parameters on either; the tests run on the emulator here and on a real
// device where one exists (scripts/gpu-check.sh). docs/DESIGN.md says what the emulator cannot
// show.
package cuda

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// Ptr is a device memory address (0 is none).
type Ptr uint64

// Dim is a grid or block extent in x, y, z (zeros count as 1).
type Dim struct{ X, Y, Z int }

// Func is a kernel of the loaded module.
type Func interface {
	// Name is the kernel's symbol.
	Name() string
}

// Device is what the model needs of a CUDA device: memory, kernels, one stream, graphs. Every
// operation is ordered on the device's one stream; copies to the host wait for it. A Device is
// not safe for concurrent use.
type Device interface {
	// Name describes the device (model, compute capability, memory or "cudaemu").
	Name() string
	// Alloc returns n bytes of device memory.
	Alloc(n int) (Ptr, error)
	// Free releases memory from Alloc.
	Free(p Ptr)
	// CopyIn copies n bytes from host memory at src to p.
	CopyIn(p Ptr, src unsafe.Pointer, n int) error
	// CopyOut waits for the stream and copies n bytes at p to host memory at dst.
	CopyOut(dst unsafe.Pointer, p Ptr, n int) error
	// Copy queues a copy of n bytes from src to dst, both device memory, not overlapping.
	Copy(dst, src Ptr, n int) error
	// Zero sets n bytes at p to zero.
	Zero(p Ptr, n int) error
	// Func looks a kernel up by name.
	Func(name string) (Func, error)
	// Launch queues f on grid × block threads with shared bytes of dynamic shared memory.
	// args are the kernel's parameters in order: Ptr, int32, uint32 or float32.
	Launch(f Func, grid, block Dim, shared int, args ...any) error
	// Sync waits for the stream and returns the first error of the work queued.
	Sync() error
	// BeginCapture starts recording the stream's work into a graph instead of running it.
	BeginCapture() error
	// EndCapture stops recording and returns the graph, ready to launch.
	EndCapture() (Graph, error)
	// Gemm computes out[t][n] = Σ_k x[t][k]·w[n][k] + beta·out[t][n] for t < T, n < N with a
	// vendor BLAS (cuBLAS): w is bf16 row-major N×K (a weight), x bf16 row-major T×K, out f32
	// row-major with row stride ldo. ok is false where the device has none; the caller then runs
	// its own kernel.
	Gemm(N, T, K int, w, x, out Ptr, ldo int, beta float32) (ok bool, err error)
	// Close releases the device and everything allocated on it.
	Close() error
}

// Graph is a recorded sequence of the stream's work.
type Graph interface {
	// Launch replays the graph on the stream.
	Launch() error
	// Destroy releases it.
	Destroy()
}

// Backend names, as --backend takes them.
const (
	BackendCUDA     = "cuda"
	BackendEmulated = "cuda-emulated"
)

// CheckTypes returns the error of a weight type or a KV cache type, as --dtype and --kv name them
// ("" and "stored": the defaults), that backend does not hold: the CUDA backends hold both in
// bf16, so a weight type other than bf16 and a KV cache type other than bf16 are the cpu
// backend's.
func CheckTypes(backend, dtype, kv string) error {
	if d := strings.ToLower(dtype); d != "" && d != "stored" && d != "bf16" {
		return fmt.Errorf("--backend %s holds the weights in bf16; weight type %s is for the cpu backend", backend, dtype)
	}
	if k := strings.ToLower(kv); k != "" && k != "bf16" {
		return fmt.Errorf("--backend %s keeps its KV cache in bf16; KV cache type %s is for the cpu backend", backend, kv)
	}
	return nil
}

// ErrUnavailable is wrapped by every error saying a backend cannot run here (no driver, no
// device, a driver too old, a binary built without the emulator).
var ErrUnavailable = errors.New("backend unavailable")

// Open opens device 0 of backend: BackendCUDA (the NVIDIA driver) or BackendEmulated (the CPU
// execution model, in binaries built with -tags cudaemu).
func Open(backend string) (Device, error) {
	switch backend {
	case BackendCUDA:
		return openDriver()
	case BackendEmulated:
		return openEmulator()
	}
	return nil, fmt.Errorf("cuda: backend %q: want %s or %s", backend, BackendCUDA, BackendEmulated)
}

// Check opens and closes backend's device: nil where the backend can run here, else Open's
// error (one line, wrapping ErrUnavailable, for no driver, no device or a driver too old).
func Check(backend string) error {
	d, err := Open(backend)
	if err != nil {
		return err
	}
	return d.Close()
}

// argSlots packs kernel arguments into 8-byte slots (the layout both the driver's kernelParams
// pointers and the emulator read: each parameter at the start of its own slot, little-endian).
func argSlots(dst []uint64, args []any) ([]uint64, error) {
	dst = dst[:0]
	for i, a := range args {
		var v uint64
		switch x := a.(type) {
		case Ptr:
			v = uint64(x)
		case int32:
			v = uint64(uint32(x))
		case uint32:
			v = uint64(x)
		case float32:
			v = uint64(*(*uint32)(unsafe.Pointer(&x)))
		case int:
			if x != int(int32(x)) {
				return nil, fmt.Errorf("cuda: kernel argument %d: %d does not fit an int32", i, x)
			}
			v = uint64(uint32(int32(x)))
		default:
			return nil, fmt.Errorf("cuda: kernel argument %d has type %T; want Ptr, int32, uint32 or float32", i, a)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

func (d Dim) norm() (x, y, z uint32) {
	f := func(v int) uint32 {
		if v <= 0 {
			return 1
		}
		return uint32(v)
	}
	return f(d.X), f(d.Y), f(d.Z)
}
