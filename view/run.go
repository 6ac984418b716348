package view

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/rundir"
)

// runDir is a run or eval dir read live: refresh re-reads it through rundir.Trajectories
// (rundir.Lines, which stops at the journaled end of each shard, so a line being written is
// never seen)
// whenever the journal has grown, and keeps the trajectories it had not seen.
//
// Trajectories are kept in memory, system prompts interned (one per database and dialect)
// and the copies of each turn's reply and observation that the messages already hold
// dropped. A re-read decodes the whole run again: rundir.Lines does not resume at an
// offset, so the viewer polls less often as runs grow (see Server.watch).
type runDir struct {
	dir  string
	kind Kind

	mu    sync.RWMutex
	trajs []*rundir.Trajectory
	keys  map[string]struct{}
	// readErr is the last re-read's error; what came before it is kept. skipped are the
	// damaged lines (rundir.BadLine) the last re-read skipped.
	readErr error
	skipped []string
	// journal is the journal's size and time at the last re-read.
	journalSize int64
	journalTime time.Time
	systems     map[string]string
	// summary is the eval dir's summary.json (nil when absent); results its results.jsonl
	// by task id (sample 0, or the vote), re-read when the files change.
	summary     *evaluate.Summary
	results     map[string]evaluate.Result
	summaryTime time.Time
	resultsTime time.Time
}

func newRunDir(dir string, kind Kind) *runDir {
	return &runDir{dir: dir, kind: kind, keys: map[string]struct{}{}, systems: map[string]string{}}
}

// changed reports whether the journal differs from the last re-read.
func (r *runDir) changed() bool {
	st, err := os.Stat(filepath.Join(r.dir, rundir.JournalFile))
	if err != nil {
		return r.journalSize != 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return st.Size() != r.journalSize || !st.ModTime().Equal(r.journalTime)
}

// refresh re-reads the run when its journal changed and returns the trajectories not seen
// before, with their positions. A read error is kept (readErr) and returned with what was
// read up to it.
func (r *runDir) refresh(ctx context.Context) (added []int, err error) {
	r.refreshEval()
	if !r.changed() {
		return nil, nil
	}
	var size int64
	var mod time.Time
	if st, err := os.Stat(filepath.Join(r.dir, rundir.JournalFile)); err == nil {
		size, mod = st.Size(), st.ModTime()
	}
	var fresh []*rundir.Trajectory
	var readErr error
	var skipped []string
	n := 0
	for t, err := range rundir.Trajectories(r.dir) {
		if b, bad := rundir.SkipBad(err); bad {
			skipped = append(skipped, b.Error())
			continue
		}
		if err != nil {
			readErr = err
			break
		}
		if n++; n%512 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.mu.RLock()
		_, seen := r.keys[t.Key]
		r.mu.RUnlock()
		if !seen {
			fresh = append(fresh, r.compact(t))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range fresh {
		if _, seen := r.keys[t.Key]; seen {
			continue
		}
		r.keys[t.Key] = struct{}{}
		added = append(added, len(r.trajs))
		r.trajs = append(r.trajs, t)
	}
	r.readErr, r.skipped = readErr, skipped
	if readErr == nil {
		r.journalSize, r.journalTime = size, mod
	}
	return added, readErr
}

// compact drops the system prompt's bytes when an earlier trajectory had the same one.
func (r *runDir) compact(t *rundir.Trajectory) *rundir.Trajectory {
	r.mu.Lock()
	if s, ok := r.systems[t.System]; ok {
		t.System = s
	} else {
		r.systems[t.System] = t.System
	}
	r.mu.Unlock()
	return t
}

// trajectory returns the trajectory at position pos.
func (r *runDir) trajectory(pos int) (*rundir.Trajectory, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if pos < 0 || pos >= len(r.trajs) {
		return nil, false
	}
	return r.trajs[pos], true
}

func (r *runDir) snapshot() []*rundir.Trajectory {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.trajs[:len(r.trajs):len(r.trajs)]
}

func (r *runDir) status() (n int, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.readErr == nil && len(r.skipped) > 0 {
		return len(r.trajs), fmt.Errorf("skipped %d damaged lines: %s", len(r.skipped), strings.Join(r.skipped, "; "))
	}
	return len(r.trajs), r.readErr
}

// refreshEval re-reads summary.json and results.jsonl of an eval dir when they changed.
func (r *runDir) refreshEval() {
	if r.kind != KindEval {
		return
	}
	if st, err := os.Stat(filepath.Join(r.dir, evaluate.SummaryFile)); err == nil && !st.ModTime().Equal(r.summaryTime) {
		if s, err := evaluate.ReadSummary(r.dir); err == nil {
			r.mu.Lock()
			r.summary, r.summaryTime = s, st.ModTime()
			r.mu.Unlock()
		}
	}
	if st, err := os.Stat(filepath.Join(r.dir, evaluate.ResultsFile)); err == nil && !st.ModTime().Equal(r.resultsTime) {
		if rs, err := evaluate.ReadResults(r.dir); err == nil {
			m := map[string]evaluate.Result{}
			for _, res := range rs {
				if old, ok := m[res.ID]; !ok || res.Sample < old.Sample {
					m[res.ID] = res
				}
			}
			r.mu.Lock()
			r.results, r.resultsTime = m, st.ModTime()
			r.mu.Unlock()
		}
	}
}

// evalFiles returns the eval dir's summary and results (nil when absent).
func (r *runDir) evalFiles() (*evaluate.Summary, map[string]evaluate.Result) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.summary, r.results
}

// policyName is the eval dir's policy: summary.json's, else the manifest's only teacher,
// else the directory's name.
func (r *runDir) policyName() string {
	if s, _ := r.evalFiles(); s != nil && s.Policy != "" {
		return s.Policy
	}
	if m, err := rundir.ReadManifest(r.dir); err == nil && len(m.Teachers) == 1 {
		return m.Teachers[0].Name
	}
	return filepath.Base(filepath.Clean(r.dir))
}

// assistantMessage is turn k's assistant message: messages are system, user, then assistant
// and observation alternating.
func assistantMessage(msgs []chat.Message, k int) (chat.Message, bool) {
	i := 2 + 2*k
	if i < len(msgs) && msgs[i].Role == chat.RoleAssistant {
		return msgs[i], true
	}
	return chat.Message{}, false
}

// observationMessage is the observation answering turn k.
func observationMessage(msgs []chat.Message, k int) (chat.Message, bool) {
	i := 3 + 2*k
	if i < len(msgs) && msgs[i].Role == chat.RoleUser {
		return msgs[i], true
	}
	return chat.Message{}, false
}

var errNoRow = errors.New("no such row")
