// Package evaluate writes and reads an eval dir (package evalrun runs its episodes through distill)
// (summary, per-task results, BIRD-format predictions, trajectories); it also scores
// prediction files the way BIRD's official evaluation (and Spider's) does, and compares eval
// dirs side by side.
//
// An eval dir is a distill run dir with one policy and one dialect (manifest.json, journal,
// shards/, failures.jsonl, usage.json: append-only, torn tails cut on resume) plus four files
// derived from it and rewritten atomically at the end of every invocation:
//
//	summary.json        Summary: EX by difficulty, convergence, exec-ok, violations, throughput
//	results.jsonl       one Result per task (per task and sample without --vote), in task order
//	predict_dev.json    {"<index>": "SQL\t----- bird -----\tdb_id", ...}, BIRD's official format
//	                    (sample 0's final SQL, or the vote's; "" when there is none)
//	trajectories.jsonl  every committed trajectory, in the order they completed
package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// Files an eval dir holds besides distill's run dir files.
const (
	SummaryFile      = "summary.json"
	ResultsFile      = "results.jsonl"
	PredictFile      = "predict_dev.json"
	TrajectoriesFile = "trajectories.jsonl"
)

// BIRDSeparator joins SQL and db_id in a BIRD prediction value.
const BIRDSeparator = "\t----- bird -----\t"

// Config is one evaluation. Zero values take the defaults.
type Config struct {
	// Dir is the eval dir (created, or resumed when it exists).
	Dir string
	// Tasks are the tasks to evaluate (any --limit already applied); TaskSpec and Limit are
	// recorded.
	Tasks    []datasets.Task
	TaskSpec string
	Limit    int
	// Policy answers the conversations; it is closed when Run returns.
	Policy *episode.PolicyHandle
	// Dialect is the engine the tasks run on (default sqlite).
	Dialect datasets.Dialect
	// Samples is the number of trajectories per task (default 1).
	Samples int
	// Vote makes each task's answer the majority of its samples' executed results (Vote).
	Vote bool
	// Episode carries MaxTurns, ExecTimeout, Caps, Chat and Ordered. A nil Chat.Temperature
	// means greedy decoding (0). Ordered is switched on when every task comes from Spider.
	Episode episode.EpisodeOptions
	// Batch is the number of conversations in flight (0: the policy's own, else distill's
	// default).
	Batch int
	// Shard evaluates only part I of N of the tasks (by a hash of the task id, so all samples
	// of a task stay in one part); Merge joins the parts' eval dirs.
	Shard rundir.Shard
	// Opener gives the databases.
	Opener episode.Opener
	// Toolkit is the toolkit version recorded in the manifest.
	Toolkit string
	// Progress receives distill's live display or log lines; nil is silent.
	Progress    io.Writer
	Interactive bool
	// DrainTimeout and Abort are passed to distill.Run (Ctrl-C handling).
	DrainTimeout time.Duration
	Abort        context.Context
	// Schemas caches the rendered schemas; nil makes one.
	Schemas *episode.SchemaCache
}

// Result is one line of results.jsonl: how a task (or one sample of it) ended.
type Result struct {
	ID         string `json:"id"`
	Index      int    `json:"index"`
	DBID       string `json:"db_id"`
	Difficulty string `json:"difficulty,omitempty"`
	// Sample is the sample the line reports (with Vote: the winning group's first sample).
	Sample int `json:"sample"`
	// SQL is the final SQL: the last statement executed ("" when no turn had one).
	SQL string `json:"sql"`
	// Outcome is the final SQL's execution outcome (ok, error, timeout, refused), "no_sql" when
	// no turn had a statement, or "failed" when the episode failed (Error says why).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	Correct bool   `json:"correct"`
	Turns   int    `json:"turns"`
	// Correct, Turns, Converged, ExecOK and FormatViolations are the episode's rundir.Outcome
	// (EpisodeOutcome): converged means the same SQL came twice in a row and it ran.
	Converged        bool `json:"converged"`
	ExecOK           bool `json:"exec_ok"`
	FormatViolations int  `json:"format_violations"`
	// MalformedTurns counts the replies that were not well-formed (rundir.Turn.WellFormed,
	// the format reward's rule: format_violations are those without a usable statement).
	MalformedTurns int    `json:"malformed_turns"`
	GoldError      string `json:"gold_error,omitempty"`
	// Votes is the size of the winning group and Samples the samples voting (Vote only).
	Votes   int `json:"votes,omitempty"`
	Samples int `json:"samples,omitempty"`
	// Tokens is prompt plus completion tokens over the episode's turns.
	Tokens int `json:"tokens"`
}

