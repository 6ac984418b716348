// Package distill is the executor: the concurrent, resumable runner that plays episodes
// (package episode) for many tasks, policies, dialects and samples into a run dir (package
// rundir), with retries, the resume check, progress and the run's summary.
package distill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
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
	cfg.Opener = episode.Patient(cfg.Opener) // runaways of one episode cost another time, not its verdict
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

// Run distils every (task, teacher, dialect, sample) key of cfg.Shard not already in the run dir,
// writing trajectories as they complete. Episodes run concurrently per teacher (cfg.Concurrency
// each); a producer per teacher feeds them through a small channel, so memory is bounded by the
// episodes in flight, not by the number of tasks. When ctx ends, no new episode starts and the
// ones in flight get cfg.DrainTimeout to finish; Run then returns ErrInterrupted with the run dir
// consistent. Keys that fail terminally go to failures.jsonl.
//
// The steps, in order: setup (defaults, checks), open (create or resume the run dir), plan
// (count the keys to do and to skip), the drain (the work's cancellation), the early stop's
// watch of each policy, the writer, the players (a producer and workers per policy), close the
// policies, finish (the summary; ErrInterrupted when keys are left).
func Run(ctx context.Context, cfg RunConfig) (*RunResult, error) {
	if err := cfg.setup(); err != nil {
		return nil, err
	}
	rd, err := openRun(cfg.Dir, manifestFor(&cfg), olderDigests(&cfg), cfg.MaxShardBytes, cfg.MaxShardLines)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	if cfg.ByDatabase {
		cfg.Tasks = GroupByDatabase(cfg.Tasks)
	}
	res := &RunResult{Repairs: rd.Repairs()}
	usage, err := rundir.ReadUsage(cfg.Dir)
	if err != nil {
		return nil, err
	}
	prog := newProgress(cfg.Progress, cfg.Interactive, cfg.ProgressInterval)
	plan(&cfg, rd, res, prog)

	work := startDrain(ctx, cfg.Abort, cfg.DrainTimeout, prog)
	stop := newEarlyStop()
	policies := stop.watchAll(cfg.Policies)
	w := startWriter(&cfg, rd, usage, prog, res, stop, work.cancel)
	stopProg := prog.start()
	pl := &players{cfg: &cfg, rd: rd, results: w.results, prog: prog}
	pl.play(ctx, work.ctx, policies)
	werr := w.wait()
	work.end()
	stopProg()
	res.Abandoned = prog.abandonedTotal()

	if err := closePolicies(cfg.Policies, werr); err != nil {
		return res, err
	}
	return res, finish(ctx, &cfg, rd, res)
}

// setup fills cfg's defaults and checks it.
func (cfg *RunConfig) setup() error {
	if cfg.Samples == 0 {
		cfg.Samples = 1
	}
	cfg.Episode = cfg.Episode.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
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
	if cfg.Abort == nil {
		cfg.Abort = context.Background()
	}
	return nil
}

// plan counts each policy's keys of this shard, to do and skipped, into res and prog (for
// progress and the ETA) without storing the keys.
func plan(cfg *RunConfig, rd *rundir.Writer, res *RunResult, prog *progress) {
	for _, p := range cfg.Policies {
		todo, skipped := countKeys(cfg, rd, p)
		res.Total += todo + skipped
		res.Skipped += skipped
		prog.add(p.Name, todo, skipped)
	}
}

// countKeys counts p's keys of this shard that are to do and those that skip passes over.
func countKeys(cfg *RunConfig, rd *rundir.Writer, p *episode.PolicyHandle) (todo, skipped int) {
	forKeys(cfg, p, func(j job) bool {
		if skip(rd, j.key, cfg.RetryFailed) {
			skipped++
		} else {
			todo++
		}
		return true
	})
	return todo, skipped
}

// drain is the run's cancellation. The work (episodes, the writer) runs under ctx, which ends
// on Abort (a second Ctrl-C), DrainTimeout after the run's context ends (the first: no new
// episode starts, those in flight may finish), or cancel (a write error, the early stop).
type drain struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	finished chan struct{}
}

// startDrain starts watching run: when it ends before the work does, prog notes the stop and
// the work gets timeout to finish.
func startDrain(run, abort context.Context, timeout time.Duration, prog *progress) *drain {
	ctx, cancel := context.WithCancelCause(abort)
	d := &drain{ctx: ctx, cancel: cancel, finished: make(chan struct{})}
	go func() {
		select {
		case <-run.Done():
			prog.note(fmt.Sprintf("stopping: letting %s of in-flight episodes finish (Ctrl-C again to abandon them)", timeout))
			t := time.NewTimer(timeout)
			defer t.Stop()
			select {
			case <-t.C:
				cancel(errors.New("drain timeout"))
			case <-d.finished:
			}
		case <-d.finished:
		}
	}()
	return d
}

// end is called once the work has finished: the watch stops and the work's context is released.
func (d *drain) end() {
	close(d.finished)
	d.cancel(nil)
}

// closePolicies closes every policy that has a Close. It returns err, else the first error of
// a close.
func closePolicies(policies []*episode.PolicyHandle, err error) error {
	for _, p := range policies {
		if p.Close != nil {
			if cerr := p.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("closing %s: %w", p.Name, cerr)
			}
		}
	}
	return err
}

// finish summarizes the whole run dir into res. It returns ErrInterrupted when run or Abort
// ended and keys are left to do (an interruption can come after the last key).
func finish(run context.Context, cfg *RunConfig, rd *rundir.Writer, res *RunResult) error {
	var err error
	res.Summary, res.BadLines, err = Summarize(cfg.Dir)
	if err != nil {
		return err
	}
	if run.Err() == nil && cfg.Abort.Err() == nil {
		return nil
	}
	for _, p := range cfg.Policies {
		if todo, _ := countKeys(cfg, rd, p); todo > 0 {
			return ErrInterrupted
		}
	}
	return nil
}
