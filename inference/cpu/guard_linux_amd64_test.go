package cpu

import (
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns n float32s whose last one ends where an unreadable page begins, so that a
// kernel reading one byte past them faults (the test crashes), and a function that unmaps them.
func guarded(t *testing.T, n int) ([]float32, func()) {
	t.Helper()
	page := syscall.Getpagesize()
	size := (4*n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	f := unsafe.Slice((*float32)(unsafe.Pointer(&mem[size-page-4*n])), n)
	return f, func() { syscall.Munmap(mem) }
}

// TestAttendKernelsReadNothingPast: scoresT7F32 on 1 to 32 positions and valuesR7F32 on 1 to 32
// columns read nothing past the last position or column they are given (the data end at an
// unreadable page), write nothing past them (the lanes after keep a sentinel), and give the sums
// a float64 loop gives, to rounding.
func TestAttendKernelsReadNothingPast(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(36, 1))
	const sentinel = -12345
	for _, hd := range []int{1, 64} {
		qt := randVec(rng, hd*8)
		for n := 1; n <= 32; n++ {
			// The keys of n positions in tiles: the last read is row hd-1 of the last tile used.
			last := (n-1)/KeyTile*KeyTile*hd + (hd-1)*KeyTile + (n-1)%KeyTile
			k, free := guarded(t, last+1)
			for i := range k {
				k[i] = rng.Float32() - 0.5
			}
			const ldd = 40
			dst := make([]float32, 7*ldd)
			for i := range dst {
				dst[i] = sentinel
			}
			scoresT7F32(&qt[0], &k[0], hd, &dst[0], ldd, n)
			for r := range 7 {
				for j := range ldd {
					got := dst[r*ldd+j]
					if j >= n {
						if got != sentinel {
							t.Fatalf("scoresT7F32 hd %d, %d positions: row %d lane %d written (%g)", hd, n, r, j, got)
						}
						continue
					}
					var want, mag float64
					for d := range hd {
						x := float64(qt[d*8+r]) * float64(k[j/KeyTile*KeyTile*hd+d*KeyTile+j%KeyTile])
						want, mag = want+x, mag+math.Abs(x)
					}
					if math.Abs(float64(got)-want) > 1e-6*mag+1e-9 {
						t.Fatalf("scoresT7F32 hd %d, %d positions: row %d position %d is %g, want %g", hd, n, r, j, got, want)
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
			v, free := guarded(t, (n-1)*ldv+w) // the last read: column w-1 of row n-1
			for i := range v {
				v[i] = rng.Float32() - 0.5
			}
			for _, acc := range []int{0, 1} {
				o := make([]float32, 7*ldo)
				for i := range o {
					o[i] = sentinel
					if acc == 1 && i%ldo < w {
						o[i] = 1
					}
				}
				valuesR7F32(&p[0], n, &v[0], ldv, n, &o[0], ldo, w, acc)
				for r := range 7 {
					for c := range ldo {
						got := o[r*ldo+c]
						if c >= w {
							if got != sentinel {
								t.Fatalf("valuesR7F32 %d positions, %d columns: row %d column %d written (%g)", n, w, r, c, got)
							}
							continue
						}
						want, mag := float64(acc), float64(acc)
						for j := range n {
							x := float64(p[r*n+j]) * float64(v[j*ldv+c])
							want, mag = want+x, mag+math.Abs(x)
						}
						if math.Abs(float64(got)-want) > 1e-6*mag+1e-9 {
							t.Fatalf("valuesR7F32 %d positions, %d columns, acc %d: row %d column %d is %g, want %g", n, w, acc, r, c, got, want)
						}
					}
				}
			}
			free()
		}
	}
}
