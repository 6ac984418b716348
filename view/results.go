package view

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Executor runs a row's gold SQL and final SQL on its task's database, for the results shown
// beside the final answer. Every statement goes through Opener's databases, the screened,
// read-only, time-bounded execution distill gives a policy's statements.
type Executor struct {
	// Tasks are the tasks the rows were made from, found by the rows' task_id.
	Tasks []datasets.Task
	// Opener opens a task's database in a dialect (a sandbox.Connector).
	Opener episode.Opener
	// Dialects are the dialects Opener serves; a row of another dialect has no results, with
	// the reason.
	Dialects []datasets.Dialect
	// Timeout bounds each statement (default episode.DefaultExecTimeout).
	Timeout time.Duration
}

// resultCaps are the bounds of a shown result: distill's observation, 50 rows.
var resultCaps = protocol.ObsCaps{MaxRows: 50}.WithDefaults()

// maxCachedResults bounds the results kept; past it, results are run again each time.
const maxCachedResults = 8192

// maxParallelExecs bounds the statements the viewer runs at once.
const maxParallelExecs = 4

// noExecutor says why a row page shows no results when the viewer has no Executor.
const noExecutor = "the gold SQL is run only when curate view is started with --tasks SPEC (the tasks these rows came from; --db-root for their SQLite files) and, for PostgreSQL or MySQL rows, --pg-dsn or --mysql-dsn"

// executor is an Executor with its task lookup and its cache of results, kept per dialect,
// task and statement: the task databases are read-only, so a result does not change.
type executor struct {
	x       Executor
	tasks   map[string]*datasets.Task
	slots   chan struct{}
	mu      sync.Mutex
	results map[execKey]*execCall
}

type execKey struct{ dialect, task, sql string }

// execCall is one execution, shared by the requests that want it while it runs.
type execCall struct {
	done chan struct{}
	view ExecView
	err  error
}

func newExecutor(x Executor) *executor {
	if x.Timeout <= 0 {
		x.Timeout = episode.DefaultExecTimeout
	}
	e := &executor{x: x, tasks: map[string]*datasets.Task{}, slots: make(chan struct{}, maxParallelExecs), results: map[execKey]*execCall{}}
	for i := range x.Tasks {
		t := &x.Tasks[i]
		if _, ok := e.tasks[t.ID]; !ok {
			e.tasks[t.ID] = t
		}
	}
	return e
}

// SetExecutor turns on the results of row pages (GET /api/results); call it before serving.
func (s *Server) SetExecutor(x Executor) { s.exec.Store(newExecutor(x)) }

// Dialects are the dialects of the rows indexed so far, sorted.
func (s *Server) Dialects() []datasets.Dialect {
	s.ix.mu.RLock()
	defer s.ix.mu.RUnlock()
	seen := make([]bool, len(s.ix.facets[facetDialect].names))
	for i := range s.ix.entries {
		seen[s.ix.entries[i].facet[facetDialect]] = true
	}
	var out []datasets.Dialect
	for id, ok := range seen {
		if name := s.ix.facets[facetDialect].names[id]; ok && name != "" {
			out = append(out, datasets.Dialect(name))
		}
	}
	slices.Sort(out)
	return out
}

// TasksOf are the tasks of tasks (in their order) that the rows of dialect d indexed so far
// were made from, by the rows' task_id: the databases the row pages of d may open.
func (s *Server) TasksOf(tasks []datasets.Task, d datasets.Dialect) []datasets.Task {
	ids := map[string]bool{}
	s.ix.mu.RLock()
	if id, ok := s.ix.facets[facetDialect].ids[string(d)]; ok {
		for i := range s.ix.entries {
			if e := &s.ix.entries[i]; e.facet[facetDialect] == id {
				ids[e.taskID] = true
			}
		}
	}
	s.ix.mu.RUnlock()
	var out []datasets.Task
	for _, t := range tasks {
		if ids[t.ID] {
			out = append(out, t)
		}
	}
	return out
}

