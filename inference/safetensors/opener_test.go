//go:build unix

package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// TestOpenDirLooksThroughOpener: OpenDirWith tells the index from a single file by looking at
// them through its Opener: confined, an index or a model.safetensors that is a link out of the
// root to nothing is ErrOutsideRoot, as one to a file is. Before (os.Stat), a dangling index
// link out was taken for no index and the single file beside it was loaded, and a dangling
// model.safetensors said "has neither", so whether a path outside existed showed.
func TestOpenDirLooksThroughOpener(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	withSingle, bare := filepath.Join(root, "with-single"), filepath.Join(root, "bare")
	for _, d := range []string{withSingle, bare} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeSample(t, withSingle, SingleFile)
	for link, target := range map[string]string{
		filepath.Join(withSingle, IndexFile): filepath.Join(base, "gone.index.json"),
		filepath.Join(bare, SingleFile):      filepath.Join(base, "gone.safetensors"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	o := regular.Confine(root)
	for _, dir := range []string{withSingle, bare} {
		s, err := OpenDirWith(dir, o)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, regular.ErrOutsideRoot) {
			t.Errorf("%s: %v, want ErrOutsideRoot", dir, err)
		}
	}
	s, err := OpenDirWith(withSingle, nil) // plainly, the missing index is no index
	if err != nil {
		t.Fatalf("plain: %v", err)
	}
	s.Close()
}
