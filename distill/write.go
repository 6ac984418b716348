package distill

import (
	"context"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/rundir"
)

// pending is one result waiting for the writer: a trajectory and its JSON line (no newline), or
// a failure.
type pending struct {
	tr   *rundir.Trajectory
	line []byte
	fail *rundir.Failure
	// permanent is the error of a failure every request would meet (see earlyStop), hint its fix.
	permanent, hint string
}

// record is p as the run dir's writer takes it.
func (p pending) record() rundir.Record {
	if p.fail != nil {
		return rundir.Record{Failure: p.fail}
	}
	return rundir.Record{
		Entry: rundir.JournalEntry{Key: p.tr.Key, Task: p.tr.TaskID, Teacher: p.tr.Teacher, Dialect: p.tr.Dialect, Sample: p.tr.Sample},
		Line:  p.line,
	}
}

// writer commits the players' results to the run dir on its own goroutine, in batches, and
// counts each committed one in the run's result, the usage, the progress and the early stop.
type writer struct {
	cfg    *RunConfig
	rd     *rundir.Writer
	usage  *rundir.Usage
	prog   *progress
	res    *RunResult
	stop   *earlyStop
	cancel context.CancelCauseFunc // ends the work on an error

	results chan pending
	done    chan error

	retried map[string]bool // failed keys that this invocation retries: counted once
	err     error           // the first error; later results are drained, not written
	stopped bool            // err is the early stop's: the usage of what was written is still saved
}

// startWriter starts the writer's loop; cancel ends the work when a write fails or the early
// stop stops the run.
func startWriter(cfg *RunConfig, rd *rundir.Writer, usage *rundir.Usage, prog *progress, res *RunResult, stop *earlyStop, cancel context.CancelCauseFunc) *writer {
	w := &writer{
		cfg: cfg, rd: rd, usage: usage, prog: prog, res: res, stop: stop, cancel: cancel,
		results: make(chan pending, 64), done: make(chan error, 1), retried: map[string]bool{},
	}
	go func() { w.done <- w.loop() }()
	return w
}

// wait closes results, once no player sends any more, and returns the loop's error when it has
// committed the rest.
func (w *writer) wait() error {
	close(w.results)
	return <-w.done
}

// loop commits results in batches until results closes, writing usage.json at most every 5 s
// and at the end. On an error it cancels the work and keeps draining so no player blocks.
func (w *writer) loop() error {
	lastUsage := time.Now()
	for p := range w.results {
		batch := w.collect(p)
		if w.err != nil {
			continue
		}
		if !w.commit(batch) {
			continue
		}
		if time.Since(lastUsage) > 5*time.Second {
			if err := writeUsage(w.cfg, w.usage); err != nil {
				w.fail(err)
			}
			lastUsage = time.Now()
		}
	}
	if w.err != nil {
		if w.stopped {
			if err := writeUsage(w.cfg, w.usage); err != nil {
				return err
			}
		}
		return w.err
	}
	return writeUsage(w.cfg, w.usage)
}

// collect returns first and the results waiting behind it, at most 256 in all.
func (w *writer) collect(first pending) []pending {
	batch := []pending{first}
	for len(batch) < 256 {
		select {
		case q, ok := <-w.results:
			if !ok {
				return batch
			}
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}

// commit writes batch to the run dir and counts what was committed; false when the write failed.
func (w *writer) commit(batch []pending) bool {
	records := make([]rundir.Record, len(batch))
	for i, p := range batch {
		records[i] = p.record()
	}
	committed, err := w.rd.Commit(records)
	if err != nil {
		w.fail(fmt.Errorf("run dir %s: %w", w.cfg.Dir, err))
		return false
	}
	for _, i := range committed {
		w.count(batch[i])
	}
	return true
}

// count counts the committed result p: in the run's result, the teacher's usage (a retried
// failure that now succeeded is no longer a failure), the progress and the early stop, which
// may stop the run.
func (w *writer) count(p pending) {
	if f := p.fail; f != nil {
		w.res.Failed++
		u := teacherUsage(w.usage, f.Teacher, "")
		if !w.retried[f.Key] {
			u.Failed++
		}
		w.prog.failed(f.Teacher)
		if err := w.stop.done(f.Teacher, p); err != nil && w.err == nil {
			w.fail(err)
			w.stopped = true
		}
		return
	}
	tr := p.tr
	w.stop.done(tr.Teacher, p)
	w.res.Done++
	u := teacherUsage(w.usage, tr.Teacher, tr.Model)
	u.Trajectories++
	if w.rd.Failed(tr.Key) && !w.retried[tr.Key] {
		u.Failed--
		w.retried[tr.Key] = true
	}
	addTrajectoryUsage(u, tr, w.cfg)
	w.prog.done(tr)
}

// fail records err as the writer's error and cancels the work.
func (w *writer) fail(err error) {
	w.err = err
	w.cancel(err)
}

// teacherUsage returns name's entry of u, creating it; a non-empty model is recorded.
func teacherUsage(u *rundir.Usage, name, model string) *rundir.TeacherUsage {
	t := u.Teachers[name]
	if t == nil {
		t = &rundir.TeacherUsage{}
		u.Teachers[name] = t
	}
	if model != "" {
		t.Model = model
	}
	return t
}

// addTrajectoryUsage adds tr to its teacher's usage u: turns, tokens, cost, requests and retries.
func addTrajectoryUsage(u *rundir.TeacherUsage, tr *rundir.Trajectory, cfg *RunConfig) {
	u.Turns += len(tr.Turns)
	u.Usage = u.Usage.Add(tr.Usage)
	for _, p := range cfg.Policies {
		if p.Name == tr.Teacher && p.Cost != nil {
			u.CostUSD += p.Cost(tr.Usage)
		}
	}
	// Requests are taken from the turns: a reply's Attempts counts its retries.
	for _, t := range tr.Turns {
		n := max(t.Attempts, 1)
		u.Requests += n
		u.Retries += n - 1
	}
}

// writeUsage records each policy's own counters in u and writes usage.json.
func writeUsage(cfg *RunConfig, u *rundir.Usage) error {
	for _, p := range cfg.Policies {
		if p.Stats != nil {
			teacherUsage(u, p.Name, p.Model).Client = p.Stats()
		}
	}
	u.Updated = time.Now().UTC()
	return rundir.WriteUsage(cfg.Dir, u)
}
