package hugemem

import "unsafe"

// Float32s, Uint16s and Int8s return the first n elements of b viewed as that type (b must hold
// at least n elements and be aligned for the type, as Alloc's and Arena.Alloc's memory is).
func Float32s(b []byte, n int) []float32 { return view[float32](b, n) }

// Uint16s: see Float32s.
func Uint16s(b []byte, n int) []uint16 { return view[uint16](b, n) }

// Int8s: see Float32s.
func Int8s(b []byte, n int) []int8 { return view[int8](b, n) }

func view[T any](b []byte, n int) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	if n < 0 || n*size > len(b) {
		panic("hugemem: view of more elements than the buffer holds")
	}
	if n == 0 {
		return []T{}
	}
	if uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(z) != 0 {
		panic("hugemem: view of misaligned memory")
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
