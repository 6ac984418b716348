package hugemem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestAllocZeroedAlignedWritable(t *testing.T) {
	for _, n := range []int{1, 4095, PageSize - 1, PageSize, 3*PageSize + 17} {
		b := Alloc(n)
		if len(b.Bytes) != n || cap(b.Bytes) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b.Bytes), cap(b.Bytes))
		}
		if b.Huge() && uintptr(unsafe.Pointer(&b.Bytes[0]))%PageSize != 0 {
			t.Fatalf("Alloc(%d): huge buffer at %p is not 2 MiB aligned", n, &b.Bytes[0])
		}
		for i, v := range b.Bytes {
			if v != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d, want 0", n, i, v)
			}
		}
		for i := range b.Bytes {
			b.Bytes[i] = byte(i)
		}
		if b.Bytes[n-1] != byte(n-1) {
			t.Fatal("write lost")
		}
		if err := b.Free(); err != nil {
			t.Fatalf("Free: %v", err)
		}
		if err := b.Free(); err != nil {
			t.Fatalf("second Free: %v", err)
		}
		if b.Bytes != nil {
			t.Fatal("Free left Bytes set")
		}
	}
	if b := Alloc(0); len(b.Bytes) != 0 || b.Huge() {
		t.Fatalf("Alloc(0) = %d bytes, huge %v", len(b.Bytes), b.Huge())
	}
}

// TestHugePagesUsed checks, where THP is available, that a buffer is mapped for huge pages and
// that touching it gives the process AnonHugePages (the kernel may lack free huge pages, so a
// zero count only logs).
func TestHugePagesUsed(t *testing.T) {
	if m := thpMode(); runtime.GOOS != "linux" || (m != "always" && m != "madvise") || os.Getenv("CHAINEDSQL_NOHUGEPAGES") != "" {
		t.Skipf("transparent huge pages not available (mode %q)", m)
	}
	before := anonHuge(t)
	b := Alloc(8 * PageSize)
	defer b.Free()
	if !b.Huge() {
		t.Fatal("Alloc fell back to the Go heap although THP is on")
	}
	for i := 0; i < len(b.Bytes); i += 4096 {
		b.Bytes[i] = 1
	}
	if got := anonHuge(t) - before; got < PageSize {
		t.Logf("AnonHugePages grew by %d bytes: the kernel had no free huge pages", got)
	}
}

func TestFallback(t *testing.T) {
	t.Setenv("CHAINEDSQL_NOHUGEPAGES", "1")
	b := Alloc(1000)
	if b.Huge() || len(b.Bytes) != 1000 {
		t.Fatalf("fallback: huge %v, %d bytes", b.Huge(), len(b.Bytes))
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
}

func TestViews(t *testing.T) {
	b := Alloc(64)
	defer b.Free()
	f := Float32s(b.Bytes, 16)
	f[15] = 1
	if u := Uint16s(b.Bytes, 32); u[31] != 0x3f80 {
		t.Fatalf("views disagree: %#x", u[31])
	}
	if len(Int8s(b.Bytes, 0)) != 0 {
		t.Fatal("empty view")
	}
	for name, f := range map[string]func(){
		"oversized":  func() { Float32s(b.Bytes, 17) },
		"misaligned": func() { Float32s(b.Bytes[1:], 4) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("a %s view did not panic", name)
				}
			}()
			f()
		}()
	}
}

// TestArena: allocations are zeroed, 64-byte aligned, disjoint, packed into few chunks, and a
// request larger than a chunk gets its own.
func TestArena(t *testing.T) {
	var a Arena
	var got [][]byte
	for _, n := range []int{1, 100, 4096, 3 << 20, 0, 17} {
		b := a.Alloc(n)
		if len(b) != n {
			t.Fatalf("Alloc(%d) gave %d bytes", n, len(b))
		}
		if n > 0 && uintptr(unsafe.Pointer(&b[0]))%64 != 0 {
			t.Fatalf("Alloc(%d) at %p is not 64-byte aligned", n, &b[0])
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d): byte %d not zero", n, i)
			}
			b[i] = byte(len(got) + 1)
		}
		got = append(got, b)
	}
	for i, b := range got {
		for j, v := range b {
			if v != byte(i+1) {
				t.Fatalf("allocation %d byte %d overwritten: %d", i, j, v)
			}
		}
	}
	if len(a.bufs) != 1 {
		t.Errorf("%d chunks for small allocations, want 1", len(a.bufs))
	}
	big := a.Alloc(ArenaChunk + 1)
	big[ArenaChunk] = 1
	if len(a.bufs) != 2 || len(a.bufs[1].Bytes) < ArenaChunk+1 {
		t.Errorf("a request over a chunk: %d chunks", len(a.bufs))
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Alloc after Free did not panic")
		}
	}()
	a.Alloc(1)
}

// anonHuge returns the process's AnonHugePages in bytes.
func anonHuge(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Skipf("no smaps_rollup: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "AnonHugePages:" {
			kb, _ := strconv.Atoi(f[1])
			return kb << 10
		}
	}
	return 0
}
