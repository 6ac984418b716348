package view

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

//go:embed assets
var assets embed.FS

// Options configure Open.
type Options struct {
	// Paths are dataset dirs, run dirs or eval dirs (all of one kind).
	Paths []string
	// Tokenizer is the student's tokenizer, for the loss-mask view and per-turn trainable
	// tokens; nil leaves them out.
	Tokenizer curate.Tokenizer
	// TokenizerName names it on the page.
	TokenizerName string
	// Poll is the shortest period between re-reads of live run and eval dirs (default 2 s).
	Poll time.Duration
	// NoFullText leaves a dataset's full-text index unbuilt: queries with full text fail.
	NoFullText bool
}

// Server is the viewer: the index over every row of its PATHs and the web app answering
// queries on it. Create it with Open, serve Handler, run Watch for live dirs, Close it.
type Server struct {
	opts     Options
	kind     Kind
	ix       *index
	datasets []*dataset
	// notes[src] is the annotations sidecar of datasets[src].
	notes []*annotations
	runs  []*runDir
	// ids[src][pos] is the index id of a run's trajectory at pos.
	idsMu sync.RWMutex
	ids   [][]int
	// Built is how long building the index took.
	Built time.Duration

	statsMu    sync.Mutex
	statsCache map[string]*cachedStats

	// text is the full-text index; textDone closes when a dataset's is complete, stopText
	// stops its build.
	text     *textIndex
	textDone chan struct{}
	stopText context.CancelFunc

	// exec runs rows' gold and final SQL (SetExecutor); nil without one.
	exec atomic.Pointer[executor]
}

// Open detects the kind of the paths, opens them and builds the index: a dataset's index
// columns are read once; a run or eval dir's committed trajectories are read (Watch re-reads
// them as they grow). Bad input (a path of none of the kinds, paths of mixed kinds, a
// Parquet file whose footer does not read) is an error naming the path; the rows of a row
// group whose index columns do not decode are indexed as unreadable, with the error.
func Open(ctx context.Context, opts Options) (*Server, error) {
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Second
	}
	kind, err := detectAll(opts.Paths)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, kind: kind, ix: newIndex(), statsCache: map[string]*cachedStats{}, text: newTextIndex(), textDone: make(chan struct{})}
	began := time.Now()
	switch kind {
	case KindDataset:
		s.ix.truncKnown = true
		for src, p := range opts.Paths {
			d, err := openDataset(p)
			if err != nil {
				s.Close()
				return nil, err
			}
			s.datasets = append(s.datasets, d)
			notes, err := loadAnnotations(p)
			if err != nil {
				s.Close()
				return nil, err
			}
			s.notes = append(s.notes, notes)
			s.ix.truncKnown = s.ix.truncKnown && d.truncKnown
			err = scan(ctx, d, func(i int, r *indexRow) {
				o := r.outcome()
				s.ix.add(src, i, rowValues{
					teacher: r.Teacher, dialect: r.Dialect, difficulty: r.Difficulty, db: r.DBID,
					turns: int(r.Turns), violations: int(r.FormatViolations), converged: o.Converged, execOK: r.ExecOK, correct: r.Correct,
					unjudged: o.Unjudged, truncated: r.TruncatedTurns > 0, tokens: int(r.NumTokens), trainable: int(r.NumTrainable), taskIndex: int(r.TaskIndex), sample: int(r.Sample),
					key: r.Key, taskID: r.TaskID, question: r.Question, finalSQL: r.FinalSQL, goldSQL: r.GoldSQL,
				})
			}, func(i int, err error) { s.ix.addError(src, i, "", err.Error()) })
			if err != nil {
				s.Close()
				return nil, err
			}
		}
		s.startText(ctx)
	default:
		s.text.ready = true
		close(s.textDone)
		s.ix.truncKnown = true
		for _, p := range opts.Paths {
			s.runs = append(s.runs, newRunDir(p, kind))
			s.ids = append(s.ids, nil)
		}
		if err := s.refresh(ctx); err != nil && ctx.Err() != nil {
			return nil, err
		}
	}
	s.Built = time.Since(began)
	return s, nil
}

// Close releases the open files.
func (s *Server) Close() {
	if s.stopText != nil {
		s.stopText()
		<-s.textDone
	}
	for _, d := range s.datasets {
		d.close()
	}
}

// Kind is the kind of the server's paths.
func (s *Server) Kind() Kind { return s.kind }

// Rows is the number of rows indexed so far.
func (s *Server) Rows() int { return s.ix.len() }

