package evaluate

import (
	"encoding/json"
	"fmt"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// outputPerm is the mode of every file evaluate writes (less the umask): results are read by
// others, a merge job or a colleague on the cluster's shared disk.
const outputPerm = 0o644

// createAtomic starts a new version of path (see atomicfile), first removing the temporary
// files that a process killed before its commit left: the derived files have a single writer
// (the eval dir's), so any such file is stale.
func createAtomic(path string) (*atomicfile.File, error) {
	if err := atomicfile.RemoveStale(path); err != nil {
		return nil, err
	}
	return atomicfile.Create(path, outputPerm)
}

// writeLine writes line and a newline to f.
func writeLine(f *atomicfile.File, line []byte) error {
	if _, err := f.Write(line); err != nil {
		return err
	}
	_, err := f.Write([]byte{'\n'})
	return err
}

// writeJSONAtomic writes v as indented JSON and a newline to path atomically.
func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := createAtomic(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := writeLine(f, data); err != nil {
		return err
	}
	return f.Commit()
}
