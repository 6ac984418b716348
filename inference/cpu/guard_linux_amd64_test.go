package cpu

import (
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns a pointer to n elements of size bytes each whose last one ends where an
// unreadable page begins, so that a kernel reading one byte past them faults (the test
// crashes), and a function that unmaps them.
func guarded(t *testing.T, n, size int) (unsafe.Pointer, func()) {
	t.Helper()
	page := syscall.Getpagesize()
	total := (size*n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[total-page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	return unsafe.Pointer(&mem[total-page-size*n]), func() { syscall.Munmap(mem) }
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