// ExecView is one statement's result on the row's task database, as an observation shows it.
type ExecView struct {
	SQL string `json:"sql,omitempty"`
	// Observation is the result as protocol.RenderObservation writes it, read back.
	Observation *Observation `json:"observation,omitempty"`
	Outcome     string       `json:"outcome,omitempty"`
	// Total is the number of result rows (the observation shows at most 50).
	Total      int     `json:"total"`
	DurationMS float64 `json:"duration_ms"`
	Engine     string  `json:"engine,omitempty"`
	// Cached is true when the result was run before for another request.
	Cached bool `json:"cached"`
	// Absent says why there is no result.
	Absent string `json:"absent,omitempty"`
}

// RowResults are a row's final SQL and gold SQL run on its task's database.
type RowResults struct {
	ID      int      `json:"id"`
	Dialect string   `json:"dialect"`
	Final   ExecView `json:"final"`
	Gold    ExecView `json:"gold"`
	// Notes are remarks on the pair (the task file's gold differs from the row's).
	Notes []string `json:"notes"`
}

// Results runs the row's final and gold SQL (each once per dialect, task and statement; later
// requests get the kept result). Without an Executor, or for a row whose task or dialect it
// lacks, the views say why they are absent. An error is a database that cannot be used.
func (s *Server) Results(ctx context.Context, id int) (*RowResults, error) {
	e, ok := s.ix.get(id)
	if !ok {
		return nil, fmt.Errorf("row %d: %w (the index has %d rows)", id, errNoRow, s.ix.len())
	}
	d, _ := s.load(e, id)
	rr := &RowResults{ID: id, Dialect: d.Dialect, Notes: []string{}}
	rr.Final.SQL = d.FinalSQL
	x := s.exec.Load()
	absent := func(why string) (*RowResults, error) {
		rr.Final.Absent, rr.Gold.Absent = why, why
		return rr, nil
	}
	switch {
	case d.Error != "":
		return absent("the row cannot be read: " + d.Error)
	case x == nil:
		return absent(noExecutor)
	}
	task, ok := x.tasks[d.TaskID]
	if !ok {
		return absent(fmt.Sprintf("task %q is not among the %d tasks of --tasks", d.TaskID, len(x.tasks)))
	}
	dialect := datasets.Dialect(d.Dialect)
	if !slices.Contains(x.x.Dialects, dialect) {
		why := fmt.Sprintf("the viewer has no %s databases", dialect)
		if dl, ok := sandbox.Lookup(dialect); ok && dl.Server() != nil {
			why += " (start it with --" + dl.Server().Flag + ")"
		}
		return absent(why)
	}
	db, err := x.x.Opener.Open(ctx, dialect, *task)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return absent(fmt.Sprintf("the task's %s database does not open: %v", dialect, err))
	}
	gold, hasGold := task.GoldFor(dialect)
	rr.Gold.SQL = gold
	if !hasGold {
		rr.Gold.Absent = fmt.Sprintf("task %s has no gold SQL for %s", task.ID, dialect)
	} else if d.GoldSQL != "" && strings.TrimSpace(d.GoldSQL) != strings.TrimSpace(gold) {
		rr.Notes = append(rr.Notes, "the task file's gold SQL differs from the row's: the gold result is the task file's")
	}
	if d.FinalSQL == "" {
		rr.Final.Absent = "the row has no final SQL"
	}
	var wg sync.WaitGroup
	var errs [2]error
	for i, v := range []*ExecView{&rr.Final, &rr.Gold} {
		if v.Absent != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			*v, errs[i] = x.run(ctx, db, task.ID, v.SQL)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	// A gold that fails here has the judge's fallback (judge.Judge.Reference): show its result
	// on the task's reference database, and what the row's own verdict says of it.
	if ref, ok := task.GoldReference(dialect); ok && rr.Gold.Absent == "" && rr.Gold.Outcome != string(sandbox.OutcomeOK) && rr.Gold.Outcome != string(sandbox.OutcomeTimeout) {
		v, err := x.reference(ctx, *task, ref, gold)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			rr.Notes = append(rr.Notes, fmt.Sprintf("the gold SQL fails on %s, and its reference, the task's %s database, gives no result: %v", dialect, ref, err))
		case v.Outcome == string(sandbox.OutcomeOK):
			rr.Notes = append(rr.Notes, fmt.Sprintf("the gold SQL fails on %s (%s); its result here is from the task's %s database, the benchmark's reference; %s",
				dialect, rr.Gold.Outcome, ref, referenceVerdict(d, ref)))
			rr.Gold = v
		}
	}
	return rr, nil
}

