// Package distill is the executor: the concurrent, resumable runner that plays episodes
// (package episode) for many tasks, policies, dialects and samples into a run dir (package
// rundir), with retries, the resume check, progress and the run's summary.
package distill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Runner defaults.
const (
	DefaultConcurrency   = 16
	DefaultMaxShardBytes = 256 << 20
	DefaultMaxShardLines = 100_000
	DefaultDrainTimeout  = 2 * time.Minute
)

// ErrInterrupted is returned by Run when its context ended before every key was done; the run
// dir is consistent and the same command resumes it.
var ErrInterrupted = errors.New("distill: run interrupted; rerun the same command to resume")

// RunConfig is one distillation run. Zero values take the defaults.
type RunConfig struct {
	// Dir is the run dir (created or resumed).
	Dir string
	// Tasks are all tasks of the spec, Limit already applied; TaskSpec and Limit are recorded.
	Tasks    []datasets.Task
	TaskSpec string
	Limit    int
	// ByDatabase starts the episodes grouped by database (GroupByDatabase) instead of in task
	// order, so that a policy with a prefix cache (the bundled student) finds one database's
	// system prompt in it from one task to the next. The run dir does not depend on the order.
	ByDatabase bool
	// Policies are the teachers (unique names).
	Policies []*episode.PolicyHandle
	Dialects []datasets.Dialect
	// Samples is the number of trajectories per (task, teacher, dialect) (default 1).
	Samples int
	// Episode carries MaxTurns, ExecTimeout, Caps, Chat and Ordered for every episode; the
	// runner sets Teacher, Model, Sample and Schemas.
	Episode episode.EpisodeOptions
	// Concurrency is the number of episodes in flight per policy; 0 takes the policy's own
	// (PolicyHandle.Concurrency), else DefaultConcurrency.
	Concurrency int
	Shard       rundir.Shard
	// Opener gives the databases.
	Opener episode.Opener
	// RetryFailed runs keys again that failed in an earlier invocation; by default they are
	// skipped (a failure is terminal: retries already happened in the client).
	RetryFailed bool
	// Toolkit is the toolkit version recorded in the manifest.
	Toolkit string
	// MaxShardBytes and MaxShardLines rotate shard files.
	MaxShardBytes int64
	MaxShardLines int
	// DrainTimeout is how long in-flight episodes may finish after ctx ends before they are
	// abandoned (default 2 min). Abandoned episodes write nothing and are redone on resume.
	DrainTimeout time.Duration
	// Abort, when it ends, abandons in-flight episodes at once (a second Ctrl-C).
	Abort context.Context
	// Progress receives the live display or log lines; nil is silent.
	Progress io.Writer
	// Interactive redraws a multi-line display (a terminal) instead of printing log lines.
	Interactive bool
	// ProgressInterval is the period of log lines (default 10 s; the display redraws each second).
	ProgressInterval time.Duration
	// Schemas caches DDL across episodes; nil makes one.
	Schemas *episode.SchemaCache
}

// RunResult is what one invocation did.
type RunResult struct {
	// Total is the number of keys of this shard; Skipped those done (or failed) before.
	Total, Skipped int
	// Done and Failed count what this invocation committed; Abandoned the episodes cut by
	// cancellation.
	Done, Failed, Abandoned int
	// Repairs lists what resume cut from the run dir.
	Repairs []string
	// Summary covers the whole run dir (every invocation); BadLines are the damaged lines it
	// skipped (left by an earlier version, see rundir.BadLine).
	Summary  []SummaryRow
	BadLines []*rundir.BadLine
}

// TasksDigest hashes the set of task ids (manifest.tasks.digest): the ids sorted, so that a run
// dir resumes whatever the order of the task file (trajectories are keyed by task id) and a
// changed task set is noticed.
func TasksDigest(tasks []datasets.Task) string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	slices.Sort(ids)
	return idsDigest(ids)
}

