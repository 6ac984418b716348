package distill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
)

// job is one key to play: a task, a dialect, a sample.
type job struct {
	task    datasets.Task
	dialect datasets.Dialect
	sample  int
	key     string
}

// forKeys calls fn for every key of policy p in this shard, tasks outermost; fn returns false to
// stop.
func forKeys(cfg *RunConfig, p *episode.PolicyHandle, fn func(job) bool) {
	for _, t := range cfg.Tasks {
		for _, d := range cfg.Dialects {
			for s := range cfg.Samples {
				k := episode.Key(t.ID, p.Name, d, s)
				if !cfg.Shard.Has(k) {
					continue
				}
				if !fn(job{task: t, dialect: d, sample: s, key: k}) {
					return
				}
			}
		}
	}
}

// skip reports whether key needs no work: done, or failed before and not retried.
func skip(rd *rundir.Writer, key string, retryFailed bool) bool {
	return rd.Done(key) || (!retryFailed && rd.Failed(key))
}

// players play the episodes of the run's keys and send what to write to results.
type players struct {
	cfg     *RunConfig
	rd      *rundir.Writer
	results chan<- pending
	prog    *progress
}

// play runs, for each policy, a producer (feed) and concurrency(p) workers (worker) over a channel
// of that size, and returns when all are done: every key played, or run or work ended.
func (pl *players) play(run, work context.Context, policies []*episode.PolicyHandle) {
	var wg sync.WaitGroup
	for _, p := range policies {
		n := concurrency(pl.cfg, p)
		jobs := make(chan job, n)
		wg.Go(func() { pl.feed(run, work, p, jobs) })
		for range n {
			wg.Go(func() { pl.worker(run, work, p, jobs) })
		}
	}
	wg.Wait()
}

// concurrency is how many episodes of p run at once: cfg.Concurrency, else the policy's own,
// else DefaultConcurrency (2 × GOMAXPROCS for the oracle).
func concurrency(cfg *RunConfig, p *episode.PolicyHandle) int {
	n := cfg.Concurrency
	if n == 0 {
		n = p.Concurrency
	}
	if n <= 0 {
		n = DefaultConcurrency
		if p.Name == episode.OracleName {
			n = 2 * runtime.GOMAXPROCS(0)
		}
	}
	return n
}

// feed sends p's keys to do to jobs, in forKeys order, until they are all sent or run or work
// ends; then it closes jobs.
func (pl *players) feed(run, work context.Context, p *episode.PolicyHandle, jobs chan<- job) {
	defer close(jobs)
	forKeys(pl.cfg, p, func(j job) bool {
		if skip(pl.rd, j.key, pl.cfg.RetryFailed) {
			return true
		}
		select {
		case jobs <- j:
			return true
		case <-run.Done():
			return false
		case <-work.Done():
			return false
		}
	})
}

// worker plays the jobs of p one after another and sends each result to results. Once run or
// work has ended it starts no episode and drains jobs; an episode cut by work's end, or whose
// result can not be sent before it, counts as abandoned.
func (pl *players) worker(run, work context.Context, p *episode.PolicyHandle, jobs <-chan job) {
	for j := range jobs {
		if run.Err() != nil || work.Err() != nil {
			continue
		}
		out := runOne(work, pl.cfg, p, j)
		if out.fail == nil && out.tr == nil {
			pl.prog.abandoned(p.Name)
			continue
		}
		select {
		case pl.results <- out:
		case <-work.Done():
			pl.prog.abandoned(p.Name)
		}
	}
}

// runOne runs one episode and returns what to write: a trajectory, a failure, or neither when
// the episode was abandoned by cancellation.
func runOne(ctx context.Context, cfg *RunConfig, p *episode.PolicyHandle, j job) pending {
	fail := func(reason string, err error, turns int) pending {
		if ctx.Err() != nil {
			return pending{}
		}
		return pending{fail: &rundir.Failure{Key: j.key, Task: j.task.ID, Teacher: p.Name, Dialect: j.dialect, Sample: j.sample, Reason: reason, Error: err.Error(), Turns: turns, Time: time.Now().UTC()}}
	}
	db, err := cfg.Opener.Open(ctx, j.dialect, j.task)
	if err != nil {
		return fail("database", fmt.Errorf("opening %s (%s): %w", j.task.DBID, j.dialect, err), 0)
	}
	opts := cfg.Episode
	opts.Teacher, opts.Model, opts.Sample, opts.Schemas, opts.GoldOpener = p.Name, p.Model, j.sample, cfg.Schemas, cfg.Opener
	tr, err := episode.Episode(ctx, p.Policy, j.task, db, opts)
	if err != nil {
		turns := 0
		if tr != nil {
			turns = len(tr.Turns)
		}
		var pe *episode.PolicyError
		reason := "database"
		if errors.As(err, &pe) {
			reason = "policy"
			if r := reasonOf(p, pe.Err); r != "" {
				reason += ":" + r
			}
		}
		out := fail(reason, err, turns)
		if pe != nil {
			out.permanent, out.hint = permanentText(pe.Err)
		}
		return out
	}
	line, err := encodeLine(tr)
	if err != nil {
		return fail("encode", err, len(tr.Turns))
	}
	return pending{tr: tr, line: line}
}

// encodeLine is tr's shard line. The texts of a trajectory are bounded (internal/textcap), but
// JSON escaping can grow a text six times and the turn budget is a flag: a line that would
// still be over rundir.MaxLine has its reply texts cut further, each time to a quarter of the
// previous limit (textcap.Cut keeps one marker counting every cut), until it fits. One that
// cannot fit is an error.
func encodeLine(tr *rundir.Trajectory) ([]byte, error) {
	line, err := json.Marshal(tr)
	for limit := textcap.Reply / 4; err == nil && len(line)+1 > rundir.MaxLine; limit /= 4 {
		if limit < 1<<10 {
			return nil, fmt.Errorf("trajectory %s: a line of %d bytes is over the run dir's limit of %d bytes", tr.Key, len(line)+1, rundir.MaxLine)
		}
		for i := range tr.Turns {
			t := &tr.Turns[i]
			t.Content, t.Reasoning = textcap.Cut(t.Content, limit), textcap.Cut(t.Reasoning, limit)
		}
		line, err = json.Marshal(tr)
	}
	return line, err
}

// reasonOf extracts a short reason from a policy error: the handle's Reason function, else a
// FailureReason method somewhere in the error chain.
func reasonOf(p *episode.PolicyHandle, err error) string {
	if p.Reason != nil {
		if r := p.Reason(err); r != "" {
			return r
		}
	}
	var fr interface{ FailureReason() string }
	if errors.As(err, &fr) {
		return fr.FailureReason()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return ""
}
