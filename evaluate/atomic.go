package evaluate

import (
	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// outputPerm is the mode of every file evaluate writes (less the umask): results are read by
// others, a merge job or a colleague on the cluster's shared disk.
const outputPerm = 0o644

// createAtomic starts a new version of path (see atomicfile), first removing, as far as it can,
// the temporary files that a process killed before its commit left: the derived files have a
// single writer (the eval dir's), so any such file is stale, and one that cannot be removed
// does not stop the new version.
func createAtomic(path string) (*atomicfile.File, error) {
	removeStale(path)
	return atomicfile.Create(path, outputPerm)
}

// removeStale is atomicfile.RemoveStale, best effort.
func removeStale(path string) { _ = atomicfile.RemoveStale(path) }

// writeLine writes line and a newline to f.
func writeLine(f *atomicfile.File, line []byte) error {
	if _, err := f.Write(line); err != nil {
		return err
	}
	_, err := f.Write([]byte{'\n'})
	return err
}

// writeJSONAtomic writes v as indented JSON and a newline to path atomically (removing stale
// temporary files first, as createAtomic does).
func writeJSONAtomic(path string, v any) error {
	removeStale(path)
	return atomicfile.WriteJSON(path, v, outputPerm)
}