// idsDigest hashes ids in the order given: the first 16 hex digits of SHA-256 over each id
// followed by a 0 byte.
func idsDigest(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		io.WriteString(h, id)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// orderedDigest is the digest of the task ids in the order given, which manifests written before
// TasksDigest sorted them hold.
func orderedDigest(tasks []datasets.Task) string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return idsDigest(ids)
}

// olderDigests are the task digests that earlier versions wrote for cfg's tasks and that resume
// also accepts: the ids in task order, and (for ByDatabase, whose episodes ran in that order)
// in the order GroupByDatabase gives.
func olderDigests(cfg *RunConfig) []string {
	out := []string{orderedDigest(cfg.Tasks)}
	if cfg.ByDatabase {
		out = append(out, orderedDigest(GroupByDatabase(cfg.Tasks)))
	}
	return out
}

// GroupByDatabase returns tasks grouped by database: the groups in the order their databases
// first appear, each group in task order.
func GroupByDatabase(tasks []datasets.Task) []datasets.Task {
	first := map[string]int{}
	for _, t := range tasks {
		if _, ok := first[t.DBID]; !ok {
			first[t.DBID] = len(first)
		}
	}
	out := slices.Clone(tasks)
	slices.SortStableFunc(out, func(a, b datasets.Task) int { return first[a.DBID] - first[b.DBID] })
	return out
}

// manifestFor builds the manifest of cfg.
func manifestFor(cfg *RunConfig) *rundir.Manifest {
	m := &rundir.Manifest{
		Format:      rundir.RunFormat,
		Protocol:    protocol.ProtocolVersion,
		Toolkit:     cfg.Toolkit,
		Created:     time.Now().UTC(),
		Tasks:       rundir.ManifestTasks{Spec: cfg.TaskSpec, Limit: cfg.Limit, Count: len(cfg.Tasks), Digest: TasksDigest(cfg.Tasks)},
		Dialects:    cfg.Dialects,
		Samples:     cfg.Samples,
		MaxTurns:    cfg.Episode.MaxTurns,
		Shard:       cfg.Shard,
		Caps:        cfg.Episode.Caps,
		ExecTimeout: cfg.Episode.ExecTimeout,
		Ordered:     cfg.Episode.Ordered,
		Chat:        cfg.Episode.Chat,
	}
	if m.Shard.Count <= 1 {
		m.Shard = rundir.Shard{}
	}
	for _, p := range cfg.Policies {
		m.Teachers = append(m.Teachers, rundir.ManifestTeacher{Name: p.Name, Spec: p.Spec, Model: p.Model})
	}
	return m
}

