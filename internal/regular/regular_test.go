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

// TestConfine: a confined Opener refuses a file whose link leads out of the root unopened
// (ErrOutsideRoot, naming where the link leads) and a path outside the root, and opens one
// inside; the plain Open of the same link meanwhile opens it.
func TestConfine(t *testing.T) {
	_, root, dir, out := confineLayout(t)
	o := Confine(root)
	if o.Root() != root {
		t.Errorf("Root() = %q, want %q", o.Root(), root)
	}
	if _, err := o.ReadJSON(filepath.Join(dir, "config.json")); !errors.Is(err, ErrOutsideRoot) || !strings.Contains(err.Error(), "a link to "+out) {
		t.Errorf("link out of the root: %v, want ErrOutsideRoot naming %s", err, out)
	}
	if _, err := o.ReadJSON(filepath.Join(dir, "in.json")); err != nil {
		t.Errorf("file inside: %v", err)
	}
	if _, err := o.ReadJSON(out); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("a path outside the root: %v, want ErrOutsideRoot", err)
	}
	if _, err := ReadJSON(filepath.Join(dir, "config.json")); err != nil {
		t.Errorf("plain: %v", err)
	}
}

// TestConfineOverlapping: Openers of one directory are independent: each confines only what
// is opened through it. Two confined to one root (two servers reloading it), one confined to /
// (a server with --weights-root /) made while one confined to the root is in use, and the plain
// Open: the confined ones refuse the link out, the others open it. Before, confinement was a
// process-wide registry by path: a plain open of a confined directory was refused too.
func TestConfineOverlapping(t *testing.T) {
	_, root, dir, _ := confineLayout(t)
	link := filepath.Join(dir, "config.json")
	first, second := Confine(root), Confine(root)
	broad, zero := Confine("/"), new(Opener)
	for what, o := range map[string]*Opener{"first": first, "second": second} {
		if _, err := o.ReadJSON(link); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("%s of two confined to the root: %v, want ErrOutsideRoot", what, err)
		}
	}
	for what, o := range map[string]*Opener{"confined to /": broad, "zero": zero, "nil": nil} {
		if o.Root() != "" {
			t.Errorf("%s: Root() = %q, want the plain Opener", what, o.Root())
		}
		if _, err := o.ReadJSON(link); err != nil {
			t.Errorf("%s, beside the confined ones: %v", what, err)
		}
	}
	if _, err := ReadJSON(link); err != nil {
		t.Errorf("plain ReadJSON beside the confined ones: %v", err)
	}
}

// confineLayout makes base/root/step holding in.json and config.json, a link to base/out.json
// (base with its links resolved).
func confineLayout(t *testing.T) (base, root, dir, out string) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, dir, out = filepath.Join(base, "root"), filepath.Join(base, "root", "step"), filepath.Join(base, "out.json")
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
	return base, root, dir, out
}

// noProc makes realPath fail for the test, so that only the open beneath the root stands
// between a link and a file outside (the read-back would otherwise hide an escape).
func noProc(t *testing.T) {
	saved := realPath
	realPath = func(*os.File) (string, error) { return "", fs.ErrNotExist }
	t.Cleanup(func() { realPath = saved })
}

// TestConfineWithoutProc: where /proc/self/fd cannot be read, the open beneath the root stands:
// a file inside it opens and a link out of it is refused; a directory confined to / (its
// --weights-root /, "any directory") opens both. Before, every file under a confined directory
// was refused (where it was could not be told), so without /proc no reload loaded at all.
func TestConfineWithoutProc(t *testing.T) {
	_, root, dir, _ := confineLayout(t)
	noProc(t)
	o := Confine(root)
	if _, err := o.ReadJSON(filepath.Join(dir, "in.json")); err != nil {
		t.Errorf("inside %s without /proc: %v", root, err)
	}
	if _, err := o.ReadJSON(filepath.Join(dir, "config.json")); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("link out of %s without /proc: %v, want ErrOutsideRoot", root, err)
	}
	all := Confine("/")
	for _, name := range []string{"in.json", "config.json"} {
		if _, err := all.ReadJSON(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s confined to / without /proc: %v", name, err)
		}
	}
}

// TestConfineOpensNothingOutside: through a confined Opener nothing outside the root is
// opened, not only refused once open (opening a device, or a file on an automounted network
// path, can act or hang): a link to /dev/null, or through ".." out of the root, is
// ErrOutsideRoot before any open (before, /dev/null was opened and refused as not a regular
// file), and so is one to an absolute path whose ".." leads out; links to absolute paths
// inside the root (which os.Root alone refuses: a file, a directory on the way, a chain of
// them) and a relative one inside open; a link to itself is refused; a missing file is
// fs.ErrNotExist still.
func TestConfineOpensNothingOutside(t *testing.T) {
	_, root, dir, _ := confineLayout(t)
	links := map[string]string{
		"null.json":   "/dev/null",
		"up.json":     "../../out.json",
		"abs.json":    filepath.Join(dir, "in.json"),
		"rel.json":    "in.json",
		"other.json":  filepath.Join(root, "other", "x.json"),
		"otherdir":    filepath.Join(root, "other"),
		"chain.json":  filepath.Join(dir, "abs.json"),
		"dotdot.json": root + "/step/../../out.json",
		"loop.json":   "loop.json",
	}
	if err := os.MkdirAll(filepath.Join(root, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "other", "x.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	o := Confine(root)
	for _, name := range []string{"null.json", "up.json", "dotdot.json"} {
		if _, err := o.ReadJSON(filepath.Join(dir, name)); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("%s: %v, want ErrOutsideRoot", name, err)
		}
	}
	for _, name := range []string{"abs.json", "rel.json", "other.json", "otherdir/x.json", "chain.json"} {
		if _, err := o.ReadJSON(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s, a link inside the root: %v", name, err)
		}
	}
	if _, err := o.ReadJSON(filepath.Join(dir, "loop.json")); err == nil {
		t.Errorf("a link to itself: opened")
	}
	if _, err := o.ReadJSON(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "open "+filepath.Join(dir, "missing.json")) {
		t.Errorf("missing: %v, want fs.ErrNotExist naming the path as os.Open does", err)
	}
}
