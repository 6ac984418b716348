package rollout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// writeForeignParquet writes a Parquet file of one int column with the footer key
// chainedsql.format set to format: another tool's table, or another chainedsql format.
func writeForeignParquet(t *testing.T, path, format string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type row struct {
		X int64 `parquet:"x"`
	}
	w := parquet.NewGenericWriter[row](f, parquet.KeyValueMetadata("chainedsql.format", format))
	if _, err := w.Write([]row{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOutDirConfines: the names a rollout server's request may write: a fresh name inside the
// directory (relative, absolute inside it, in a subdirectory) and a rollout table written
// before are accepted, and written atomically; an absolute path elsewhere, a name climbing out
// with "..", a subdirectory that is a symbolic link out, a symbolic link at the name (even to a
// rollout table), a text file, another Parquet file and a directory are refused with the
// matching error, and the files refused are left as they were.
func TestOutDirConfines(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "runs"), filepath.Join(base, "walk")
	for _, d := range []string{dir, outside, filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "deeper")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim.txt")
	text := filepath.Join(dir, "notes.txt")
	for _, p := range []string{victim, text} {
		if err := os.WriteFile(p, []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeForeignParquet(t, filepath.Join(dir, "other.parquet"), "")
	writeForeignParquet(t, filepath.Join(dir, "prompts.parquet"), "chainedsql-prompts/v1")
	// A real rollout table outside, and links to it and out of the directory.
	outsideTable := filepath.Join(outside, "r.parquet")
	if err := Write(outsideTable, []Row{{TaskID: "t", Messages: nil}}); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"escape": outside, "sub/up": "../..", "link.parquet": outsideTable, "inner": "sub"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}

	d, err := OpenOutDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows := []Row{{TaskID: "sample/0", Reward: 1}, {TaskID: "sample/0", Sample: 1}}
	for _, c := range []struct {
		name string
		want error // nil: accepted
	}{
		{filepath.Join(outside, "evil.parquet"), ErrOutside},
		{"/etc/evil.parquet", ErrOutside},
		{victim, ErrOutside},
		{"../walk/victim.txt", ErrOutside},
		{"sub/../../walk/x.parquet", ErrOutside},
		{"escape/victim.txt", ErrOutside},
		{"escape/new.parquet", ErrOutside},
		{"sub/up/walk/x.parquet", ErrOutside},
		{"link.parquet", ErrNotTable},
		{"notes.txt", ErrNotTable},
		{text, ErrNotTable},
		{"other.parquet", ErrNotTable},
		{"prompts.parquet", ErrNotTable},
		{"", ErrBadName},
		{".", ErrBadName},
		{"sub", ErrBadName},
		{"sub/", ErrBadName},
		{"missing/x.parquet", ErrBadName},
		{"fresh.parquet", nil},
		{filepath.Join(dir, "abs.parquet"), nil},
		{"sub/deeper/x.parquet", nil},
		{"inner/y.parquet", nil}, // a link that stays inside
		{"sub/../z.parquet", nil},
	} {
		path, err := d.Resolve(c.name)
		if c.want == nil {
			if err != nil {
				t.Errorf("%q: %v, want it accepted", c.name, err)
				continue
			}
			if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
				t.Errorf("%q resolves to %s, outside %s", c.name, path, dir)
			}
			// Written, then written again over the rollout table it now is.
			for range 2 {
				if err := d.Write(c.name, rows); err != nil {
					t.Fatalf("%q: %v", c.name, err)
				}
			}
			if back, err := Read(path); err != nil || len(back) != 2 {
				t.Errorf("%s: %d rows back, %v", path, len(back), err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%q: Resolve: %v, want %v", c.name, err, c.want)
		}
		if err := d.Write(c.name, rows); !errors.Is(err, c.want) {
			t.Errorf("%q: Write: %v, want %v", c.name, err, c.want)
		}
	}
	for _, p := range []string{victim, text} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "keep me\n" {
			t.Errorf("%s: %q, %v after the refusals", p, b, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link.parquet")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.parquet is no longer the link: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 2 {
		t.Errorf("%s holds %d files, want its 2", outside, len(ents))
	}
	for _, p := range []string{"/etc/evil.parquet", filepath.Join(base, "walk", "x.parquet")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	// Write and CheckOut (student rollout without --serve) refuse a file that is not a table.
	if err := CheckOut(text); !errors.Is(err, ErrNotTable) {
		t.Errorf("CheckOut of a text file: %v", err)
	}
	if err := Write(text, rows); !errors.Is(err, ErrNotTable) {
		t.Errorf("Write over a text file: %v", err)
	}
	if err := CheckOut(filepath.Join(dir, "fresh.parquet")); err != nil {
		t.Errorf("CheckOut of a rollout table: %v", err)
	}
}