// Outcomes of Result besides datasets' execution outcomes.
const (
	OutcomeNoSQL  = "no_sql"
	OutcomeFailed = "failed"
)

// Prepare checks cfg and fills its defaults; evalrun.Run calls it before the episodes. On error
// it closes cfg.Policy.
func (cfg *Config) Prepare() error {
	if err := cfg.defaults(); err != nil {
		if cfg.Policy != nil && cfg.Policy.Close != nil {
			cfg.Policy.Close()
		}
		return err
	}
	return nil
}

// Finish rebuilds the four derived files of cfg.Dir from everything the eval dir holds, after
// the episodes that started at started and took wall (evalrun.Run), and returns the summary.
func Finish(ctx context.Context, cfg *Config, started time.Time, wall time.Duration) (*Summary, error) {
	return build(ctx, cfg, started, wall)
}

func (cfg *Config) defaults() error {
	if cfg.Dir == "" {
		return errors.New("evaluate: no eval dir")
	}
	if cfg.Policy == nil {
		return errors.New("evaluate: no policy")
	}
	if len(cfg.Tasks) == 0 {
		return fmt.Errorf("evaluate: task spec %q has no tasks", cfg.TaskSpec)
	}
	if cfg.Shard.Count > 1 {
		var part []datasets.Task
		for _, t := range cfg.Tasks {
			if cfg.Shard.Has(t.ID) {
				part = append(part, t)
			}
		}
		if len(part) == 0 {
			return fmt.Errorf("evaluate: shard %s of task spec %q has no tasks (%d tasks in all)", cfg.Shard, cfg.TaskSpec, len(cfg.Tasks))
		}
		cfg.Tasks = part
	}
	if cfg.Opener == nil {
		return errors.New("evaluate: no database opener")
	}
	cfg.Opener = episode.Patient(cfg.Opener) // the vote's queries wait out runaways too
	if cfg.Dialect == "" {
		cfg.Dialect = datasets.SQLite
	}
	if cfg.Samples == 0 {
		cfg.Samples = 1
	}
	if cfg.Samples < 0 {
		return fmt.Errorf("evaluate: samples %d is negative", cfg.Samples)
	}
	if cfg.Batch < 0 {
		return fmt.Errorf("evaluate: batch %d is negative", cfg.Batch)
	}
	if cfg.Episode.Chat.Temperature == nil {
		cfg.Episode.Chat.Temperature = chat.Float(0)
	}
	if *cfg.Episode.Chat.Temperature < 0 {
		return fmt.Errorf("evaluate: temperature %g is negative", *cfg.Episode.Chat.Temperature)
	}
	if cfg.Episode.MaxTurns <= 0 {
		cfg.Episode.MaxTurns = protocol.DefaultMaxTurns
	}
	if cfg.Episode.ExecTimeout <= 0 {
		cfg.Episode.ExecTimeout = episode.DefaultExecTimeout
	}
	if allSpider(cfg.Tasks) {
		cfg.Episode.Ordered = true
	}
	if cfg.Schemas == nil {
		cfg.Schemas = episode.NewSchemaCache(episode.DefaultSchemaSamples)
	}
	return nil
}

func allSpider(tasks []datasets.Task) bool {
	for _, t := range tasks {
		if t.Source != datasets.SpecSpider {
			return false
		}
	}
	return len(tasks) > 0
}

// turnTimes sums a trajectory's time: model (reply latency), SQL (the turns' statements) and
// the rest (schema, prompts, judging with the gold SQL).
type turnTimes struct {
	turns                int
	model, sql, duration time.Duration
}

func (a *turnTimes) add(tr *rundir.Trajectory) {
	a.turns += len(tr.Turns)
	a.duration += tr.Duration
	for _, t := range tr.Turns {
		a.model += t.Latency
		if t.Exec != nil {
			a.sql += t.Exec.Duration
		}
	}
}