// refresh re-reads every live dir once and indexes what is new.
func (s *Server) refresh(ctx context.Context) error {
	var first error
	for src, r := range s.runs {
		added, err := r.refresh(ctx)
		if err != nil && first == nil {
			first = err
		}
		for _, pos := range added {
			t, _ := r.trajectory(pos)
			truncated := false
			for _, tu := range t.Turns {
				truncated = truncated || turnTruncated(tu)
			}
			o := t.Outcome()
			id := s.ix.add(src, pos, rowValues{
				teacher: t.Teacher, dialect: string(t.Dialect), difficulty: t.Difficulty, db: t.DBID,
				turns: len(t.Turns), violations: t.FormatViolations, converged: o.Converged, execOK: t.ExecOK, correct: t.Correct,
				unjudged: o.Unjudged, truncated: truncated, tokens: t.Usage.CompletionTokens, taskIndex: t.TaskIndex, sample: t.Sample,
				key: t.Key, taskID: t.TaskID, question: t.Question, finalSQL: t.FinalSQL, goldSQL: t.GoldSQL,
			})
			s.text.add(id, textOfTrajectory(t))
			s.idsMu.Lock()
			for len(s.ids[src]) <= pos {
				s.ids[src] = append(s.ids[src], -1)
			}
			s.ids[src][pos] = id
			s.idsMu.Unlock()
		}
	}
	return first
}

// Watch re-reads live run and eval dirs until ctx ends: every Options.Poll, or four times
// the last re-read's duration when that is longer, so a large run costs a bounded share of
// a core. It returns at once for datasets.
func (s *Server) Watch(ctx context.Context) {
	if s.kind == KindDataset {
		return
	}
	wait := s.opts.Poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		began := time.Now()
		s.refresh(ctx)
		wait = max(s.opts.Poll, 4*time.Since(began))
	}
}

// Handler serves the app and its JSON API. Serve it behind an httpguard.Guard, which answers
// only requests for the server's own origin: the data must not reach a web page elsewhere
// through a DNS name pointed at 127.0.0.1.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/info", s.handleInfo)
	mux.HandleFunc("GET /api/rows", s.handleRows)
	mux.HandleFunc("GET /api/row", s.handleRow)
	mux.HandleFunc("GET /api/mask", s.handleMask)
	mux.HandleFunc("GET /api/stats", s.handleStats)
	mux.HandleFunc("GET /api/chart", s.handleChart)
	mux.HandleFunc("GET /api/compare", s.handleCompare)
	mux.HandleFunc("GET /api/task", s.handleTask)
	mux.HandleFunc("GET /api/export", s.handleExport)
	mux.HandleFunc("GET /api/charts", s.handleCharts)
	mux.HandleFunc("POST /api/annotate", s.handleAnnotate)
	mux.HandleFunc("GET /api/results", s.handleResults)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
		mux.ServeHTTP(w, r)
	})
}

// PathInfo describes one PATH on the info endpoint.
type PathInfo struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Rows int    `json:"rows"`
	// Policy is an eval dir's policy.
	Policy string `json:"policy,omitempty"`
	// Error is the last read's error (a damaged shard line): rows before it are shown.
	Error string `json:"error,omitempty"`
}

// Info is what the page needs to know of the server.
type Info struct {
	Kind  Kind       `json:"kind"`
	Paths []PathInfo `json:"paths"`
	Rows  int        `json:"rows"`
	// Live is true for run and eval dirs, which are re-read as they grow.
	Live bool `json:"live"`
	// Compare is true with two or more eval dirs, or a dataset of two or more teachers.
	Compare    bool   `json:"compare"`
	Tokenizer  string `json:"tokenizer"`
	TokensName string `json:"tokens_name"`
	TruncKnown bool   `json:"trunc_known"`
	BuiltMS    int64  `json:"built_ms"`
	// Search is the state of the full-text index.
	Search SearchStatus `json:"search"`
	// Annotations is true when rows take notes and labels (datasets: the sidecar file
	// AnnotationsFile in each dataset dir).
	Annotations bool `json:"annotations"`
}

// Info returns the server's description.
func (s *Server) Info() Info {
	in := Info{Kind: s.kind, Rows: s.ix.len(), Live: s.kind != KindDataset, Compare: s.kind == KindEval && len(s.runs) > 1 || s.kind == KindDataset && s.teachers() > 1,
		TruncKnown: s.ix.truncKnown, BuiltMS: s.Built.Milliseconds(), TokensName: "student tokens", Search: s.text.status(),
		Annotations: s.kind == KindDataset}
	if s.opts.Tokenizer != nil {
		in.Tokenizer = s.opts.TokenizerName
		if in.Tokenizer == "" {
			in.Tokenizer = "given"
		}
	}
	if s.kind != KindDataset {
		in.TokensName = "teacher completion tokens"
	}
	for _, d := range s.datasets {
		in.Paths = append(in.Paths, PathInfo{Path: d.dir, Name: filepath.Base(filepath.Clean(d.dir)), Rows: int(d.ds.NumRows)})
	}
	for _, r := range s.runs {
		n, err := r.status()
		pi := PathInfo{Path: r.dir, Name: filepath.Base(filepath.Clean(r.dir)), Rows: n}
		if err != nil {
			pi.Error = err.Error()
		}
		if r.kind == KindEval {
			pi.Policy = r.policyName()
		}
		in.Paths = append(in.Paths, pi)
	}
	return in
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Info()) }

