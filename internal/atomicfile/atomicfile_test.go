package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// leftovers lists dir's names that look like temporary files.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	if err := WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, path); got != "new\n" {
		t.Fatalf("content %q, want %q", got, "new\n")
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Fatalf("temporary files left: %v", l)
	}
}

// TestAbortKeepsOld streams part of a new version, aborts (as a Ctrl-C's cancelled context
// does): the old file is intact and no temporary file is left.
func TestAbortKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "results.jsonl")
	if err := WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(strings.Repeat("half", 1<<16))); err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(f.TempName()) != dir {
		t.Fatalf("temporary file %s not in the target's directory %s", f.TempName(), dir)
	}
	f.Abort()
	f.Abort()
	if got := readString(t, path); got != "old\n" {
		t.Fatalf("content after Abort %q, want the old %q", got, "old\n")
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Fatalf("temporary files left after Abort: %v", l)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if got := readString(t, path); got != "old\n" {
		t.Fatalf("content after Commit-after-Abort %q, want the old %q", got, "old\n")
	}
}

// TestCommitOrder records Commit's steps: the file's data must be on disk before the rename
// publishes it, and the directory synced after, or a crash can leave an empty or torn target.
func TestCommitOrder(t *testing.T) {
	var steps []string
	oldSync, oldRename, oldDir := syncFile, rename, syncDir
	t.Cleanup(func() { syncFile, rename, syncDir = oldSync, oldRename, oldDir })
	syncFile = func(f *os.File) error { steps = append(steps, "fsync file"); return oldSync(f) }
	rename = func(a, b string) error { steps = append(steps, "rename"); return oldRename(a, b) }
	syncDir = func(d string) error { steps = append(steps, "fsync dir"); return oldDir(d) }

	path := filepath.Join(t.TempDir(), "summary.json")
	if err := WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if want := []string{"fsync file", "rename", "fsync dir"}; !slices.Equal(steps, want) {
		t.Fatalf("Commit's steps %v, want %v", steps, want)
	}
}

// TestCommitFailure makes the fsync and then the rename fail: the old file stays, and the
// temporary file is removed.
func TestCommitFailure(t *testing.T) {
	oldSync, oldRename := syncFile, rename
	t.Cleanup(func() { syncFile, rename = oldSync, oldRename })
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		set  func()
	}{
		{"fsync", func() { syncFile = func(*os.File) error { return boom } }},
		{"rename", func() { rename = func(string, string) error { return boom } }},
	} {
		t.Run(c.name, func(t *testing.T) {
			syncFile, rename = oldSync, oldRename
			dir := t.TempDir()
			path := filepath.Join(dir, "card.md")
			if err := WriteFile(path, []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c.set()
			err := WriteFile(path, []byte("new\n"), 0o644)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want boom naming %s", err, path)
			}
			if got := readString(t, path); got != "old\n" {
				t.Fatalf("content %q, want the old %q", got, "old\n")
			}
			if l := leftovers(t, dir); len(l) > 0 {
				t.Fatalf("temporary files left: %v", l)
			}
		})
	}
}

// TestPerm checks that the mode is perm less the umask (CreateTemp's 0600 is what this
// package replaces), also when the target existed with another mode.
func TestPerm(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "part.parquet")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("y"), 0o666); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644 (0666 less umask 022)", st.Mode().Perm())
	}
	syscall.Umask(0o077)
	if err := WriteFile(path, []byte("z"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v under umask 077, want 0600", st.Mode().Perm())
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	for _, n := range []string{".summary.json.tmp-1", ".summary.json.tmp-abc", ".other.json.tmp-1", "summary.json"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveStale(path); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{".other.json.tmp-1", "summary.json"}; !slices.Equal(names, want) {
		t.Fatalf("left %v, want %v", names, want)
	}
	if err := RemoveStale(filepath.Join(dir, "missing", "x")); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
}

// TestWriteJSON: indented JSON and a newline, with the mode asked for; a value JSON cannot hold
// is an error naming the path, and the old file stays.
func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.json")
	if err := WriteJSON(path, map[string]int{"a": 1}, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{\n  \"a\": 1\n}\n" {
		t.Fatalf("wrote %q (%v)", b, err)
	}
	if err := WriteJSON(path, func() {}, 0o644); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("unmarshallable value: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{\n  \"a\": 1\n}\n" {
		t.Fatalf("old file changed: %q", b)
	}
}

// TestCreateIn writes through an os.Root: a name in a subdirectory is written and replaced
// atomically, the rename goes through the root, a failed rename leaves the old file and no
// temporary one, a symbolic link at the target is replaced rather than followed, and ".." or a
// link out of the root's directory is an error that writes nothing outside.
func TestCreateIn(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	write := func(name, data string) error {
		f, err := CreateIn(root, name, 0o644)
		if err != nil {
			return err
		}
		defer f.Abort()
		if _, err := f.Write([]byte(data)); err != nil {
			return err
		}
		return f.Commit()
	}
	oldRename := rootRename
	t.Cleanup(func() { rootRename = oldRename })
	renames := 0
	rootRename = func(r *os.Root, a, b string) error { renames++; return oldRename(r, a, b) }
	for _, data := range []string{"old\n", "new\n"} {
		if err := write("sub/out.parquet", data); err != nil {
			t.Fatal(err)
		}
	}
	if got := readString(t, filepath.Join(dir, "sub", "out.parquet")); got != "new\n" || renames != 2 {
		t.Fatalf("content %q after %d renames through the root, want %q after 2", got, renames, "new\n")
	}
	boom := errors.New("boom")
	rootRename = func(*os.Root, string, string) error { return boom }
	if err := write("sub/out.parquet", "lost\n"); !errors.Is(err, boom) || !strings.Contains(err.Error(), filepath.Join(dir, "sub", "out.parquet")) {
		t.Fatalf("a failed rename: %v", err)
	}
	rootRename = oldRename
	if got := readString(t, filepath.Join(dir, "sub", "out.parquet")); got != "new\n" || len(leftovers(t, filepath.Join(dir, "sub"))) > 0 {
		t.Fatalf("after a failed rename: content %q, leftovers %v", got, leftovers(t, filepath.Join(dir, "sub")))
	}

	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link.parquet")); err != nil {
		t.Fatal(err)
	}
	if err := write("link.parquet", "rollout\n"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link.parquet")); err != nil || !fi.Mode().IsRegular() || readString(t, victim) != "mine\n" {
		t.Fatalf("a link at the target: %v, %v, the file it named holds %q", fi, err, readString(t, victim))
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../x.parquet", "escape/x.parquet"} {
		if err := write(name, "x\n"); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory outside holds %d files, want only victim.txt", len(ents))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x.parquet")); err == nil {
		t.Errorf("../x.parquet was written")
	}
}
