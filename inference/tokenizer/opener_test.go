//go:build unix

package tokenizer

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// TestLoadWithLooksThroughOpener: LoadWith looks at its path (a file or a directory) through
// its Opener: confined, a tokenizer.json that is a link out of the root to nothing is
// ErrOutsideRoot, as one to a file is. Before (os.Stat), it was "no such file", so whether a
// path outside existed showed.
func TestLoadWithLooksThroughOpener(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "tokenizer.json")
	if err := os.Symlink(filepath.Join(base, "gone.json"), link); err != nil {
		t.Fatal(err)
	}
	o := regular.Confine(root)
	for _, p := range []string{link, filepath.Join(root, ".", "tokenizer.json") + "//"} {
		if _, err := LoadWith(p, o); !errors.Is(err, regular.ErrOutsideRoot) {
			t.Errorf("%s: %v, want ErrOutsideRoot", p, err)
		}
	}
	if _, err := LoadWith(link, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("plain: %v, want fs.ErrNotExist", err)
	}
}