func (s *Server) handleRows(w http.ResponseWriter, r *http.Request) { serveQuery(w, r, s.Query) }

// rowID reads the id parameter.
func (s *Server) rowID(r *http.Request) (entry, int, error) {
	id, err := strconv.Atoi(r.URL.Query().Get("id"))
	if err != nil {
		return entry{}, 0, fmt.Errorf("id=%q: want a row number", r.URL.Query().Get("id"))
	}
	e, ok := s.ix.get(id)
	if !ok {
		return entry{}, id, fmt.Errorf("row %d: %w (the index has %d rows)", id, errNoRow, s.ix.len())
	}
	return e, id, nil
}

// load returns the row with id as a Detail and its messages. A row that cannot be read
// gives a Detail with Error set.
func (s *Server) load(e entry, id int) (*Detail, []chat.Message) {
	var d *Detail
	var msgs []chat.Message
	switch s.kind {
	case KindDataset:
		row, err := s.datasets[e.src].row(int(e.pos))
		if err != nil {
			return s.unreadable(e, id, err), nil
		}
		d = detailOfRow(row)
		msgs = row.Messages
	default:
		t, ok := s.runs[e.src].trajectory(int(e.pos))
		if !ok {
			return s.unreadable(e, id, errNoRow), nil
		}
		d = detailOfTrajectory(t)
		d.Kind = s.kind
		d.Source = filepath.Base(filepath.Clean(s.runs[e.src].dir))
		rendered, err := curate.Render(t, curate.ThinkAuto)
		if err != nil {
			d.Error = err.Error()
			break
		}
		msgs = rendered.Messages
	}
	d.ID = id
	d.FinalSQLFormatted, d.GoldSQLFormatted = formatSQL(d.FinalSQL), formatSQL(d.GoldSQL)
	return d, msgs
}

// unreadable is the page of a row that cannot be read.
func (s *Server) unreadable(e entry, id int, err error) *Detail {
	return &Detail{ID: id, Kind: s.kind, Key: e.key, Error: err.Error(), Turns: []TurnView{}, Notes: []string{}}
}

func (s *Server) handleRow(w http.ResponseWriter, r *http.Request) {
	e, id, err := s.rowID(r)
	if err != nil {
		httpError(w, http.StatusNotFound, err)
		return
	}
	d, msgs := s.load(e, id)
	if d.Error == "" {
		s.addTrainable(d, msgs)
	}
	if an, ok := s.annotationOf(e); ok {
		d.Annotation = &an
	}
	writeJSON(w, d)
}

// addTrainable fills each turn's trainable token count from the loss mask.
func (s *Server) addTrainable(d *Detail, msgs []chat.Message) {
	m, err := s.mask(msgs)
	if err != nil {
		d.MaskError = err.Error()
		return
	}
	per := make([]int, len(m.Spans))
	for _, t := range m.Tokens {
		if t.Span >= 0 {
			per[t.Span]++
		}
	}
	for k := range d.Turns {
		if k < len(per) {
			d.Turns[k].Trainable = per[k]
		}
	}
}

func (s *Server) handleMask(w http.ResponseWriter, r *http.Request) {
	e, id, err := s.rowID(r)
	if err != nil {
		httpError(w, http.StatusNotFound, err)
		return
	}
	d, msgs := s.load(e, id)
	if d.Error != "" {
		writeJSON(w, MaskView{ID: id, Error: d.Error})
		return
	}
	m, err := s.mask(msgs)
	if err != nil {
		writeJSON(w, MaskView{ID: id, Error: err.Error()})
		return
	}
	mv := maskView(m)
	mv.ID = id
	mv.Tokenizer = s.Info().Tokenizer
	if s.kind == KindDataset {
		mv.StoredTokens, mv.StoredTrainable, mv.HasStored = d.NumTokens, d.NumTrainable, true
	}
	writeJSON(w, mv)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		// The client went away mid-answer; nothing to tell it.
		return
	}
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// turnTruncated reports a turn cut before its SQL was complete, as curate counts it in
// truncated_turns: the mark the episode recorded, or, for run dirs of format v1, which did not
// record one, protocol.Truncated of the reply as received.
func turnTruncated(tu rundir.Turn) bool {
	return tu.Truncated || protocol.Truncated(tu.Reply())
}
