package regular

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesWhatIsNotRegular: a FIFO (no writer), a link to /dev/zero and a directory are
// refused at once, naming the path; a missing file keeps fs.ErrNotExist; a regular file through
// a link is opened with its size.
func TestOpenRefusesWhatIsNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "config.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub.json")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, zero, sub} {
		done := make(chan error, 1)
		go func() {
			f, _, err := Open(p)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), p) {
				t.Errorf("Open(%s) = %v, want it refused as not a regular file, naming the path", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Open(%s) still waiting after 5 s", p)
		}
	}
	if _, _, err := Open(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	real := filepath.Join(dir, "real.json")
	if err := os.WriteFile(real, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	f, size, err := Open(link)
	if err != nil || size != 7 {
		t.Fatalf("Open(link to a regular file) = %d, %v; want 7 bytes", size, err)
	}
	f.Close()
}

// TestReadFileLimit: a file over the limit is refused unread (a sparse one of 1 GiB too, in no
// time), one at the limit is read whole.
func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadFile at the limit = %q, %v", b, err)
	}
	if _, err := ReadFile(p, 9); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("ReadFile over the limit = %v, want refused", err)
	}
	sparse := filepath.Join(dir, "sparse.json")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if _, err := ReadFile(sparse, 1<<20); err == nil || time.Since(start) > time.Second {
		t.Errorf("sparse 1 GiB file under a 1 MiB limit: %v after %s, want refused unread", err, time.Since(start))
	}
}

// TestConfine: under a Confine'd directory, a file whose link leads out of the root is refused
// (ErrOutsideRoot, naming where it opened), one inside is opened, a path not under the
// directory is not checked, and after release the link out opens again.
func TestConfine(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, dir, out := filepath.Join(base, "root"), filepath.Join(base, "root", "step"), filepath.Join(base, "out.json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{out, filepath.Join(dir, "in.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(out, filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	release := Confine(dir, root)
	if _, err := ReadJSON(filepath.Join(dir, "config.json")); !errors.Is(err, ErrOutsideRoot) || !strings.Contains(err.Error(), "opened "+out) {
		t.Errorf("link out of the root: %v, want ErrOutsideRoot naming %s", err, out)
	}
	if _, err := ReadJSON(filepath.Join(dir, "in.json")); err != nil {
		t.Errorf("file inside: %v", err)
	}
	if _, err := ReadJSON(out); err != nil {
		t.Errorf("a path not under the confined directory: %v", err)
	}
	release()
	if _, err := ReadJSON(filepath.Join(dir, "config.json")); err != nil {
		t.Errorf("after release: %v", err)
	}
}
