package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Log defaults: the shard limits of a log (those of distill's runner).
const (
	LogMaxShardBytes = 256 << 20
	LogMaxShardLines = 100_000
)

// logBatch bounds the lines one group commit writes.
const logBatch = 256

// Log is a run dir written one finished episode at a time by a producer that is not distill's
// runner (the env server's episodes, student rollout's samples): the same Writer, journal,
// rotation and resume repair, so curate, stats and the viewer read it as any run dir. Add may
// be called concurrently: the lines of concurrent Adds are committed together (one fsync of
// the shards and one of the journal for all of them).
type Log struct {
	mu     sync.RWMutex // Add holds it to read, Close to write: no Add sends after Close
	w      *Writer
	dir    string
	closed bool
	reqs   chan *logReq
	exited chan struct{}
}

// logReq is one Add waiting for its commit.
type logReq struct {
	rec  Record
	done chan error
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
	l := &Log{w: w, dir: dir, reqs: make(chan *logReq, logBatch), exited: make(chan struct{})}
	go l.commitLoop()
	return l, nil
}

// commitLoop commits what Adds sent, each time all that is waiting (at most logBatch lines).
func (l *Log) commitLoop() {
	defer close(l.exited)
	for r := range l.reqs {
		batch := []*logReq{r}
	more:
		for len(batch) < logBatch {
			select {
			case r, ok := <-l.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		recs := make([]Record, len(batch))
		for i, r := range batch {
			recs[i] = r.rec
		}
		done, err := l.w.Commit(recs)
		for i, r := range batch {
			switch {
			case err != nil:
				r.done <- fmt.Errorf("run dir %s: %w", l.dir, err)
			case !slices.Contains(done, i):
				r.done <- fmt.Errorf("run dir %s: key %s is already there", l.dir, r.rec.Entry.Key)
			default:
				r.done <- nil
			}
		}
	}
}

// Done reports whether key is in the run dir.
func (l *Log) Done(key string) bool { return l.w.Done(key) }

// Dir is the run dir's path.
func (l *Log) Dir() string { return l.dir }

// Repairs lists what opening the log cut or fixed, for the log output.
func (l *Log) Repairs() []string { return l.w.Repairs() }

// Add commits tr as one line: when it returns nil the line is journaled and fsynced. A key
// already in the run dir is an error: a log's keys are unique.
func (l *Log) Add(tr *Trajectory) error {
	line, err := json.Marshal(tr)
	if err != nil {
		return fmt.Errorf("run dir %s: key %s: %w", l.dir, tr.Key, err)
	}
	r := &logReq{rec: Record{Entry: JournalEntry{Key: tr.Key, Task: tr.TaskID, Teacher: tr.Teacher, Dialect: tr.Dialect, Sample: tr.Sample}, Line: line}, done: make(chan error, 1)}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return fmt.Errorf("run dir %s: key %s: %w", l.dir, tr.Key, errLogClosed)
	}
	l.reqs <- r
	l.mu.RUnlock()
	return <-r.done
}

// Close commits the Adds under way, then closes the run dir's files; an Add after Close is an
// error.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.reqs)
	l.mu.Unlock()
	<-l.exited
	return l.w.Close()
}

// errLogClosed is Add's error after Close (a request that outlived the server's drain).
var errLogClosed = errors.New("the log is closed")