// build rebuilds the derived files of cfg.Dir from its trajectories and failures.
func build(ctx context.Context, cfg *Config, started time.Time, wall time.Duration) (*Summary, error) {
	dir := cfg.Dir
	trajOut, err := createAtomic(filepath.Join(dir, TrajectoriesFile))
	if err != nil {
		return nil, err
	}
	defer trajOut.Abort()

	name := cfg.Policy.Name
	byKey := map[string]*Result{}
	finals := map[string]string{} // key → final SQL, for voting
	var (
		times            turnTimes
		usage            chat.Usage
		nowDone, nowToks int
		nowCached        int
	)
	var damaged []rundir.Failure // lines an earlier version left over the readers' limit, or broken
	for tr, err := range rundir.Trajectories(dir) {
		if b, bad := rundir.SkipBad(err); bad {
			// The journal has the key done, so no resume redoes it: it counts as failed.
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "eval dir %s: skipped a damaged line: %v\n", dir, b)
			}
			if b.Key != "" {
				damaged = append(damaged, rundir.Failure{Key: b.Key, Reason: "damaged", Error: b.Error()})
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("eval dir %s: %w", dir, err)
		}
		line, err := json.Marshal(tr)
		if err != nil {
			return nil, fmt.Errorf("eval dir %s: trajectory %s: %w", dir, tr.Key, err)
		}
		if err := writeLine(trajOut, line); err != nil {
			return nil, err
		}
		byKey[tr.Key] = resultOf(tr)
		finals[tr.Key] = tr.FinalSQL
		times.add(tr)
		usage = usage.Add(tr.Usage)
		if !tr.Started.Before(started) {
			nowDone++
			nowToks += tr.Usage.Total()
			nowCached += tr.Usage.CachedTokens
		}
	}
	failures, badFailures, err := rundir.ReadFailures(dir)
	if err != nil {
		return nil, fmt.Errorf("eval dir %s: %w", dir, err)
	}
	for _, b := range badFailures {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "eval dir %s: skipped a damaged line: %v\n", dir, b)
		}
	}
	failed := map[string]rundir.Failure{}
	for _, f := range append(failures, damaged...) {
		failed[f.Key] = f
	}

	var results []*Result
	pending, nfailed := 0, 0
	votes := newVoter(cfg)
	predictions := map[string]string{}
	for _, t := range cfg.Tasks {
		var per []*Result
		for s := range cfg.Samples {
			k := episode.Key(t.ID, name, cfg.Dialect, s)
			r := byKey[k]
			if r == nil {
				f, ok := failed[k]
				if !ok {
					pending++
					continue
				}
				nfailed++
				r = &Result{ID: t.ID, Index: t.Index, DBID: t.DBID, Difficulty: t.Difficulty, Sample: s,
					Outcome: OutcomeFailed, Error: textcap.Cut(f.Reason+": "+f.Error, textcap.Error), Turns: f.Turns}
			}
			per = append(per, r)
		}
		if len(per) < cfg.Samples {
			continue // not every sample is done: the task waits for the resume
		}
		if cfg.Vote && cfg.Samples > 1 {
			keys := make([]string, len(per))
			for i, r := range per {
				keys[i] = episode.Key(t.ID, name, cfg.Dialect, r.Sample)
			}
			w, err := votes.vote(ctx, t, per, keys, finals)
			if err != nil {
				return nil, err
			}
			per = []*Result{w}
		}
		results = append(results, per...)
		predictions[fmt.Sprint(t.Index)] = per[0].SQL + BIRDSeparator + t.DBID
	}

	if err := trajOut.Commit(); err != nil {
		return nil, err
	}
	if err := writeResults(filepath.Join(dir, ResultsFile), results); err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(dir, PredictFile), predictions); err != nil {
		return nil, err
	}

	s := newSummary(cfg, results)
	s.Pending, s.Failed = pending, nfailed
	s.Complete = pending == 0
	s.Tokens = usage
	s.TurnTime = turnTimeOf(times)
	s.Throughput = Throughput{Trajectories: nowDone, Seconds: wall.Seconds(), Tokens: nowToks, CachedTokens: nowCached}
	s.Throughput.setRates(cfg.Samples)
	if nowDone == 0 {
		// Nothing ran this time: keep the figures of the invocation that did the work.
		if old, err := ReadSummary(dir); err == nil {
			s.Throughput = old.Throughput
		}
	}
	if err := writeJSONAtomic(filepath.Join(dir, SummaryFile), s); err != nil {
		return nil, err
	}
	return s, nil
}

