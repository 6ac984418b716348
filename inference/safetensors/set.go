package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// Conventional file names of a Hugging Face model directory.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Set is the tensors of a checkpoint, from one file or from the shards of an index.
type Set struct {
	files  []*File
	byName map[string]*File
	names  []string
}

// OpenDir opens the checkpoint in dir: the shards listed by model.safetensors.index.json when it
// exists, else model.safetensors.
func OpenDir(dir string) (*Set, error) { return OpenDirWith(dir, nil) }

// OpenDirWith is OpenDir opening the index and every shard through o (nil: plainly), e.g. one
// confined to a server's weights root (regular.Confine).
func OpenDirWith(dir string, o *regular.Opener) (*Set, error) {
	idx := filepath.Join(dir, IndexFile)
	if _, err := o.Stat(idx); err == nil {
		return openIndex(idx, o)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := o.Stat(single); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %s has neither %s nor %s", dir, SingleFile, IndexFile)
	}
	f, err := open(single, true, o)
	if err != nil {
		return nil, err
	}
	s := &Set{files: []*File{f}, byName: map[string]*File{}, names: f.Names()}
	for _, n := range s.names {
		s.byName[n] = f
	}
	return s, nil
}

// OpenIndex opens a sharded checkpoint from its index (JSON with a weight_map from tensor name
// to shard file name, the shards next to the index). Every listed tensor must be in its shard.
func OpenIndex(path string) (*Set, error) { return openIndex(path, nil) }

// openIndex is OpenIndex opening the index and its shards through o.
func openIndex(path string, o *regular.Opener) (*Set, error) {
	js, err := o.ReadJSON(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(js, &idx); err != nil {
		return nil, fmt.Errorf("safetensors index %s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors index %s: weight_map is missing or empty", path)
	}
	dir := filepath.Dir(path)
	s := &Set{byName: make(map[string]*File, len(idx.WeightMap))}
	shards := map[string]*File{}
	for name := range idx.WeightMap {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, name := range s.names {
		shard := idx.WeightMap[name]
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s: tensor %q: shard %q is not a file name in %s", path, name, shard, dir)
		}
		f := shards[shard]
		if f == nil {
			f, err = open(filepath.Join(dir, shard), true, o)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("safetensors index %s: %w", path, err)
			}
			shards[shard] = f
			s.files = append(s.files, f)
		}
		if _, ok := f.byName[name]; !ok {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s: tensor %q is not in its shard %s", path, name, f.Path())
		}
		s.byName[name] = f
	}
	return s, nil
}

// Names returns the tensor names (header order for one file, sorted for an index).
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Has reports whether the checkpoint holds the named tensor.
func (s *Set) Has(name string) bool { _, ok := s.byName[name]; return ok }

// Tensor returns the named tensor; the error names the checkpoint and tensor when it is absent.
func (s *Set) Tensor(name string) (*Tensor, error) {
	f, ok := s.byName[name]
	if !ok {
		where := "checkpoint"
		if len(s.files) == 1 {
			where = s.files[0].Path()
		} else if len(s.files) > 1 {
			where = filepath.Dir(s.files[0].Path())
		}
		return nil, fmt.Errorf("safetensors %s: no tensor %q", where, name)
	}
	return f.Tensor(name)
}

// Mapped reports whether every file of the set is memory-mapped.
func (s *Set) Mapped() bool {
	for _, f := range s.files {
		if !f.Mapped() {
			return false
		}
	}
	return len(s.files) > 0
}

// Close closes every file; tensors taken from the set must not be used afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
