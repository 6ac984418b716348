package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns a pointer to n elements of size bytes each whose last one ends where an
// unreadable page begins, so that a kernel reading one byte past them faults (the test
// crashes), and a function that unmaps them.
func guarded(t *testing.T, n, size int) (unsafe.Pointer, func()) {
	return guardedSide(t, n, size, false)
}

// guardedSide is guarded, or with before the elements start where an unreadable page ends, so
// that a kernel reading one byte before them faults.
func guardedSide(t *testing.T, n, size int, before bool) (unsafe.Pointer, func()) {
	t.Helper()
	page := syscall.Getpagesize()
	total := (size*n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	guard, start := mem[total-page:], total-page-size*n
	if before {
		guard, start = mem[:page], page
	}
	if err := syscall.Mprotect(guard, syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	return unsafe.Pointer(&mem[start]), func() { syscall.Munmap(mem) }
}

// guardedValues returns n random values at the end of guarded memory, f32 or (b16) bf16, their
// values as f32 and the pointer the kernel takes.
func guardedValues(t *testing.T, rng *rand.Rand, n int, b16 bool) ([]float32, unsafe.Pointer, func()) {
	vals := make([]float32, n)
	if b16 {
		p, free := guarded(t, n, 2)
		raw := unsafe.Slice((*uint16)(p), n)
		for i := range raw {
			raw[i] = F32ToBF16(rng.Float32() - 0.5)
			vals[i] = BF16ToF32(raw[i])
		}
		return vals, p, free
	}
	p, free := guarded(t, n, 4)
	raw := unsafe.Slice((*float32)(p), n)
	for i := range raw {
		raw[i] = rng.Float32() - 0.5
		vals[i] = raw[i]
	}
	return vals, p, free
}

// TestAttendKernelsReadNothingPast: scoresT7 on 1 to 32 positions and valuesR7 on 1 to 32
// columns, over f32 and bf16, read nothing past the last position or column they are given (the
// data end at an unreadable page), write nothing past them (the lanes after keep a sentinel), and
// give the sums a float64 loop gives, to rounding.
func TestAttendKernelsReadNothingPast(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(36, 1))
	const sentinel = -12345
	for b16 := range 2 {
		for _, hd := range []int{1, 64} {
			qt := randVec(rng, hd*8)
			for n := 1; n <= 32; n++ {
				// The keys of n positions in tiles: the last read is row hd-1 of the last tile used.
				last := (n-1)/KeyTile*KeyTile*hd + (hd-1)*KeyTile + (n-1)%KeyTile
				k, kp, free := guardedValues(t, rng, last+1, b16 == 1)
				const ldd = 40
				dst := make([]float32, 7*ldd)
				for i := range dst {
					dst[i] = sentinel
				}
				scoresT7(&qt[0], kp, hd, &dst[0], ldd, n, b16, nil, 0)
				for r := range 7 {
					for j := range ldd {
						got := dst[r*ldd+j]
						if j >= n {
							if got != sentinel {
								t.Fatalf("scoresT7 bf16 %d, hd %d, %d positions: row %d lane %d written (%g)", b16, hd, n, r, j, got)
							}
							continue
						}
						var want, mag float64
						for d := range hd {
							x := float64(qt[d*8+r]) * float64(k[j/KeyTile*KeyTile*hd+d*KeyTile+j%KeyTile])
							want, mag = want+x, mag+math.Abs(x)
						}
						if math.Abs(float64(got)-want) > 1e-6*mag+1e-9 {
							t.Fatalf("scoresT7 bf16 %d, hd %d, %d positions: row %d position %d is %g, want %g", b16, hd, n, r, j, got, want)
						}
					}
				}
				free()
			}
		}
		for _, n := range []int{1, 5, 64} {
			const ldv, ldo = 40, 40
			p := randVec(rng, 7*n)
			for w := 1; w <= 32; w++ {
				v, vp, free := guardedValues(t, rng, (n-1)*ldv+w, b16 == 1) // the last read: column w-1 of row n-1
				for acc := range 2 {
					o := make([]float32, 7*ldo)
					for i := range o {
						o[i] = sentinel
						if acc == 1 && i%ldo < w {
							o[i] = 1
						}
					}
					valuesR7(&p[0], n, vp, ldv, n, &o[0], ldo, w, acc, b16, nil, 0)
					for r := range 7 {
						for c := range ldo {
							got := o[r*ldo+c]
							if c >= w {
								if got != sentinel {
									t.Fatalf("valuesR7 bf16 %d, %d positions, %d columns: row %d column %d written (%g)", b16, n, w, r, c, got)
								}
								continue
							}
							want, mag := float64(acc), float64(acc)
							for j := range n {
								x := float64(p[r*n+j]) * float64(v[j*ldv+c])
								want, mag = want+x, mag+math.Abs(x)
							}
							if math.Abs(float64(got)-want) > 1e-6*mag+1e-9 {
								t.Fatalf("valuesR7 bf16 %d, %d positions, %d columns, acc %d: row %d column %d is %g, want %g", b16, n, w, acc, r, c, got, want)
							}
						}
					}
				}
				free()
			}
		}
	}
}

// TestPackRowsReadNothingBefore: packRows, which the matrix-matrix kernels' packing and
// packQ8Panels run on weights and on q8 scales, reads nothing before the matrix it packs (the data
// start where an unreadable page ends) when the 16 rows from r run past the last row, the second
// panel of a group of fewer than 17 rows (a fault is reported, not a crash: SetPanicOnFault).
// Before, the partial 64-byte chunk's gathers took the rows' offsets from row r while their base
// was the last row, up to 16 rows before the data: a crash where the memory before is unmapped,
// which the half scales widened into a small buffer per product (packScales) made likely.
// Through MatMul, a 4-row q8 matrix in such memory, with f32 and with half scales, is multiplied
// by 16 input rows (gemmQ8Range; AVX2's gemmQ8RangeAVX2 with CHAINEDSQL_NOAVX512=1).
func TestPackRowsReadNothingBefore(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512: packRows is its tier's")
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	noFault := func(what string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: %v", what, r)
			}
		}()
		f()
	}
	rng := rand.New(rand.NewPCG(77, 1))
	for _, rowBytes := range []int{4, 44, 64, 100} {
		for m := 1; m <= 20; m++ {
			p, free := guardedSide(t, m*rowBytes, 1, true)
			data := unsafe.Slice((*byte)(p), m*rowBytes)
			for i := range data {
				data[i] = byte(rng.IntN(256))
			}
			groups := (rowBytes + 3) / 4
			for r := 0; r < m || r == 16; r += 16 {
				dst := make([]byte, groups*64)
				var mask uint64
				noFault(fmt.Sprintf("%d rows of %d bytes from row %d", m, rowBytes, r), func() {
					mask = packRows(unsafe.Pointer(&dst[0]), 64, p, rowBytes, r, m-1, m, 0, rowBytes, 0)
				})
				for j := range 16 {
					if r+j >= m {
						if mask&(1<<j) != 0 {
							t.Fatalf("%d rows from row %d: row %d past the end in the store mask %#x", m, r, r+j, mask)
						}
						continue
					}
					for g := range groups {
						if got, want := dst[g*64+4*j:g*64+4*j+4], data[(r+j)*rowBytes+4*g:(r+j)*rowBytes+4*g+4]; string(got) != string(want) {
							t.Fatalf("%d rows of %d bytes from row %d: row %d group %d packed %v, want %v", m, rowBytes, r, r+j, g, got, want)
						}
					}
				}
			}
			free()
		}
	}
	const rows, cols, n = 4, 352, 16
	w := randMatrix(rng, Q8, rows, cols)
	qp, freeQ := guardedSide(t, rows*cols, 1, true)
	defer freeQ()
	sp, freeS := guardedSide(t, rows*cols/Q8Block, 4, true)
	defer freeS()
	gw := *w
	gw.Q8, gw.Scales = unsafe.Slice((*int8)(qp), rows*cols), unsafe.Slice((*float32)(sp), rows*cols/Q8Block)
	copy(gw.Q8, w.Q8)
	copy(gw.Scales, w.Scales)
	h := convertedCopy(t, w, HalveQ8Scales)
	h.Q8 = gw.Q8
	x := randVec(rng, n*cols)
	want, got := make([]float32, n*rows), make([]float32, n*rows)
	noFault("f32 scales", func() { MatMul(want, &gw, x, n) })
	noFault("half scales", func() { MatMul(got, h, x, n) })
	if i := sameBits(got, want); i >= 0 {
		t.Fatalf("output %d: %g with half scales, %g with f32", i, got[i], want[i])
	}
}
