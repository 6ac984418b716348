package curate

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// mkdirTemp creates a new directory in parent named prefix and a random suffix, 0755 less the
// umask like every other output directory (os.MkdirTemp makes it 0700, which the rename into
// --out would keep), and returns its path.
func mkdirTemp(parent, prefix string) (string, error) {
	var b [8]byte
	for range 100 {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, prefix+hex.EncodeToString(b[:]))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s: no free temporary name with prefix %s", parent, prefix)
}
