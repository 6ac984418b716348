//go:build cudaemu

package cuda

import (
	"strings"
	"testing"
	"unsafe"
)

// TestEmulatorChecks: the emulator reports lanes that wait at a shuffle while others of their
// warp wait at a barrier, a shuffle mask that leaves out lanes taking part, a write past a
// buffer's end, lanes of a warp meeting at an mma and a shuffle, and an mma with exited lanes,
// instead of hanging or corrupting memory, and fails later work as a sticky CUDA error does.
func TestEmulatorChecks(t *testing.T) {
	for _, c := range []struct {
		kernel string
		args   func(d Device) []any
		want   string
	}{
		{"emu_partial_mask", func(d Device) []any { return []any{upload(t, d, make([]int32, 64))} }, "mask does not name exactly the warp's live lanes"},
		{"emu_divergent_shuffle", func(d Device) []any { return []any{upload(t, d, make([]int32, 64))} }, "deadlock"},
		{"emu_overrun", func(d Device) []any { return []any{upload(t, d, make([]int32, 10)), int32(10)} }, "wrote past the end of a 40-byte buffer"},
		{"emu_mma_shuffle", func(d Device) []any { return []any{upload(t, d, make([]float32, 64))} }, "an mma and a shuffle or vote"},
		{"emu_mma_partial", func(d Device) []any { return []any{upload(t, d, make([]float32, 64))} }, "mask does not name exactly the warp's live lanes"},
	} {
		d, err := Open(BackendEmulated)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Launch(mustFunc(t, d, c.kernel), Dim{X: 1}, Dim{X: 64}, 0, c.args(d)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error containing %q", c.kernel, err, c.want)
		}
		if err := d.Sync(); err == nil {
			t.Fatalf("%s: Sync after a failed launch succeeded", c.kernel)
		}
		d.Close()
	}
}

// TestEmulatorLaunchChecks: a launch whose arguments do not match the kernel's parameters in
// the PTX (count or kind), or whose grid or block exceeds CUDA's limits, fails before it runs.
func TestEmulatorLaunchChecks(t *testing.T) {
	d, err := Open(BackendEmulated)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := upload(t, d, make([]float32, 64))
	x := upload(t, d, make([]float32, 64))
	w := upload(t, d, make([]float32, 64))
	f := mustFunc(t, d, "rmsnorm") // (out, x, w, rows, H int, eps float)
	for _, c := range []struct {
		name        string
		grid, block Dim
		args        []any
		want        string
	}{
		{"too few", Dim{X: 1}, Dim{X: 32}, []any{out, x, w, Ptr(0), int32(64)}, "takes 6 parameters"},
		{"too many", Dim{X: 1}, Dim{X: 32}, []any{out, x, w, Ptr(0), int32(64), float32(1e-6), int32(0)}, "takes 6 parameters"},
		{"int for a float", Dim{X: 1}, Dim{X: 32}, []any{out, x, w, Ptr(0), int32(64), int32(1)}, "parameter 5 is .f32"},
		{"float for an int", Dim{X: 1}, Dim{X: 32}, []any{out, x, w, Ptr(0), float32(64), float32(1e-6)}, "parameter 4 is .u32"},
		{"int for a pointer", Dim{X: 1}, Dim{X: 32}, []any{out, x, w, int32(0), int32(64), float32(1e-6)}, "parameter 3 is .u64"},
		{"grid y", Dim{X: 1, Y: 65536}, Dim{X: 32}, []any{out, x, w, Ptr(0), int32(64), float32(1e-6)}, "exceeds CUDA's limits"},
		{"block", Dim{X: 1}, Dim{X: 64, Y: 32}, []any{out, x, w, Ptr(0), int32(64), float32(1e-6)}, "exceeds CUDA's limits"},
	} {
		err := d.Launch(f, c.grid, c.block, 0, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	mustLaunch(t, d, f, Dim{X: 1}, Dim{X: 32}, 0, out, x, w, Ptr(0), int32(64), float32(1e-6))
}

// TestEmulatorCaptureRules: copies between host and device, synchronisation and frees are
// refused during a capture and invalidate it, as CUDA does; a memset is recorded and replayed.
func TestEmulatorCaptureRules(t *testing.T) {
	d, err := Open(BackendEmulated)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := upload(t, d, []int32{1, 2, 3, 4})
	host := make([]int32, 4)
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"copy in", func() error { return d.CopyIn(p, unsafe.Pointer(&host[0]), 16) }},
		{"copy out", func() error { return d.CopyOut(unsafe.Pointer(&host[0]), p, 16) }},
		{"sync", d.Sync},
		{"free", func() error { q, _ := d.Alloc(8); d.Free(q); return nil }},
	} {
		if err := d.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		opErr := c.op()
		g, err := d.EndCapture()
		if c.name != "free" && (opErr == nil || !strings.Contains(opErr.Error(), "while a graph is being captured")) {
			t.Errorf("%s during a capture: %v, want it refused", c.name, opErr)
		}
		if err == nil || !strings.Contains(err.Error(), "capture invalidated") {
			t.Errorf("%s during a capture: EndCapture %v, want the capture invalidated", c.name, err)
		}
		if g != nil {
			g.Destroy()
		}
	}
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := d.Zero(p, 8); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if got := download[int32](t, d, p, 4); got[0] != 1 {
		t.Fatalf("a memset ran during the capture: %v", got)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if got := download[int32](t, d, p, 4); got[0] != 0 || got[1] != 0 || got[2] != 3 {
		t.Fatalf("after the graph's memset: %v, want [0 0 3 4]", got)
	}
}

// TestEmulatorCopyChecks: a device-to-device copy outside one allocation or between overlapping
// ranges fails.
func TestEmulatorCopyChecks(t *testing.T) {
	d, err := Open(BackendEmulated)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := upload(t, d, make([]int32, 4))
	b := upload(t, d, make([]int32, 4))
	for _, c := range []struct {
		name     string
		dst, src Ptr
		n        int
		want     string
	}{
		{"past the source", b, a + 8, 16, "not inside one allocation"},
		{"past the destination", b + 4, a, 16, "not inside one allocation"},
		{"overlapping", a + 4, a, 8, "overlap"},
	} {
		if err := d.Copy(c.dst, c.src, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
