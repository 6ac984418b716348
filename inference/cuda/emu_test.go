//go:build cudaemu

package cuda

import (
	"strings"
	"testing"
)

// TestEmulatorChecks: the emulator reports lanes that wait at a shuffle while others of their
// warp wait at a barrier, a shuffle mask that leaves out lanes taking part, and a write past a
// buffer's end, instead of hanging or corrupting
// memory, and fails later work as a sticky CUDA error does.
func TestEmulatorChecks(t *testing.T) {
	for _, c := range []struct {
		kernel string
		args   func(d Device) []any
		want   string
	}{
		{"emu_partial_mask", func(d Device) []any { return []any{upload(t, d, make([]int32, 64))} }, "mask does not name exactly the warp's live lanes"},
		{"emu_divergent_shuffle", func(d Device) []any { return []any{upload(t, d, make([]int32, 64))} }, "deadlock"},
		{"emu_overrun", func(d Device) []any { return []any{upload(t, d, make([]int32, 10)), int32(10)} }, "wrote past the end of a 40-byte buffer"},
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
