package cuda

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Regenerate the PTX after changing kernels/*.cu, *.cuh or nvcc.flags (needs nvcc; see
// docs/DESIGN.md, "CUDA backend"); TestPTXCurrent fails while it is stale.
//go:generate bash kernels/gen.sh

// ptxSource is the kernels compiled for compute_80.
//
//go:embed kernels/kernels.ptx
var ptxSource string

// ptxSignatures maps each entry point of the embedded PTX to its parameters' types as the PTX
// declares them ("u64" for a pointer, "u32" or "s32" for an int, "f32" for a float).
var ptxSignatures = sync.OnceValue(func() map[string][]string {
	entry := regexp.MustCompile(`(?s)\.visible \.entry (\w+)\((.*?)\)`)
	param := regexp.MustCompile(`\.param \.(\w+) `)
	sigs := map[string][]string{}
	for _, m := range entry.FindAllStringSubmatch(ptxSource, -1) {
		var types []string
		for _, p := range param.FindAllStringSubmatch(m[2], -1) {
			types = append(types, p[1])
		}
		sigs[m[1]] = types
	}
	return sigs
})

// checkArgs checks a launch's arguments against the kernel's parameters in the PTX: their
// number, and for each a Ptr where the kernel takes 64 bits, an integer where it takes a 32-bit
// integer, a float32 where it takes a float. cuLaunchKernel cannot check this (it reads each
// parameter's size from the module, whatever the caller passed), so a mismatch would otherwise
// show only as wrong results or a fault on the device. Kernels not in the PTX (the emulator's
// own test kernels) pass.
func checkArgs(kernel string, args []any) error {
	sig, ok := ptxSignatures()[kernel]
	if !ok {
		return nil
	}
	if len(args) != len(sig) {
		return fmt.Errorf("cuda: kernel %s takes %d parameters (%s), launched with %d", kernel, len(sig), strings.Join(sig, " "), len(args))
	}
	for i, a := range args {
		var want string
		switch a.(type) {
		case Ptr:
			want = "u64 b64 s64"
		case int32, uint32, int:
			want = "u32 s32 b32"
		case float32:
			want = "f32"
		default:
			return fmt.Errorf("cuda: kernel %s argument %d has type %T; want Ptr, int32, uint32 or float32", kernel, i, a)
		}
		if !strings.Contains(want, sig[i]) {
			return fmt.Errorf("cuda: kernel %s parameter %d is .%s in the PTX, launched with a %T", kernel, i, sig[i], a)
		}
	}
	return nil
}

// checkLaunch checks a launch's extents against CUDA's limits (compute capability 8.0 and later):
// grid x up to 2³¹−1 and y, z up to 65,535 blocks; blocks of at most 1,024 threads, z at most 64.
func checkLaunch(kernel string, grid, block Dim) error {
	for _, v := range []int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if v < 0 {
			return fmt.Errorf("cuda: kernel %s: negative extent in grid %+v, block %+v", kernel, grid, block)
		}
	}
	gx, gy, gz := grid.norm()
	bx, by, bz := block.norm()
	switch {
	case gx > 1<<31-1 || gy > 65535 || gz > 65535:
		return fmt.Errorf("cuda: kernel %s: grid %d×%d×%d exceeds CUDA's limits (x < 2³¹, y and z ≤ 65535)", kernel, gx, gy, gz)
	case bx > 1024 || by > 1024 || bz > 64 || uint64(bx)*uint64(by)*uint64(bz) > 1024:
		return fmt.Errorf("cuda: kernel %s: block %d×%d×%d exceeds CUDA's limits (1024 threads, z ≤ 64)", kernel, bx, by, bz)
	}
	return nil
}
