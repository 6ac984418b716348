package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// Options say how Open creates or resumes a run dir.
type Options struct {
	// Manifest is written as manifest.json (indented JSON) when the dir has none.
	Manifest any
	// Resume is called when the dir has a manifest.json already; its error refuses the dir
	// (a different run, a format this writer cannot add to). Nil accepts any.
	Resume func() error
	// MaxShardBytes and MaxShardLines rotate shard files (both must be positive).
	MaxShardBytes int64
	MaxShardLines int
}

// shardFile is an open shard being appended to.
type shardFile struct {
	name  string
	f     *os.File
	size  int64
	lines int
	seq   int
	dirty bool
}

// Writer is an open run dir with a single writer. Done and Failed may be called concurrently
// with Commit.
type Writer struct {
	mu       sync.RWMutex // guards done and failed against readers beside Commit
	dir      string
	journal  *os.File
	failures *os.File
	done     map[string]struct{}
	failed   map[string]struct{}
	shards   map[string]*shardFile // by TEACHER.DIALECT
	nextSeq  map[string]int        // next free sequence number by TEACHER.DIALECT
	maxBytes int64
	maxLines int
	repairs  []string
}

// Open creates dir or resumes it: it checks or writes the manifest, cuts a torn journal tail,
// cuts every shard back to the end of its last journaled line, reads the failures (cutting their
// torn tail) and opens the journal and failures for appending.
func Open(dir string, o Options) (*Writer, error) {
	if o.MaxShardBytes <= 0 || o.MaxShardLines <= 0 {
		return nil, fmt.Errorf("run dir %s: shard limits must be positive (MaxShardBytes %d, MaxShardLines %d)", dir, o.MaxShardBytes, o.MaxShardLines)
	}
	if err := os.MkdirAll(filepath.Join(dir, ShardsDir), 0o755); err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	mpath := filepath.Join(dir, ManifestFile)
	if _, err := os.Stat(mpath); err == nil {
		if o.Resume != nil {
			if err := o.Resume(); err != nil {
				return nil, err
			}
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if err := atomicfile.WriteJSON(mpath, o.Manifest, filePerm); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}

	w := &Writer{dir: dir, failed: map[string]struct{}{}, shards: map[string]*shardFile{}, nextSeq: map[string]int{}, maxBytes: o.MaxShardBytes, maxLines: o.MaxShardLines}
	js, err := readJournal(dir, false)
	if err != nil {
		return nil, err
	}
	w.done = js.done
	jpath := filepath.Join(dir, JournalFile)
	w.journal, err = os.OpenFile(jpath, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("run dir %s: journal: %w", dir, err)
	}
	if err := cutTo(w.journal, js.valid, &w.repairs, JournalFile); err != nil {
		w.Close()
		return nil, err
	}

	// Cut every shard back to its last journaled line.
	entries, err := os.ReadDir(filepath.Join(dir, ShardsDir))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	for _, de := range entries {
		teacher, d, seq, ok := parseShardName(de.Name())
		if !ok || de.IsDir() {
			continue
		}
		group := teacher + "." + string(d)
		if seq+1 > w.nextSeq[group] {
			w.nextSeq[group] = seq + 1
		}
		end := js.shardEnds[de.Name()]
		info, err := de.Info()
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("run dir %s: %w", dir, err)
		}
		switch {
		case info.Size() < end:
			w.Close()
			return nil, fmt.Errorf("run dir %s: shard %s has %d bytes but the journal records %d: the run dir is damaged", dir, de.Name(), info.Size(), end)
		case info.Size() > end:
			f, err := os.OpenFile(filepath.Join(dir, ShardsDir, de.Name()), os.O_RDWR, filePerm)
			if err != nil {
				w.Close()
				return nil, fmt.Errorf("run dir %s: %w", dir, err)
			}
			err = cutTo(f, end, &w.repairs, filepath.Join(ShardsDir, de.Name()))
			f.Close()
			if err != nil {
				w.Close()
				return nil, err
			}
		}
	}
	if err := js.missingShard(dir); err != nil {
		w.Close()
		return nil, err
	}

	fpath := filepath.Join(dir, FailuresFile)
	var fl Failure
	fvalid, _, err := readJSONL(fpath, -1, func(line []byte, end int64) error {
		fl = Failure{}
		if err := decodeInto(&fl)(line, end); err != nil {
			return err
		}
		w.failed[fl.Key] = struct{}{}
		return nil
	}, func(b *BadLine) error {
		// Kept in the file; its key, if any, is not known as failed and is run again.
		w.repairs = append(w.repairs, fmt.Sprintf("skipped %s line %d (%d bytes): %v", FailuresFile, b.N, b.Bytes, b.Err))
		return nil
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	w.failures, err = os.OpenFile(fpath, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	if err := cutTo(w.failures, fvalid, &w.repairs, FailuresFile); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Repairs lists what Open cut or fixed, for the log.
func (w *Writer) Repairs() []string { return w.repairs }

// Done reports whether key is committed.
func (w *Writer) Done(key string) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	_, ok := w.done[key]
	return ok
}

// Failed reports whether key has a failure record (this invocation's or an earlier one's).
func (w *Writer) Failed(key string) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	_, ok := w.failed[key]
	return ok
}

// cutTo truncates f to n bytes when longer, fsyncs, and leaves the offset at the end.
func cutTo(f *os.File, n int64, repairs *[]string, name string) error {
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if info.Size() > n {
		if err := f.Truncate(n); err != nil {
			return fmt.Errorf("%s: cutting the torn tail: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*repairs = append(*repairs, fmt.Sprintf("cut %d uncommitted bytes from %s", info.Size()-n, name))
	}
	if _, err := f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Record is one result to commit: a shard line with its journal entry, or a failure.
type Record struct {
	// Entry names the line's key, task, teacher, dialect and sample; Commit fills in Shard and
	// End. The line goes to a shard of (Entry.Teacher, Entry.Dialect).
	Entry JournalEntry
	// Line is the shard line, without its newline.
	Line []byte
	// Failure, when set, makes the record a failure instead (Entry and Line unused).
	Failure *Failure
}

// Commit writes a batch: shard lines, fsync shards, journal lines, fsync journal; failures,
// fsync failures. It skips records (lines and failures) whose key is already done, and returns
// the indices in batch of those it committed.
func (w *Writer) Commit(batch []Record) (committed []int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var jbuf, fbuf bytes.Buffer
	var failed []string
	enc := json.NewEncoder(&jbuf)
	for i, r := range batch {
		if r.Failure != nil {
			if _, ok := w.done[r.Failure.Key]; ok {
				continue
			}
			f := *r.Failure
			f.Error = textcap.Cut(f.Error, textcap.Error)
			line, err := json.Marshal(&f)
			if err != nil {
				return nil, fmt.Errorf("failure record: %w", err)
			}
			fbuf.Write(line)
			fbuf.WriteByte('\n')
			failed = append(failed, r.Failure.Key)
			committed = append(committed, i)
			continue
		}
		e := r.Entry
		if _, ok := w.done[e.Key]; ok {
			continue
		}
		if len(r.Line)+1 > MaxLine {
			return nil, fmt.Errorf("key %s: a line of %d bytes is over the readers' limit of %d bytes: not written", e.Key, len(r.Line)+1, MaxLine)
		}
		sf, err := w.shardFor(e.Teacher, e.Dialect, int64(len(r.Line)+1))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, 0, len(r.Line)+1)
		buf = append(append(buf, r.Line...), '\n')
		if _, err := sf.f.Write(buf); err != nil {
			return nil, fmt.Errorf("shard %s: %w", sf.name, err)
		}
		sf.size += int64(len(buf))
		sf.lines++
		sf.dirty = true
		e.Shard, e.End = sf.name, sf.size
		if err := enc.Encode(e); err != nil {
			return nil, fmt.Errorf("journal entry: %w", err)
		}
		w.done[e.Key] = struct{}{}
		committed = append(committed, i)
	}
	for _, sf := range w.shards {
		if sf.dirty {
			if err := sf.f.Sync(); err != nil {
				return nil, fmt.Errorf("shard %s: fsync: %w", sf.name, err)
			}
			sf.dirty = false
		}
	}
	if jbuf.Len() > 0 {
		if _, err := w.journal.Write(jbuf.Bytes()); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		if err := w.journal.Sync(); err != nil {
			return nil, fmt.Errorf("journal: fsync: %w", err)
		}
	}
	if fbuf.Len() > 0 {
		if _, err := w.failures.Write(fbuf.Bytes()); err != nil {
			return nil, fmt.Errorf("%s: %w", FailuresFile, err)
		}
		if err := w.failures.Sync(); err != nil {
			return nil, fmt.Errorf("%s: fsync: %w", FailuresFile, err)
		}
		for _, k := range failed {
			w.failed[k] = struct{}{}
		}
	}
	return committed, nil
}

// shardFor returns the shard to append n bytes of (teacher, dialect) to, rotating when the
// current one is full.
func (w *Writer) shardFor(teacher string, d datasets.Dialect, n int64) (*shardFile, error) {
	group := teacher + "." + string(d)
	sf := w.shards[group]
	if sf != nil && sf.lines > 0 && (sf.size+n > w.maxBytes || sf.lines >= w.maxLines) {
		if sf.dirty {
			if err := sf.f.Sync(); err != nil {
				return nil, fmt.Errorf("shard %s: fsync: %w", sf.name, err)
			}
		}
		if err := sf.f.Close(); err != nil {
			return nil, fmt.Errorf("shard %s: %w", sf.name, err)
		}
		delete(w.shards, group)
		sf = nil
	}
	if sf != nil {
		return sf, nil
	}
	// Continue the newest existing shard of the group when it has room, else start a new one.
	seq := w.nextSeq[group]
	if seq > 0 {
		name := ShardName(teacher, d, seq-1)
		path := filepath.Join(w.dir, ShardsDir, name)
		if info, err := os.Stat(path); err == nil && info.Size()+n <= w.maxBytes {
			lines, err := countLines(path)
			if err != nil {
				return nil, err
			}
			if lines < w.maxLines {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, filePerm)
				if err != nil {
					return nil, fmt.Errorf("shard %s: %w", name, err)
				}
				sf = &shardFile{name: name, f: f, size: info.Size(), lines: lines, seq: seq - 1}
				w.shards[group] = sf
				return sf, nil
			}
		}
	}
	name := ShardName(teacher, d, seq)
	f, err := os.OpenFile(filepath.Join(w.dir, ShardsDir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", name, err)
	}
	if err := atomicfile.SyncDir(filepath.Join(w.dir, ShardsDir)); err != nil {
		f.Close()
		return nil, err
	}
	w.nextSeq[group] = seq + 1
	sf = &shardFile{name: name, f: f, seq: seq}
	w.shards[group] = sf
	return sf, nil
}

// countLines counts the newlines of path.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 1<<16)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
}

// Close closes the open shards, the journal and the failures.
func (w *Writer) Close() error {
	var errs []error
	for _, sf := range w.shards {
		errs = append(errs, sf.f.Close())
	}
	w.shards = map[string]*shardFile{}
	if w.journal != nil {
		errs = append(errs, w.journal.Close())
		w.journal = nil
	}
	if w.failures != nil {
		errs = append(errs, w.failures.Close())
		w.failures = nil
	}
	return errors.Join(errs...)
}
