package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/cpu"
)

// EnvTestBackend selects the device the kernel and model tests run on: cuda-emulated (the
// default; skipped in builds without -tags cudaemu) or cuda (the real device:
// scripts/gpu-check.sh sets it).
const EnvTestBackend = "CHAINEDSQL_CUDA_TEST"

func testBackend() string {
	if b := os.Getenv(EnvTestBackend); b != "" {
		return b
	}
	return BackendEmulated
}

// testDevice opens the test backend's device, skipping where it cannot run.
func testDevice(t testing.TB) Device {
	t.Helper()
	d, err := Open(testBackend())
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvTestBackend) == "" {
		t.Skipf("%v (run go test -tags cudaemu, or set %s=cuda on a GPU machine)", err, EnvTestBackend)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// buf is a device buffer of n values of type T, for tests.
func upload[T any](t testing.TB, d Device, v []T) Ptr {
	t.Helper()
	var z T
	n := len(v) * int(unsafe.Sizeof(z))
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	if n > 0 {
		if err := d.CopyIn(p, unsafe.Pointer(&v[0]), n); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func download[T any](t testing.TB, d Device, p Ptr, n int) []T {
	t.Helper()
	out := make([]T, n)
	var z T
	if n > 0 {
		if err := d.CopyOut(unsafe.Pointer(&out[0]), p, n*int(unsafe.Sizeof(z))); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func mustFunc(t testing.TB, d Device, name string) Func {
	t.Helper()
	f, err := d.Func(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustLaunch(t testing.TB, d Device, f Func, grid, block Dim, shared int, args ...any) {
	t.Helper()
	if err := d.Launch(f, grid, block, shared, args...); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestSelftest checks barriers, shared memory, every shuffle, the votes and atomics against
// their CUDA definitions: on the emulator that checks the execution model, on a GPU the
// assumptions the emulator makes.
func TestSelftest(t *testing.T) {
	d := testDevice(t)
	const G = 5
	out := upload(t, d, make([]int32, G*64*8))
	counter := upload(t, d, []int32{0})
	fsum := upload(t, d, []float32{0})
	mustLaunch(t, d, mustFunc(t, d, "selftest"), Dim{X: G}, Dim{X: 64}, 64*4, out, counter, fsum)
	got := download[int32](t, d, out, G*64*8)
	for b := range G {
		var oddBallot [2]int32
		for w := range 2 {
			var m uint32
			for l := range 32 {
				if (b*64+w*32+l)&1 == 1 {
					m |= 1 << l
				}
			}
			oddBallot[w] = int32(m)
		}
		sum := int32(0)
		for i := range 64 {
			sum += int32(b*64 + i)
		}
		for i := range 64 {
			v, lane, w := b*64+i, i&31, i>>5
			down := v
			if lane+3 < 32 {
				down = v + 3
			}
			any := int32(0)
			if w == 1 {
				any = 1
			}
			want := []int32{int32(v ^ 1), int32(down), int32(b*64 + w*32 + 5), oddBallot[w], any, 1, sum, int32(b*64 + 63 - i)}
			for k, x := range want {
				if g := got[v*8+k]; g != x {
					t.Fatalf("block %d thread %d item %d: %d, want %d", b, i, k, g, x)
				}
			}
		}
	}
	if c := download[int32](t, d, counter, 1)[0]; c != G*64 {
		t.Errorf("atomic counter %d, want %d", c, G*64)
	}
	if s := download[float32](t, d, fsum, 1)[0]; s != G*64*0.5 {
		t.Errorf("atomic float sum %v, want %v", s, G*64*0.5)
	}
}

// TestMMA checks mma_bf16, the warp's tensor-core product (on the emulator its model in
// emu_runtime.cc, on a GPU the hardware), lane by lane: mma_selftest loads each lane's
// fragments with the PTX ISA's m16n8k16 formulas, and each of a lane's four results must be
// its (row, column) of a·b + c, then of a·b + (a·b + c), computed here in float64 from the
// whole matrices, for 6 random sets (two warps per block, three blocks) with some zeros,
// negative zeros and exact cancellations among them.
//
// Tolerance: products of two bf16 are exact in f32, so the only error is the f32 summation of
// 17 terms, at most 17·2^-24 of Σ|terms|; the hardware's order and internal precision are not
// specified, so the bound allowed is 2^-18 of Σ|terms| (a misplaced element costs O(1)).
func TestMMA(t *testing.T) {
	d := testDevice(t)
	const G, sets = 3, 6
	r := rand.New(rand.NewPCG(16, 8))
	a := randBF16Values(r, sets*256)
	b := randBF16Values(r, sets*128)
	c := make([]float32, sets*128)
	for i := range c {
		c[i] = (r.Float32()*2 - 1) * 8
	}
	a[3], b[5], c[7] = 0, 0x8000, 0 // a zero, a negative zero
	b[8], b[16] = cpu.F32ToBF16(1), cpu.F32ToBF16(1)
	a[0], a[1] = cpu.F32ToBF16(3), cpu.F32ToBF16(-3) // row 0, columns 0 and 1 cancel
	out := upload(t, d, make([]float32, sets*32*8))
	mustLaunch(t, d, mustFunc(t, d, "mma_selftest"), Dim{X: G}, Dim{X: 64}, 0, out, upload(t, d, a), upload(t, d, b), upload(t, d, c))
	got := download[float32](t, d, out, sets*32*8)
	for m := range sets {
		for lane := range 32 {
			gid, tig := lane>>2, lane&3
			for i := range 4 {
				row, col := gid+8*(i>>1), 2*tig+i&1
				ab, mag := 0.0, 0.0
				for k := range 16 {
					p := float64(cpu.BF16ToF32(a[m*256+row*16+k])) * float64(cpu.BF16ToF32(b[m*128+k*8+col]))
					ab += p
					mag += math.Abs(p)
				}
				cv := float64(c[m*128+row*8+col])
				for j, want := range []float64{ab + cv, 2*ab + cv} {
					g := float64(got[(m*32+lane)*8+4*j+i])
					tol := math.Ldexp(float64(j+1)*mag+math.Abs(cv), -18)
					if math.IsNaN(g) || math.Abs(g-want) > tol {
						t.Fatalf("set %d lane %d d[%d] (row %d, col %d), product %d: %v, want %v (tolerance %.3g)", m, lane, i, row, col, j+1, g, want, tol)
					}
				}
			}
		}
	}
}

// randBF16Values is n bf16 values in (-4, 4) with all their mantissa bits used.
func randBF16Values(r *rand.Rand, n int) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		v[i] = cpu.F32ToBF16((r.Float32()*2 - 1) * 4)
	}
	return v
}

// TestCheckTypes: the CUDA backends take the default and bf16 weight and KV cache types, in any
// case, and refuse the others with the flag's name and value.
func TestCheckTypes(t *testing.T) {
	for _, c := range []struct{ dtype, kv, err string }{
		{"", "", ""}, {"stored", "", ""}, {"BF16", "bf16", ""}, {"", "BF16", ""},
		{"q8", "", "weight type q8 is for the cpu backend"},
		{"f32", "bf16", "weight type f32 is for the cpu backend"},
		{"", "f32", "KV cache type f32 is for the cpu backend"},
	} {
		err := CheckTypes(BackendCUDA, c.dtype, c.kv)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckTypes(%q, %q) = %v; want %q", c.dtype, c.kv, err, c.err)
		}
	}
}
