package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Log defaults: the shard limits of a log (those of distill's runner).
const (
	LogMaxShardBytes = 256 << 20
	LogMaxShardLines = 100_000
)

// Log is a run dir written one finished episode at a time by a producer that is not distill's
// runner (the env server's episodes, student rollout's samples): the same Writer, journal,
// rotation and resume repair, so curate, stats and the viewer read it as any run dir. Add may
// be called concurrently.
type Log struct {
	mu     sync.Mutex // serialises Add and Close, so an Add after Close is an error, not a race
	w      *Writer
	dir    string
	closed bool
}

// OpenLog creates dir with manifest m, or resumes it when it holds one: the run dir's manifest
// must have m's format and agree with m (Disagreement), else OpenLog refuses it, naming the
// first field that differs.
func OpenLog(dir string, m *Manifest) (*Log, error) {
	w, err := Open(dir, Options{
		Manifest: m,
		Resume: func() error {
			old, err := ReadManifest(dir)
			if err != nil {
				return err
			}
			if f := old.FormatVersion(); f != RunFormat {
				return fmt.Errorf("run dir %s has format %s; a log adds only to %s", dir, f, RunFormat)
			}
			if d := old.Disagreement(m); d != "" {
				return fmt.Errorf("run dir %s is another run: %s", dir, d)
			}
			return nil
		},
		MaxShardBytes: LogMaxShardBytes,
		MaxShardLines: LogMaxShardLines,
	})
	if err != nil {
		return nil, err
	}
	return &Log{w: w, dir: dir}, nil
}

// Done reports whether key is in the run dir.
func (l *Log) Done(key string) bool { return l.w.Done(key) }

// Dir is the run dir's path.
func (l *Log) Dir() string { return l.dir }

// Repairs lists what opening the log cut or fixed, for the log output.
func (l *Log) Repairs() []string { return l.w.Repairs() }

// Add commits tr as one line (journaled and fsynced before it returns). A key already in the
// run dir is an error: a log's keys are unique.
func (l *Log) Add(tr *Trajectory) error {
	line, err := json.Marshal(tr)
	if err != nil {
		return fmt.Errorf("run dir %s: key %s: %w", l.dir, tr.Key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("run dir %s: key %s: %w", l.dir, tr.Key, errLogClosed)
	}
	done, err := l.w.Commit([]Record{{Entry: JournalEntry{Key: tr.Key, Task: tr.TaskID, Teacher: tr.Teacher, Dialect: tr.Dialect, Sample: tr.Sample}, Line: line}})
	if err != nil {
		return fmt.Errorf("run dir %s: %w", l.dir, err)
	}
	if len(done) == 0 {
		return fmt.Errorf("run dir %s: key %s is already there", l.dir, tr.Key)
	}
	return nil
}

// Close closes the run dir's files; every Add that returned is already on disk.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.w.Close()
}

// errLogClosed is Add's error after Close (a request that outlived the server's drain).
var errLogClosed = errors.New("the log is closed")