// referenceVerdict says how the row's own verdict used the reference ref, as far as the row
// records it (gold_dialect, gold_error).
func referenceVerdict(d *Detail, ref datasets.Dialect) string {
	switch {
	case d.GoldDialect == string(ref):
		return "the row was judged against it"
	case d.GoldError != "":
		return "the row was left unjudged, judged without it (gold_error: " + d.GoldError + ")"
	}
	return "the judge uses it where it has the file (the row does not record whether it did)"
}

// reference runs task's gold SQL on its reference database in dialect ref.
func (x *executor) reference(ctx context.Context, task datasets.Task, ref datasets.Dialect, gold string) (ExecView, error) {
	rdb, err := x.x.Opener.Open(ctx, ref, task)
	if err != nil {
		return ExecView{}, err
	}
	return x.run(ctx, rdb, task.ID, gold)
}

// run executes sql on db, or waits for the same execution already under way, or returns the
// kept result. A database that cannot be used is an error and is not kept.
func (x *executor) run(ctx context.Context, db sandbox.DB, task, sql string) (ExecView, error) {
	k := execKey{string(db.Dialect()), task, sql}
	x.mu.Lock()
	if c, ok := x.results[k]; ok {
		x.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return ExecView{}, ctx.Err()
		}
		if c.err == nil {
			v := c.view
			v.Cached = true
			return v, nil
		}
		x.mu.Lock() // it failed: run it again
	}
	c := &execCall{done: make(chan struct{})}
	keep := len(x.results) < maxCachedResults
	if keep {
		x.results[k] = c
	}
	x.mu.Unlock()

	c.view, c.err = x.exec(ctx, db, sql)
	if c.err != nil && keep {
		x.mu.Lock()
		if x.results[k] == c {
			delete(x.results, k)
		}
		x.mu.Unlock()
	}
	close(c.done)
	return c.view, c.err
}

// exec runs one statement, at most maxParallelExecs at once.
func (x *executor) exec(ctx context.Context, db sandbox.DB, sql string) (ExecView, error) {
	select {
	case x.slots <- struct{}{}:
	case <-ctx.Done():
		return ExecView{}, ctx.Err()
	}
	defer func() { <-x.slots }()
	res, err := db.Exec(ctx, sql, sandbox.ExecOptions{Timeout: x.x.Timeout, MaxRows: resultCaps.MaxRows})
	if err != nil {
		return ExecView{}, fmt.Errorf("running on the %s database: %w", db.Dialect(), err)
	}
	return ExecView{SQL: sql, Observation: parseObservation(protocol.RenderObservation(res, resultCaps)), Outcome: string(res.Outcome),
		Total: res.Total, DurationMS: float64(res.Duration.Microseconds()) / 1000, Engine: db.Version()}, nil
}

func (s *Server) handleResults(w http.ResponseWriter, r *http.Request) {
	_, id, err := s.rowID(r)
	if err != nil {
		httpError(w, http.StatusNotFound, err)
		return
	}
	rr, err := s.Results(r.Context(), id)
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, rr)
}
