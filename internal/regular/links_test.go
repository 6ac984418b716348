//go:build unix

package regular

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestConfineDotDotAfterLink: ".." after a link goes up from where the link leads, as the
// kernel's open does, not from the link's own directory (lexical cleaning): a link to an
// absolute path root/hop/../x.json, hop a link to step/deep, opens root/step/x.json (what
// os.Open of the link opens), not root/x.json; with hop a link out of the root (../outdir) it is
// ErrOutsideRoot, not root/x.json.
func TestConfineDotDotAfterLink(t *testing.T) {
	base, root, dir, _ := confineLayout(t)
	noProc(t)
	for _, f := range []struct{ path, body string }{
		{filepath.Join(root, "x.json"), `"lexical"`},
		{filepath.Join(dir, "x.json"), `"kernel"`},
		{filepath.Join(base, "x.json"), `"outside"`},
	} {
		if err := os.WriteFile(f.path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("step/deep", filepath.Join(root, "hop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root+"/hop/../x.json", filepath.Join(dir, "a.json")); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "a.json"))
	if err != nil || string(want) != `"kernel"` {
		t.Fatalf("os.ReadFile of the link = %s, %v; the layout is wrong", want, err)
	}
	got, err := Confine(root).ReadJSON(filepath.Join(dir, "a.json"))
	if err != nil || string(got) != string(want) {
		t.Errorf("confined: %s, %v; want %s (what the kernel opens)", got, err, want)
	}
	if err := os.Remove(filepath.Join(root, "hop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "outdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outdir", filepath.Join(root, "hop")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.json")); err != nil || string(b) != `"outside"` {
		t.Fatalf("os.ReadFile of the link through hop out = %s, %v; the layout is wrong", b, err)
	}
	if got, err := Confine(root).ReadJSON(filepath.Join(dir, "a.json")); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("through a link out then ..: %s, %v; want ErrOutsideRoot", got, err)
	}
}

// TestConfineLinkAttacks: an absolute link through another leading out, chains up to the
// bound and past it, a loop of two, targets with a trailing slash or "." and a FIFO or a
// directory reached through an absolute link: nothing outside is opened, nothing but a regular
// file is returned, and the errors name the path asked for.
func TestConfineLinkAttacks(t *testing.T) {
	base, root, dir, out := confineLayout(t)
	noProc(t)
	if err := os.Mkdir(filepath.Join(base, "outdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "outdir", "x.json"), []byte(`"outside"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"outlink":       filepath.Join(base, "outdir"),        // absolute, out
		"through.json":  filepath.Join(dir, "outlink/x.json"), // absolute inside, then out
		"relout":        "../../outdir",
		"through2.json": filepath.Join(dir, "relout", "x.json"),
		"ping.json":     filepath.Join(dir, "pong.json"),
		"pong.json":     filepath.Join(dir, "ping.json"),
		"slash.json":    filepath.Join(dir, "in.json") + "/",
		"dot.json":      root + "/.",
		"rootlink":      root,
		"fifo.json":     filepath.Join(dir, "fifo"),
		"viaroot.json":  dir + "/rootlink/../out.json", // root/../out.json: out
		"gone.json":     dir + "/missing/../in.json",   // not found, for the kernel
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// chain: c0 -> c1 -> ... -> c40 -> in.json, every link absolute: 41 links from c0, 40 from c1
	for i := 0; i <= 40; i++ {
		target := filepath.Join(dir, fmt.Sprintf("c%d.json", i+1))
		if i == 40 {
			target = filepath.Join(dir, "in.json")
		}
		if err := os.Symlink(target, filepath.Join(dir, fmt.Sprintf("c%d.json", i))); err != nil {
			t.Fatal(err)
		}
	}
	o := Confine(root)
	open := func(name string) ([]byte, error) {
		t.Helper()
		done := make(chan struct{})
		var b []byte
		var err error
		go func() { b, err = o.ReadJSON(dir + "/" + name); close(done) }() // not cleaned
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still waiting after 5 s", name)
		}
		if string(b) == `"outside"` {
			t.Errorf("%s: read a file outside the root", name)
		}
		if err != nil && !strings.Contains(err.Error(), dir+"/"+name) {
			t.Errorf("%s: %v, want the error to name %s", name, err, dir+"/"+name)
		}
		return b, err
	}
	for _, name := range []string{"through.json", "through2.json", "outlink/x.json", "relout/x.json", "viaroot.json"} {
		if _, err := open(name); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("%s: %v, want ErrOutsideRoot", name, err)
		}
	}
	for _, name := range []string{"ping.json", "c0.json", "dot.json", "rootlink", "fifo.json", "plain/x.json", "plain/../in.json"} {
		if _, err := open(name); err == nil {
			t.Errorf("%s: opened, want refused", name)
		}
	}
	if _, err := open("gone.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone.json, a link through a missing directory and ..: %v, want fs.ErrNotExist", err)
	}
	for _, name := range []string{"c1.json", "rootlink/step/in.json", "slash.json"} {
		if _, err := open(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_ = out
}

// TestConfineRepointedRace: links re-pointed between an absolute path inside the root and
// ways out of it (absolute, relative, a directory on the way), while the confined file is
// opened again and again without /proc: no open ever reads the file outside.
func TestConfineRepointedRace(t *testing.T) {
	base, root, dir, _ := confineLayout(t)
	noProc(t)
	if err := os.Mkdir(filepath.Join(base, "outdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "indir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "outdir", "x.json"), filepath.Join(base, "x.json")} {
		if err := os.WriteFile(p, []byte(`"outside"`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "indir", "x.json"), []byte(`"inside"`), 0o644); err != nil {
		t.Fatal(err)
	}
	// a.json -> <abs>/d/x.json; d flips between indir (absolute and relative) and ways out
	targets := []string{filepath.Join(root, "indir"), "../outdir", filepath.Join(base, "outdir"), "../indir", "../../outdir"}
	if err := os.Symlink(filepath.Join(dir, "d", "x.json"), filepath.Join(dir, "a.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(targets[0], filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	o := Confine(root)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(dir, "d.tmp")
		for i := 0; !stop.Load(); i++ {
			os.Remove(tmp)
			if err := os.Symlink(targets[i%len(targets)], tmp); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, filepath.Join(dir, "d")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	inside := 0
	for i := 0; i < 3000; i++ {
		b, err := o.ReadJSON(filepath.Join(dir, "a.json"))
		if string(b) == `"outside"` {
			t.Fatalf("open %d read the file outside the root", i)
		}
		if err == nil {
			inside++
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d of 3000 opens read the file inside", inside)
}

// TestConfineRootRepointed: the root's own path re-pointed while confined (renamed away and a
// link to a directory outside put in its place) leads the open out; it is refused without
// /proc too, the directory opened as the root not being the one Confine was given.
func TestConfineRootRepointed(t *testing.T) {
	base, root, dir, _ := confineLayout(t)
	noProc(t)
	if err := os.MkdirAll(filepath.Join(base, "outroot", "step"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "outroot", "step", "in.json"), []byte(`"outside"`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Confine(root)
	if _, err := o.ReadJSON(filepath.Join(dir, "in.json")); err != nil {
		t.Fatalf("before: %v", err)
	}
	if err := os.Rename(root, root+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outroot"), root); err != nil {
		t.Fatal(err)
	}
	if b, err := o.ReadJSON(filepath.Join(dir, "in.json")); !errors.Is(err, ErrOutsideRoot) || !strings.Contains(err.Error(), "put in its place), so outside the weights root "+root+": ") {
		t.Errorf("root re-pointed out: %s, %v; want ErrOutsideRoot saying the root is not the one confined", b, err)
	}
}

// TestConfineRelativePath: a path relative to the working directory, opened through a confined
// Opener, is opened beneath the root too ("." and ".." in it taken as the kernel does).
func TestConfineRelativePath(t *testing.T) {
	_, root, dir, _ := confineLayout(t)
	noProc(t)
	t.Chdir(dir)
	o := Confine(root)
	for _, name := range []string{"in.json", "./in.json", "../step/in.json"} {
		if _, err := o.ReadJSON(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := o.ReadJSON("config.json"); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("config.json, a link out: %v, want ErrOutsideRoot", err)
	}
}

// TestConfineReadBackOutside: a file the kernel says is outside a root (/proc/self/fd; here a
// stand-in realPath, as after an outer root renamed between the open and the read-back) is
// refused, naming where it is.
func TestConfineReadBackOutside(t *testing.T) {
	_, root, dir, out := confineLayout(t)
	saved := realPath
	realPath = func(*os.File) (string, error) { return out, nil }
	t.Cleanup(func() { realPath = saved })
	if _, err := Confine(root).ReadJSON(filepath.Join(dir, "in.json")); !errors.Is(err, ErrOutsideRoot) || !strings.Contains(err.Error(), "opened "+out+", outside the weights root "+root) {
		t.Errorf("read back outside: %v, want ErrOutsideRoot naming %s", err, out)
	}
}

// TestConfineNotADirectory: a file named as a directory on the way (escapes.json/x.json) through
// a confined Opener is the kernel's "not a directory", not ErrOutsideRoot: before, any
// error whose text held "escapes" (here the file's own name) was taken for os.Root's "path
// escapes from parent" and reported as leading outside the root.
func TestConfineNotADirectory(t *testing.T) {
	_, root, dir, _ := confineLayout(t)
	if err := os.WriteFile(filepath.Join(dir, "escapes.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Confine(root).ReadJSON(filepath.Join(dir, "escapes.json", "x.json")); !errors.Is(err, syscall.ENOTDIR) || errors.Is(err, ErrOutsideRoot) {
		t.Errorf("escapes.json/x.json: %v, want ENOTDIR, not ErrOutsideRoot", err)
	}
}

// TestResolveLooksNotOutside: a confined Opener's Resolve follows links beneath its root and
// looks at nothing outside it: a link out of the root is ErrOutsideRoot whether what it names
// exists or not, and the error names no more than the link's own text (not where a link
// outside leads on to, nor whether it exists); links within the root resolve as
// filepath.EvalSymlinks would, and a missing path below the root is fs.ErrNotExist. The plain
// Opener's Resolve is filepath.EvalSymlinks. Stat and ReadDir look through Resolve the same way.
func TestResolveLooksNotOutside(t *testing.T) {
	base, root, dir, out := confineLayout(t)
	if err := os.MkdirAll(filepath.Join(base, "secretdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(base, "hopdir"):       filepath.Join(base, "secretdir"),
		filepath.Join(dir, "hop"):           filepath.Join(base, "hopdir"),
		filepath.Join(dir, "gone.json"):     filepath.Join(base, "gone.json"),
		filepath.Join(dir, "up.json"):       "../../out.json",
		filepath.Join(dir, "upgone.json"):   "../../gone.json",
		filepath.Join(dir, "abs.json"):      filepath.Join(dir, "in.json"),
		filepath.Join(dir, "chain.json"):    filepath.Join(dir, "abs.json"),
		filepath.Join(root, "latest"):       dir,
		filepath.Join(root, "rel-latest"):   "step",
		filepath.Join(dir, "dangling.json"): filepath.Join(dir, "nothing.json"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	o := Confine(root)
	for _, p := range []string{
		filepath.Join(dir, "config.json"), filepath.Join(dir, "gone.json"), // exists, does not
		filepath.Join(dir, "up.json"), filepath.Join(dir, "upgone.json"),
		filepath.Join(dir, "hop"), filepath.Join(dir, "hop", "x"),
		out, filepath.Join(root, "..", "gone"), "/",
	} {
		got, err := o.Resolve(p)
		if !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Resolve(%s) = %q, %v; want ErrOutsideRoot", p, got, err)
		} else if strings.Contains(err.Error(), "secretdir") {
			t.Errorf("Resolve(%s): %v names where a link outside the root leads", p, err)
		}
		if fi, err := o.Stat(p); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Stat(%s) = %v, %v; want ErrOutsideRoot", p, fi, err)
		}
		if _, err := o.ReadDir(p); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("ReadDir(%s): %v, want ErrOutsideRoot", p, err)
		}
	}
	for p, want := range map[string]string{
		filepath.Join(dir, "chain.json"):            filepath.Join(dir, "in.json"),
		filepath.Join(root, "latest", "abs.json"):   filepath.Join(dir, "in.json"),
		filepath.Join(root, "rel-latest"):           dir,
		filepath.Join(root, "latest", "..", "step"): dir,
		root: root,
	} {
		got, err := o.Resolve(p)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %s", p, got, err, want)
		}
		if plain, err := (*Opener)(nil).Resolve(p); err != nil || plain != want {
			t.Errorf("plain Resolve(%s) = %q, %v; want %s", p, plain, err, want)
		}
		fi, err := o.Stat(p)
		if wfi, werr := os.Stat(want); err != nil || werr != nil || !os.SameFile(fi, wfi) {
			t.Errorf("Stat(%s) = %v, %v; want %s's", p, fi, err, want)
		}
	}
	got, err := o.ReadDir(filepath.Join(root, "latest"))
	want, werr := os.ReadDir(dir)
	if err != nil || werr != nil || len(got) != len(want) {
		t.Fatalf("ReadDir(latest): %d entries, %v; want %d (%v)", len(got), err, len(want), werr)
	}
	for i := range got {
		if got[i].Name() != want[i].Name() || got[i].Type() != want[i].Type() {
			t.Errorf("ReadDir(latest)[%d] = %s %v, want %s %v", i, got[i].Name(), got[i].Type(), want[i].Name(), want[i].Type())
		}
	}
	for _, p := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "dangling.json"), filepath.Join(dir, "missing", "x")} {
		if got, err := o.Resolve(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Resolve(%s) = %q, %v; want fs.ErrNotExist", p, got, err)
		}
	}
}