func (cfg *RunConfig) validate() error {
	if cfg.Dir == "" {
		return errors.New("distill: no run dir")
	}
	if len(cfg.Tasks) == 0 {
		return fmt.Errorf("distill: task spec %q has no tasks", cfg.TaskSpec)
	}
	if len(cfg.Policies) == 0 {
		return errors.New("distill: no teachers")
	}
	if len(cfg.Dialects) == 0 {
		return errors.New("distill: no dialects")
	}
	if cfg.Opener == nil {
		return errors.New("distill: no database opener")
	}
	seen := map[string]bool{}
	for _, p := range cfg.Policies {
		if !episode.ValidName(p.Name) {
			return fmt.Errorf("distill: teacher name %q can not label shard files", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("distill: teacher %q given twice", p.Name)
		}
		seen[p.Name] = true
	}
	ds := map[datasets.Dialect]bool{}
	for _, d := range cfg.Dialects {
		if _, err := sandbox.Check(d); err != nil {
			return fmt.Errorf("distill: %w", err)
		}
		if ds[d] {
			return fmt.Errorf("distill: dialect %q given twice", d)
		}
		ds[d] = true
	}
	ids := map[string]bool{}
	for _, t := range cfg.Tasks {
		if ids[t.ID] {
			return fmt.Errorf("distill: task id %q appears twice in %s", t.ID, cfg.TaskSpec)
		}
		ids[t.ID] = true
	}
	if cfg.Samples < 0 || cfg.Concurrency < 0 {
		return errors.New("distill: samples and concurrency must not be negative")
	}
	return nil
}

type job struct {
	task    datasets.Task
	dialect datasets.Dialect
	sample  int
	key     string
}

// Run distils every (task, teacher, dialect, sample) key of cfg.Shard not already in the run dir,
// writing trajectories as they complete. Episodes run concurrently per teacher (cfg.Concurrency
// each); a producer per teacher feeds them through a small channel, so memory is bounded by the
// episodes in flight, not by the number of tasks. When ctx ends, no new episode starts and the
// ones in flight get cfg.DrainTimeout to finish; Run then returns ErrInterrupted with the run dir
// consistent. Keys that fail terminally go to failures.jsonl.
func Run(ctx context.Context, cfg RunConfig) (*RunResult, error) {
	if cfg.Samples == 0 {
		cfg.Samples = 1
	}
	cfg.Episode = cfg.Episode.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxShardBytes <= 0 {
		cfg.MaxShardBytes = DefaultMaxShardBytes
	}
	if cfg.MaxShardLines <= 0 {
		cfg.MaxShardLines = DefaultMaxShardLines
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Schemas == nil {
		cfg.Schemas = episode.NewSchemaCache(episode.DefaultSchemaSamples)
	}
	abort := cfg.Abort
	if abort == nil {
		abort = context.Background()
	}

	m := manifestFor(&cfg)
	rd, err := openRun(cfg.Dir, m, olderDigests(&cfg), cfg.MaxShardBytes, cfg.MaxShardLines)
	if err != nil {
		return nil, err
	}
	if cfg.ByDatabase {
		cfg.Tasks = GroupByDatabase(cfg.Tasks)
	}
	defer rd.Close()
	res := &RunResult{Repairs: rd.Repairs()}

	usage, err := rundir.ReadUsage(cfg.Dir)
	if err != nil {
		return nil, err
	}

	// Count this invocation's work per teacher (for progress and ETA) without storing keys.
	prog := newProgress(cfg.Progress, cfg.Interactive, cfg.ProgressInterval)
	for _, p := range cfg.Policies {
		todo, skipped := 0, 0
		forKeys(&cfg, p, func(j job) bool {
			if skip(rd, j.key, cfg.RetryFailed) {
				skipped++
			} else {
				todo++
			}
			return true
		})
		res.Total += todo + skipped
		res.Skipped += skipped
		prog.add(p.Name, todo, skipped)
	}

	// Work runs under workCtx: it ends on Abort, DrainTimeout after ctx ends, or a writer error.
	workCtx, cancelWork := context.WithCancelCause(abort)
	defer cancelWork(nil)
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			prog.note(fmt.Sprintf("stopping: letting %s of in-flight episodes finish (Ctrl-C again to abandon them)", cfg.DrainTimeout))
			t := time.NewTimer(cfg.DrainTimeout)
			defer t.Stop()
			select {
			case <-t.C:
				cancelWork(errors.New("drain timeout"))
			case <-finished:
			}
		case <-finished:
		}
	}()

	results := make(chan pending, 64)
	writerDone := make(chan error, 1)
	stop := newEarlyStop()
	watched := make([]*episode.PolicyHandle, len(cfg.Policies))
	for i, p := range cfg.Policies {
		watched[i] = stop.watch(p)
	}
	go func() { writerDone <- writeLoop(&cfg, rd, usage, results, prog, res, stop, cancelWork) }()
	stopProg := prog.start()

	g, gctx := errgroup.WithContext(workCtx)
	for _, p := range watched {
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
		jobs := make(chan job, n)
		g.Go(func() error {
			defer close(jobs)
			forKeys(&cfg, p, func(j job) bool {
				if skip(rd, j.key, cfg.RetryFailed) {
					return true
				}
				select {
				case jobs <- j:
					return true
				case <-ctx.Done():
					return false
				case <-gctx.Done():
					return false
				}
			})
			return nil
		})
		for range n {
			g.Go(func() error {
				for j := range jobs {
					if ctx.Err() != nil || gctx.Err() != nil {
						continue // drain the channel without starting new episodes
					}
					out := runOne(gctx, &cfg, p, j)
					if out.fail == nil && out.tr == nil {
						prog.abandoned(p.Name)
						continue
					}
					select {
					case results <- out:
					case <-gctx.Done():
						prog.abandoned(p.Name)
					}
				}
				return nil
			})
		}
	}
	gerr := g.Wait()
	close(results)
	werr := <-writerDone
	close(finished)
	stopProg()
	res.Abandoned = prog.abandonedTotal()

	for _, p := range cfg.Policies {
		if p.Close != nil {
			if err := p.Close(); err != nil && werr == nil {
				werr = fmt.Errorf("closing %s: %w", p.Name, err)
			}
		}
	}
	if werr != nil {
		return res, werr
	}
	if gerr != nil && !errors.Is(gerr, context.Canceled) {
		return res, gerr
	}
	res.Summary, res.BadLines, err = Summarize(cfg.Dir)
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil || abort.Err() != nil {
		// Interrupted unless everything got done anyway.
		remaining := 0
		for _, p := range cfg.Policies {
			forKeys(&cfg, p, func(j job) bool {
				if !skip(rd, j.key, cfg.RetryFailed) {
					remaining++
				}
				return true
			})
		}
		if remaining > 0 {
			return res, ErrInterrupted
		}
	}
	return res, nil
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
	opts.Teacher, opts.Model, opts.Sample, opts.Schemas = p.Name, p.Model, j.sample, cfg.Schemas
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
// previous limit (textcap.Cut marks each cut), until it fits. One that cannot fit is an error.
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

// skip reports whether key needs no work: done, or failed before and not retried.
func skip(rd *rundir.Writer, key string, retryFailed bool) bool {
	return rd.Done(key) || (!retryFailed && rd.Failed(key))
}

// writeLoop commits results in batches until results closes. On a write error it cancels the
// work and keeps draining so no worker blocks.
func writeLoop(cfg *RunConfig, rd *rundir.Writer, usage *rundir.Usage, results <-chan pending, prog *progress, res *RunResult, stop *earlyStop, cancel context.CancelCauseFunc) error {
	var werr error
	lastUsage := time.Now()
	retried := map[string]bool{} // failed keys that this invocation retries: counted once
	stopped := false             // werr is the early stop's: the usage of what was written is still saved
	for p := range results {
		batch := []pending{p}
	more:
		for len(batch) < 256 {
			select {
			case q, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, q)
			default:
				break more
			}
		}
		if werr != nil {
			continue
		}
		records := make([]rundir.Record, len(batch))
		for i, p := range batch {
			records[i] = p.record()
		}
		committed, err := rd.Commit(records)
		if err != nil {
			werr = fmt.Errorf("run dir %s: %w", cfg.Dir, err)
			cancel(werr)
			continue
		}
		for _, i := range committed {
			if f := batch[i].fail; f != nil {
				res.Failed++
				u := teacherUsage(usage, f.Teacher, "")
				if !retried[f.Key] {
					u.Failed++
				}
				prog.failed(f.Teacher)
				if err := stop.done(f.Teacher, batch[i]); err != nil && werr == nil {
					werr, stopped = err, true
					cancel(werr)
				}
				continue
			}
			tr := batch[i].tr
			stop.done(tr.Teacher, batch[i])
			res.Done++
			u := teacherUsage(usage, tr.Teacher, tr.Model)
			u.Trajectories++
			if rd.Failed(tr.Key) && !retried[tr.Key] {
				u.Failed-- // a retried failure that now succeeded
				retried[tr.Key] = true
			}
			addTrajectoryUsage(u, tr, cfg)
			prog.done(tr)
		}
		if time.Since(lastUsage) > 5*time.Second {
			if err := writeUsage(cfg, usage); err != nil {
				werr = err
				cancel(werr)
			}
			lastUsage = time.Now()
		}
	}
	if werr != nil {
		if stopped {
			if err := writeUsage(cfg, usage); err != nil {
				return err
			}
		}
		return werr
	}
	return writeUsage(cfg, usage)
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
