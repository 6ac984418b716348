package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// TestInRootListsBeneathRoot: inRoot lists the directory it checks through the confined Opener,
// so a directory swapped for a link out of the root after resolve is ErrOutsideRoot by its own
// name and the link's text, and names none of the entries of the directory outside (listed with
// os.ReadDir, the link was followed and the refusal named a .json link found there).
func TestInRootListsBeneathRoot(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, outside := filepath.Join(base, "ckpt"), filepath.Join(base, "elsewhere")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(outside, "secret-name.json")); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(root, "run") // resolved as a directory in the root, then swapped for a link out
	if err := os.Symlink(outside, run); err != nil {
		t.Fatal(err)
	}
	s := &Swap[Model]{root: root}
	err = s.inRoot(run, run, regular.Confine(root))
	if !errors.Is(err, ErrOutsideRoot) || strings.Contains(err.Error(), "secret-name") {
		t.Errorf("a directory swapped for a link out: %v; want ErrOutsideRoot naming no entry outside the root", err)
	}
	if err := s.inRoot(root, root, regular.Confine(root)); err != nil {
		t.Errorf("the root itself: %v", err)
	}
}
