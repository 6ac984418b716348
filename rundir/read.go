package rundir

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
)

// journalState is what the journal says about a run dir.
type journalState struct {
	done      map[string]struct{}
	shardEnds map[string]int64
	// keys maps each shard to the key of each line by the offset where it ends (readJournal's
	// withKeys).
	keys  map[string]map[int64]string
	valid int64
	torn  bool
}

// readJournal reads dir's journal up to its torn tail, if any; withKeys fills in keys. A line
// that does not decode before the last is an error, never skipped: the journal is what says
// which shard lines are committed, so a lost entry would have the writer redo a key that is
// already in a shard.
func readJournal(dir string, withKeys bool) (*journalState, error) {
	st := &journalState{done: map[string]struct{}{}, shardEnds: map[string]int64{}}
	if withKeys {
		st.keys = map[string]map[int64]string{}
	}
	var e JournalEntry
	valid, torn, err := readJSONL(filepath.Join(dir, JournalFile), -1, func(line []byte, end int64) error {
		e = JournalEntry{}
		if err := decodeInto(&e)(line, end); err != nil {
			return err
		}
		if e.Key == "" || e.Shard == "" || e.End <= 0 {
			return &decodeError{fmt.Errorf("journal entry without key, shard or end")}
		}
		st.done[e.Key] = struct{}{}
		if e.End > st.shardEnds[e.Shard] {
			st.shardEnds[e.Shard] = e.End
		}
		if withKeys {
			m := st.keys[e.Shard]
			if m == nil {
				m = map[int64]string{}
				st.keys[e.Shard] = m
			}
			m[e.End] = e.Key
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("run dir %s: journal: %w", dir, err)
	}
	st.valid, st.torn = valid, torn
	return st, nil
}

// missingShard is the error of a shard the journal records but dir lacks (the run dir is
// damaged), nil when every one is there.
func (st *journalState) missingShard(dir string) error {
	for name := range st.shardEnds {
		if _, err := os.Stat(filepath.Join(dir, ShardsDir, name)); err != nil {
			return fmt.Errorf("run dir %s: the journal records shard %s, which is missing: the run dir is damaged", dir, name)
		}
	}
	return nil
}

// Line is one committed shard line.
type Line struct {
	// Shard is the shard file's name, Path its path; N counts the shard's lines from 1.
	Shard string
	Path  string
	N     int
	// Key is the key the journal records for the line ("" when it records none).
	Key string
	// Data is the line without its newline, a copy the caller may keep.
	Data []byte
}

// Lines streams the committed lines of a run dir: every shard up to the end of its last
// journaled line, in shard order (ShardFiles), one line in memory at a time. A line longer than
// MaxLine (written by a version before the writer refused them) is yielded as a *BadLine error
// with its Line's position, and Lines goes on when the consumer's loop does. A journaled part
// that ends inside a line, a journaled shard that is missing, or a journal that does not read
// is an error that ends the sequence (the run dir is damaged); a torn tail past the journaled
// part is not read.
func Lines(dir string) iter.Seq2[Line, error] {
	return func(yield func(Line, error) bool) {
		if err := Check(dir); err != nil {
			yield(Line{}, err)
			return
		}
		js, err := readJournal(dir, true)
		if err == nil {
			err = js.missingShard(dir)
		}
		if err != nil {
			yield(Line{}, err)
			return
		}
		names, err := ShardFiles(dir)
		if err != nil {
			yield(Line{}, err)
			return
		}
		stop := errors.New("stop")
		for _, name := range names {
			end, ok := js.shardEnds[name]
			if !ok {
				continue
			}
			path := filepath.Join(dir, ShardsDir, name)
			keys := js.keys[name]
			n := 0
			_, torn, err := readJSONL(path, end, func(data []byte, end int64) error {
				n++
				if !yield(Line{Shard: name, Path: path, N: n, Key: keys[end], Data: data}, nil) {
					return stop
				}
				return nil
			}, func(b *BadLine) error {
				n++
				b.File, b.Key = name, keys[b.End]
				if !yield(Line{Shard: name, Path: path, N: n, Key: b.Key}, b) {
					return stop
				}
				return nil
			})
			if errors.Is(err, stop) {
				return
			}
			if err == nil && torn {
				err = fmt.Errorf("%s: the journaled part ends inside a line: the run dir is damaged", path)
			}
			if err != nil {
				yield(Line{}, err)
				return
			}
		}
	}
}

// ReadFailures returns the failures of a run dir whose keys were not committed later (by a
// --retry-failed run), in file order, the latest record per key. A line that does not decode or
// is over MaxLine, before the last, is skipped and returned in skipped (a failure is not a
// result: at worst its key is reported as pending).
func ReadFailures(dir string) (failures []Failure, skipped []*BadLine, err error) {
	js, err := readJournal(dir, false)
	if err != nil {
		return nil, nil, err
	}
	latest := map[string]int{}
	var fl Failure
	_, _, err = readJSONL(filepath.Join(dir, FailuresFile), -1, func(line []byte, end int64) error {
		fl = Failure{}
		if err := decodeInto(&fl)(line, end); err != nil {
			return err
		}
		if _, ok := js.done[fl.Key]; ok {
			return nil
		}
		if i, ok := latest[fl.Key]; ok {
			failures[i] = fl
			return nil
		}
		latest[fl.Key] = len(failures)
		failures = append(failures, fl)
		return nil
	}, func(b *BadLine) error {
		b.File = FailuresFile
		skipped = append(skipped, b)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	return failures, skipped, nil
}

// DoneKeys returns the committed keys of a run dir.
func DoneKeys(dir string) (map[string]struct{}, error) {
	js, err := readJournal(dir, false)
	if err != nil {
		return nil, err
	}
	return js.done, nil
}