// EpisodeOutcome returns the result's outcome (rundir.NewOutcome: a converged flag written with the raw
// meaning reads as converged AND exec_ok; unjudged where GoldError is set). Truncated turns are
// not in a Result.
func (r *Result) EpisodeOutcome() rundir.Outcome {
	return rundir.NewOutcome(r.Converged, r.ExecOK, r.Correct, r.Turns, r.FormatViolations, 0, r.MalformedTurns, r.GoldError)
}

// resultOf turns a trajectory into its Result.
func resultOf(tr *rundir.Trajectory) *Result {
	o := tr.Outcome()
	r := &Result{
		ID: tr.TaskID, Index: tr.TaskIndex, DBID: tr.DBID, Difficulty: tr.Difficulty, Sample: tr.Sample,
		SQL: tr.FinalSQL, Outcome: OutcomeNoSQL, Correct: o.Correct, Turns: o.Turns, Converged: o.Converged,
		ExecOK: o.ExecOK, FormatViolations: o.FormatViolations, MalformedTurns: o.MalformedTurns, GoldError: textcap.Cut(tr.GoldError, textcap.Error), Tokens: tr.Usage.Total(),
	}
	for i := len(tr.Turns) - 1; i >= 0; i-- {
		if e := tr.Turns[i].Exec; e != nil {
			// Cut again: a run dir of an earlier version kept errors whole.
			r.Outcome, r.Error = string(e.Outcome), textcap.Cut(e.Error, textcap.Error)
			break
		}
	}
	return r
}

func writeResults(path string, results []*Result) error {
	f, err := createAtomic(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	for _, r := range results {
		line, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := writeLine(f, line); err != nil {
			return err
		}
	}
	return f.Commit()
}

// ReadResults reads an eval dir's results.jsonl.
func ReadResults(dir string) ([]Result, error) {
	path := filepath.Join(dir, ResultsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval dir %s: %w", dir, err)
	}
	var out []Result
	dec := json.NewDecoder(bytes.NewReader(data))
	for line := 1; dec.More(); line++ {
		var r Result
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s: result %d: %w", path, line, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ReadPredictions reads a predict_dev.json file: BIRD's {"<index>": "SQL\t----- bird -----\tdb_id"}.
// The value is cut at its last separator, since the SQL may hold the separator's text (in a
// literal or a comment) and a db_id does not. A value that is not a string or lacks the
// separator is kept as a Prediction with Malformed set (it scores 0); a key that is not a
// non-negative integer is an error.
func ReadPredictions(path string) (map[int]Prediction, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("predictions: %w", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("predictions %s: want a JSON object of task index to SQL and db_id joined by %q: %w", path, BIRDSeparator, err)
	}
	out := make(map[int]Prediction, len(raw))
	for k, v := range raw {
		var idx int
		if _, err := fmt.Sscanf(k, "%d", &idx); err != nil || idx < 0 || fmt.Sprint(idx) != k {
			return nil, fmt.Errorf("predictions %s: key %q is not a task index (0, 1, ...)", path, k)
		}
		p := Prediction{Index: idx}
		s, ok := v.(string)
		if !ok {
			p.Malformed = fmt.Sprintf("value is a JSON %T, not a string", v)
		} else if at := strings.LastIndex(s, BIRDSeparator); at < 0 {
			p.Malformed = fmt.Sprintf("value has no %q separator", BIRDSeparator)
			p.SQL = s
		} else {
			p.SQL, p.DBID = s[:at], s[at+len(BIRDSeparator):]
		}
		out[idx] = p
	}
	return out, nil
}

// PredictionsDialect returns the dialect an eval dir's predictions were written on, read from
// the summary.json beside path when path is that eval dir's predict_dev.json; ok is false when
// it is not (another name, or no summary.json beside it).
func PredictionsDialect(path string) (d datasets.Dialect, ok bool, err error) {
	dir := filepath.Dir(path)
	if filepath.Base(path) != PredictFile {
		return "", false, nil
	}
	if _, err := os.Stat(filepath.Join(dir, SummaryFile)); errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	s, err := ReadSummary(dir)
	if err != nil {
		return "", false, err
	}
	if s.Dialect == "" {
		return datasets.SQLite, true, nil
	}
	return s.Dialect, true, nil
}

// Prediction is one entry of a predictions file.
type Prediction struct {
	Index int
	SQL   string
	DBID  string
	// Malformed says why the entry could not be read ("" when it could).
	Malformed string
}

// sortedIndexes returns the keys of m in order.
func sortedIndexes(m map[int]Prediction) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
