package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/httpguard"
	"github.com/chainedsql/chainedsql/internal/plural"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/turns"
)

// Handler returns the HTTP handler of the environment's API (docs/ENV.md):
//
//	GET    /v1/tasks?split=&subset=&limit=&offset=
//	POST   /v1/episodes                 {"task_id", "dialect"}
//	GET    /v1/episodes/{id}
//	DELETE /v1/episodes/{id}
//	POST   /v1/episodes/{id}/step       {"content", "reasoning", "finish_reason"}
//	POST   /v1/episodes:batch-step      {"steps": [{"episode_id", "content", ...}, ...]}
//	POST   /v1/score                    {"task_id", "dialect", "completions": [text or {"content", ...}, ...]}
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tasks", s.listTasks)
	mux.HandleFunc("POST /v1/episodes", s.createEpisode)
	mux.HandleFunc("GET /v1/episodes/{id}", s.getEpisode)
	mux.HandleFunc("DELETE /v1/episodes/{id}", s.deleteEpisode)
	mux.HandleFunc("POST /v1/episodes/{id}/step", s.stepEpisode)
	mux.HandleFunc("POST /v1/episodes:batch-step", s.batchStep)
	mux.HandleFunc("POST /v1/score", s.score)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no route for %s %s (see docs/ENV.md: /v1/tasks, /v1/episodes, /v1/episodes/{id}/step, /v1/episodes:batch-step, /v1/score)", r.Method, r.URL.Path)})
	})
	return mux
}

// apiError is an error answered with its HTTP status.
type apiError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	// RetryAfter, in seconds, is sent as the Retry-After header too (a 429's, and a 503's whose
	// database is busy, sandbox.ErrBusy); in a batch step's results it is the only place a step's
	// wait shows.
	RetryAfter int `json:"retry_after,omitempty"`
}

// tooMany is a 429 saying msg, with Retry-After retry (at least 1 s, in whole seconds up).
func tooMany(retry time.Duration, msg string) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Message: msg, RetryAfter: int(math.Ceil(max(retry, time.Second).Seconds()))}
}

func (e *apiError) Error() string { return e.Message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// writeJSON answers v as JSON with status; a v that does not encode (a non-finite number) is a
// 500 saying so, never an empty reply.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the protocol's tags stay readable: <observation>, not \u003c
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		enc.Encode(struct {
			Error *apiError `json:"error"`
		}{&apiError{Status: status, Message: "the reply does not encode as JSON: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) // a failed write means the client went away
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// decode reads r's body as exactly one JSON object into v, refusing unknown fields, trailing
// data and bodies over the size limit.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
			var mbe *http.MaxBytesError
			if errors.As(terr, &mbe) {
				err = terr
			}
		}
	}
	if err == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body over %d bytes (the server's --max-body)", mbe.Limit)}
	}
	var long *tooLong
	if errors.As(err, &long) {
		return badRequest("%s", long.Error())
	}
	if errors.Is(err, io.EOF) {
		return badRequest("empty request body: want a JSON object")
	}
	return badRequest("malformed request: %v", err)
}

// busyRetryAfter is the Retry-After, in seconds, of a 503 whose database had no execution slot
// (sandbox.ErrBusy): statements past their deadlines hold them until they end, which the server
// cannot foresee, so the client looks again soon.
const busyRetryAfter = 1

// execError maps an error of a database or of the request's context to its answer: 503, the
// episode unchanged; with Retry-After when the database is busy (sandbox.ErrBusy).
func (s *Server) execError(ctx context.Context, what string, err error) *apiError {
	if ctx.Err() != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("%s: request cancelled: %v", what, ctx.Err())}
	}
	s.logf("env: %s: %v", what, err)
	e := &apiError{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("%s: %v (the episode is unchanged; retry the request)", what, err)}
	if errors.Is(err, sandbox.ErrBusy) {
		e.RetryAfter = busyRetryAfter
	}
	return e
}

// taskJSON is one entry of the task listing.
type taskJSON struct {
	TaskID     string `json:"task_id"`
	DBID       string `json:"db_id"`
	Difficulty string `json:"difficulty,omitempty"`
	Split      string `json:"split"`
	// Subset is datasets.SubsetTrain or datasets.SubsetVal (Config.Subsets).
	Subset string `json:"subset"`
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "split" && k != "subset" && k != "limit" && k != "offset" {
			writeError(w, badRequest("unknown query parameter %q (want split, subset, limit, offset)", k))
			return
		}
	}
	intParam := func(name string, def int) (int, *apiError) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, badRequest("%s=%q: want a non-negative integer", name, v)
		}
		return n, nil
	}
	limit, aerr := intParam("limit", 0)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	offset, aerr := intParam("offset", 0)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	split, hasSplit := q.Get("split"), q.Has("split")
	if hasSplit && !containsString(s.splits, split) {
		writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no split %q (have %s)", split, strings.Join(s.splits, ", "))})
		return
	}
	subset, hasSubset := q.Get("subset"), q.Has("subset")
	if hasSubset && subset != datasets.SubsetTrain && subset != datasets.SubsetVal {
		writeError(w, badRequest("subset=%q: want %s or %s", subset, datasets.SubsetTrain, datasets.SubsetVal))
		return
	}
	var sel []*datasets.Task
	for _, t := range s.order {
		if (!hasSplit || SplitOf(t.ID) == split) && (!hasSubset || s.cfg.Subsets.Of(t.ID) == subset) {
			sel = append(sel, t)
		}
	}
	total := len(sel)
	sel = sel[min(offset, total):]
	if limit > 0 && limit < len(sel) {
		sel = sel[:limit]
	}
	out := make([]taskJSON, len(sel))
	for i, t := range sel {
		out[i] = taskJSON{TaskID: t.ID, DBID: t.DBID, Difficulty: t.Difficulty, Split: SplitOf(t.ID), Subset: s.cfg.Subsets.Of(t.ID)}
	}
	dialects := make([]string, len(s.cfg.Dialects))
	for i, d := range s.cfg.Dialects {
		dialects[i] = string(d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": total, "offset": offset, "tasks": out, "splits": s.splits, "dialects": dialects,
		"val_fraction": s.cfg.Subsets.ValFraction, "seed": s.cfg.Subsets.Seed})
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// resolve finds a request's task and dialect ("" is the server's first dialect).
func (s *Server) resolve(taskID, dialect string) (*datasets.Task, datasets.Dialect, *apiError) {
	if taskID == "" {
		return nil, "", badRequest(`"task_id" is required`)
	}
	t, ok := s.tasks[taskID]
	if !ok {
		return nil, "", &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no task %q (GET /v1/tasks lists them)", taskID)}
	}
	d := s.cfg.Dialects[0]
	if dialect != "" {
		d = datasets.Dialect(dialect)
		if !s.dialects[d] {
			served := make([]string, len(s.cfg.Dialects))
			for i, x := range s.cfg.Dialects {
				served[i] = string(x)
			}
			return nil, "", badRequest("dialect %q is not served (the server runs %s)", dialect, strings.Join(served, ", "))
		}
	}
	return t, d, nil
}

type createRequest struct {
	TaskID  string `json:"task_id"`
	Dialect string `json:"dialect"`
}

func (c *createRequest) target() (string, string) { return c.TaskID, c.Dialect }

// targeted is a request naming a task and a dialect.
type targeted interface {
	target() (taskID, dialect string)
}

// decodeTarget decodes r's body into req and resolves the task and dialect it names; on an
// error it answers it and returns false.
func (s *Server) decodeTarget(w http.ResponseWriter, r *http.Request, req targeted) (*datasets.Task, datasets.Dialect, bool) {
	if aerr := s.decode(w, r, req); aerr != nil {
		writeError(w, aerr)
		return nil, "", false
	}
	task, d, aerr := s.resolve(req.target())
	if aerr != nil {
		writeError(w, aerr)
		return nil, "", false
	}
	return task, d, true
}

type createResponse struct {
	EpisodeID string         `json:"episode_id"`
	TaskID    string         `json:"task_id"`
	Dialect   string         `json:"dialect"`
	MaxTurns  int            `json:"max_turns"`
	Messages  []chat.Message `json:"messages"`
	// Tokens is the prompt in the student's chat template (docs/ENV.md, "Token-level turns").
	Tokens turns.Piece `json:"tokens"`
}

func (s *Server) createEpisode(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	task, d, ok := s.decodeTarget(w, r, &req)
	if !ok {
		return
	}
	st, err := s.start(r.Context(), *task, d, 0)
	if err != nil {
		writeError(w, s.execError(r.Context(), "starting an episode of "+task.ID, err))
		return
	}
	e := &liveEpisode{task: task, dialect: d, st: st, client: httpguard.Client(r), size: episodeSize(st)}
	if retry, err := s.store.add(e); err != nil {
		// Retry-After: when the first episode in the way expires, unless one is finished first.
		msg := fmt.Sprintf("%s in play, the server's cap (--max-episodes): finish or DELETE some, or wait for idle ones to expire (--ttl %s)", plural.Count(s.cfg.MaxEpisodes, "episode"), s.cfg.TTL)
		switch {
		case errors.Is(err, errClientFull):
			msg = fmt.Sprintf("client %s has %s in play, its cap (--max-episodes-per-client): finish or DELETE some, or wait for idle ones to expire (--ttl %s); a trainer of its own needs a key of its own (--api-key)", e.client, plural.Count(s.cfg.MaxEpisodesPerClient, "episode"), s.cfg.TTL)
		case errors.Is(err, errBytesFull):
			msg = fmt.Sprintf("the episodes in memory hold %s, the three quarters of the server's bound (--max-store-mib %d) that new episodes may fill: finish or DELETE some, or wait for idle ones to expire (--ttl %s)", s.storeHeld(), s.cfg.MaxStoreBytes>>20, s.cfg.TTL)
		case errors.Is(err, errClientBytesFull):
			msg = fmt.Sprintf("client %s's episodes in memory hold %s, the three quarters of its share (--max-client-store-mib: %s of the store's %s) that its new episodes may fill: finish or DELETE some, or wait for idle ones to expire (--ttl %s); a trainer of its own needs a key of its own (--api-key)", e.client, s.clientHeld(e.client), mib(s.cfg.MaxClientStoreBytes), mib(s.cfg.MaxStoreBytes), s.cfg.TTL)
		}
		writeError(w, tooMany(retry, msg))
		return
	}
	writeJSON(w, http.StatusOK, createResponse{EpisodeID: e.id, TaskID: task.ID, Dialect: string(d), MaxTurns: s.cfg.Episode.MaxTurns, Messages: st.Messages(), Tokens: s.promptTokens(st.Messages())})
}

// storeHeld says what the stored episodes hold and the steps in flight reserve.
func (s *Server) storeHeld() string {
	b, r := s.store.held()
	return fmt.Sprintf("%s (%s more reserved for steps in flight)", mib(b), mib(r))
}

// clientHeld says what client's stored episodes hold and their steps in flight reserve.
func (s *Server) clientHeld(client string) string {
	b, r := s.store.clientHeld(client)
	return fmt.Sprintf("%s (%s more reserved for steps in flight)", mib(b), mib(r))
}

// mib is n bytes in MiB, for messages.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// reply is one assistant turn as a request carries it.
type reply struct {
	// Content is the assistant's text; required (an empty one is a format violation).
	Content *string `json:"content"`
	// Reasoning is reasoning that came in a separate field (reasoning_content), if any.
	Reasoning string `json:"reasoning,omitempty"`
	// FinishReason is the generator's: "stop" (or none), "length", "content_filter"
	// (chat.Finish*); a reply that "length" cut before its SQL was complete is a truncated turn,
	// as distill records it (protocol.Truncated). Any other value is refused: a typo or a
	// generator's own word ("abort") would otherwise pass as a stop and be executed and scored.
	FinishReason string `json:"finish_reason,omitempty"`
}

func (rp reply) check() *apiError {
	if rp.Content == nil {
		return badRequest(`"content" is required (the assistant's reply text)`)
	}
	switch rp.FinishReason {
	case "", chat.FinishStop, chat.FinishLength, chat.FinishContentFilter:
	default:
		return badRequest(`"finish_reason" %q: want "stop" (the default), "length" (the generator's token limit cut the reply) or "content_filter"`, rp.FinishReason)
	}
	return nil
}

// rewardsJSON is the rewards with their weighted total.
type rewardsJSON struct {
	rewards.Rewards
	Total float64 `json:"total"`
}

func (s *Server) rewardsOf(tr *rundir.Trajectory) rewardsJSON {
	r := rewards.Of(tr)
	return rewardsJSON{Rewards: r, Total: s.cfg.Weights.Total(r)}
}

// stepInfo describes the turn just played.
type stepInfo struct {
	// SQL is the statement parsed from the reply; "" on a format violation.
	SQL string `json:"sql"`
	// Outcome is the execution's: ok, error, timeout, refused; or format_violation, truncated.
	Outcome string `json:"outcome"`
	// Error is the engine's error text, a refusal's reason, or the format error.
	Error string `json:"error,omitempty"`
	// Rows is the result's total row count (outcome ok).
	Rows *int `json:"rows,omitempty"`
	// ExecMS is the statement's execution time in milliseconds.
	ExecMS float64 `json:"exec_ms"`
	// GoldError says why the episode could not be judged (its gold SQL failed), at the end.
	GoldError string `json:"gold_error,omitempty"`
	// GoldDialect, at the end, is the engine whose result of the gold SQL the episode was
	// judged against when not its own: sqlite, the task's SQLite file, after the gold failed
	// on the server (rundir.Trajectory.GoldDialect).
	GoldDialect string `json:"gold_dialect,omitempty"`
}

func infoOf(tu rundir.Turn, tr *rundir.Trajectory, done bool) stepInfo {
	in := stepInfo{SQL: tu.SQL}
	if tu.Exec == nil {
		in.Outcome = "format_violation"
		if tu.Truncated {
			in.Outcome = "truncated"
		}
		in.Error = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(tu.Observation, "<observation>"), "</observation>"))
	} else {
		in.Outcome, in.Error = string(tu.Exec.Outcome), tu.Exec.Error
		in.ExecMS = float64(tu.Exec.Duration.Microseconds()) / 1000
		if tu.Exec.Outcome == sandbox.OutcomeOK {
			n := tu.Exec.Total
			in.Rows = &n
		}
	}
	if done {
		in.GoldError, in.GoldDialect = tr.GoldError, string(tr.GoldDialect)
	}
	return in
}

type stepResponse struct {
	EpisodeID string `json:"episode_id"`
	Done      bool   `json:"done"`
	// Observation is the next user turn; null once the episode is done.
	Observation *chat.Message `json:"observation"`
	Turn        int           `json:"turn"`
	// Rewards is the running snapshot of the four rewards (final at done); do not sum it over
	// steps: Reward is the step's share under the reward mode (see turnRewards).
	Rewards rewardsJSON `json:"rewards"`
	stepRewards
	Info stepInfo `json:"info"`
	// Tokens is what follows the reply in the student's chat template: the wrapped observation
	// and the next generation prompt, or at done the reply's closing.
	Tokens turns.Piece `json:"tokens"`
}

// owner is the client whose episodes r may read, step and delete: with API keys, its key's (an
// episode answers only the key that started it; another key's is not found, as an unknown id,
// so that a trainer that learns another's episode id can neither play, read nor drop it), else
// "" for every episode.
func owner(r *http.Request) string {
	c, _ := httpguard.KeyClient(r)
	return c
}

// step plays rp on episode id, when client owner may (see owner), in an execution slot
// (--parallel) it takes, or that the caller holds for it (held).
func (s *Server) step(ctx context.Context, owner, id string, rp reply, held bool) (*stepResponse, *apiError) {
	if aerr := rp.check(); aerr != nil {
		return nil, aerr
	}
	e, ok := s.store.get(id, owner)
	if !ok {
		return nil, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("episode %q not found: unknown, expired (no step for %s) or deleted", id, s.cfg.TTL)}
	}
	if !e.mu.TryLock() {
		return nil, &apiError{Status: http.StatusConflict, Message: fmt.Sprintf("episode %s: a step is already in flight; step an episode one reply at a time", id)}
	}
	defer e.mu.Unlock()
	if e.st.Done() {
		tr := e.st.Trajectory()
		return nil, &apiError{Status: http.StatusConflict, Message: fmt.Sprintf("episode %s is done (%s, converged %v); start a new one", id, plural.Count(len(tr.Turns), "turn"), tr.Outcome().Converged)}
	}
	// Room for what the step may keep, held until it is counted.
	growth := stepGrowth(rp, len(e.st.Trajectory().Turns), s.cfg.Episode.Caps, s.cfg.Episode.ReplyCap)
	if retry, err := s.store.reserve(e.client, growth); err != nil {
		again := math.Ceil(max(retry, time.Second).Seconds())
		if errors.Is(err, errClientBytesFull) {
			return nil, tooMany(retry, fmt.Sprintf("episode %s is unchanged: the episodes in memory of its client %s hold %s, and its step may add %s past the client's share (--max-client-store-mib: %s of the store's %s); send it again in %.0f s, or finish or DELETE other episodes of the client", id, e.client, s.clientHeld(e.client), mib(growth), mib(s.cfg.MaxClientStoreBytes), mib(s.cfg.MaxStoreBytes), again))
		}
		return nil, tooMany(retry, fmt.Sprintf("episode %s is unchanged: the episodes in memory hold %s, and its step may add %s past the server's bound (--max-store-mib %d); send it again in %.0f s, or finish or DELETE other episodes", id, s.storeHeld(), mib(growth), s.cfg.MaxStoreBytes>>20, again))
	}
	if !held {
		if err := s.slots.Acquire(ctx, 1); err != nil {
			s.store.unreserve(e.client, growth)
			return nil, s.execError(ctx, "episode "+id, err)
		}
	}
	tu, err := play(ctx, e.st, rp)
	if !held {
		s.slots.Release(1)
	}
	if err != nil {
		s.store.unreserve(e.client, growth)
		return nil, s.execError(ctx, "episode "+id, err)
	}
	done := e.st.Done()
	s.store.touch(e, done, episodeSize(e.st), growth)
	if done {
		s.logEpisode(e)
	}
	tr := e.st.Trajectory()
	resp := &stepResponse{EpisodeID: id, Done: done, Turn: tu.Index, Rewards: s.rewardsOf(tr), stepRewards: s.turnRewards(tr, done), Info: infoOf(tu, tr, done),
		Tokens: s.stepTokens(tu.Observation, done)}
	if !done {
		resp.Observation = &chat.Message{Role: chat.RoleUser, Content: tu.Observation}
	}
	return resp, nil
}

func (s *Server) stepEpisode(w http.ResponseWriter, r *http.Request) {
	var rp reply
	if aerr := s.decode(w, r, &rp); aerr != nil {
		writeError(w, aerr)
		return
	}
	resp, aerr := s.step(r.Context(), owner(r), r.PathValue("id"), rp, false)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

type batchItem struct {
	EpisodeID string `json:"episode_id"`
	reply
}

type batchRequest struct {
	Steps capped[batchItem] `json:"steps"`
}

// capped is a JSON list (or null) decoded one element at a time and refused past max elements
// (max 0: none), so that a list longer than --max-batch is refused before the rest of it is
// decoded: 8 MiB of empty objects decoded whole took the server from 30 MB to 700 MB of RSS
// before its length was checked (TestBatchCapBeforeDecode). Its elements are decoded refusing
// unknown fields, as every request is. what names the elements and where in its refusal.
type capped[T any] struct {
	items []T
	max   int
	what  string
}

// tooLong is capped's refusal.
type tooLong struct {
	max  int
	what string
}

func (e *tooLong) Error() string {
	return fmt.Sprintf("more than %d %s; the server takes at most %d (--max-batch)", e.max, e.what, e.max)
}

// UnmarshalJSON decodes the list b, refusing it at its element max+1.
func (c *capped[T]) UnmarshalJSON(b []byte) error {
	c.items = nil
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	switch {
	case err != nil:
		return err
	case tok == nil:
		return nil
	case tok != json.Delim('['):
		return fmt.Errorf("%s: want a list, got %v", c.what, tok)
	}
	for dec.More() {
		if c.max > 0 && len(c.items) == c.max {
			return &tooLong{max: c.max, what: c.what}
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return err
		}
		c.items = append(c.items, v)
	}
	_, err = dec.Token()
	return err
}

// batchResult is one step's answer: the step, or its error.
type batchResult struct {
	*stepResponse
	EpisodeID string    `json:"episode_id"`
	Error     *apiError `json:"error,omitempty"`
}

func (s *Server) batchStep(w http.ResponseWriter, r *http.Request) {
	req := batchRequest{Steps: capped[batchItem]{max: s.cfg.MaxBatch, what: "steps in one batch"}}
	if aerr := s.decode(w, r, &req); aerr != nil {
		writeError(w, aerr)
		return
	}
	steps := req.Steps.items
	if len(steps) == 0 {
		writeError(w, badRequest(`"steps" is required: a list of {"episode_id", "content"}`))
		return
	}
	seen := make(map[string]int, len(steps))
	for i, it := range steps {
		if it.EpisodeID == "" {
			writeError(w, badRequest(`steps[%d]: "episode_id" is required`, i))
			return
		}
		if aerr := it.check(); aerr != nil {
			writeError(w, badRequest("steps[%d]: %s", i, aerr.Message))
			return
		}
		if j, dup := seen[it.EpisodeID]; dup {
			writeError(w, badRequest("steps[%d] and steps[%d] both step episode %s: one reply per episode per batch", j, i, it.EpisodeID))
			return
		}
		seen[it.EpisodeID] = i
	}
	out := make([]batchResult, len(steps))
	who := owner(r)
	ctx := r.Context()
	// As in score: a step's goroutine starts once it has its execution slot, the request waiting
	// for one at a time, so that another client's step waits for a slot, not behind the batch.
	var wg sync.WaitGroup
	for i, it := range steps {
		if err := s.slots.Acquire(ctx, 1); err != nil {
			for j := i; j < len(steps); j++ {
				out[j] = batchResult{EpisodeID: steps[j].EpisodeID, Error: s.execError(ctx, "episode "+steps[j].EpisodeID, err)}
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.slots.Release(1)
			resp, aerr := s.step(ctx, who, it.EpisodeID, it.reply, true)
			out[i] = batchResult{stepResponse: resp, EpisodeID: it.EpisodeID, Error: aerr}
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"results": out})
}

// episodeJSON is an episode as GET /v1/episodes/{id} shows it.
type episodeJSON struct {
	EpisodeID string         `json:"episode_id"`
	TaskID    string         `json:"task_id"`
	Dialect   string         `json:"dialect"`
	Done      bool           `json:"done"`
	Turns     int            `json:"turns"`
	Messages  []chat.Message `json:"messages"`
	Rewards   rewardsJSON    `json:"rewards"`
	FinalSQL  string         `json:"final_sql,omitempty"`
}

func (s *Server) getEpisode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e, ok := s.store.get(id, owner(r))
	if !ok {
		writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("episode %q not found: unknown, expired (no step for %s) or deleted", id, s.cfg.TTL)})
		return
	}
	if !e.mu.TryLock() {
		writeError(w, &apiError{Status: http.StatusConflict, Message: fmt.Sprintf("episode %s: a step is in flight; read it after the step", id)})
		return
	}
	defer e.mu.Unlock()
	tr := e.st.Trajectory()
	writeJSON(w, http.StatusOK, episodeJSON{EpisodeID: id, TaskID: e.task.ID, Dialect: string(e.dialect), Done: e.st.Done(),
		Turns: len(tr.Turns), Messages: e.st.Messages(), Rewards: s.rewardsOf(tr), FinalSQL: tr.FinalSQL})
}

func (s *Server) deleteEpisode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.store.remove(id, owner(r)) {
		writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("episode %q not found: unknown, expired (no step for %s) or deleted", id, s.cfg.TTL)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"episode_id": id, "deleted": true})
}

type scoreRequest struct {
	TaskID      string             `json:"task_id"`
	Dialect     string             `json:"dialect"`
	Completions capped[completion] `json:"completions"`
}

// completion is one of /v1/score's completions: the reply's text, or the reply as a step takes
// it ({"content", "reasoning", "finish_reason"}), so that a generator's separate reasoning and
// its token-limit cut count as they do in a step.
type completion struct{ reply }

// UnmarshalJSON reads a string or a reply object (unknown fields refused, as in every request);
// anything else, null included, is an error.
func (c *completion) UnmarshalJSON(b []byte) error {
	var err error
	switch b = bytes.TrimLeft(b, " \t\r\n"); {
	case len(b) > 0 && b[0] == '"':
		var text string
		if err = json.Unmarshal(b, &text); err == nil {
			c.reply = reply{Content: &text}
		}
	case len(b) > 0 && b[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c.reply)
	default:
		err = fmt.Errorf("got %.20s", b)
	}
	if err != nil {
		return fmt.Errorf("a completion is a string or {\"content\", \"reasoning\", \"finish_reason\"}: %w", err)
	}
	return nil
}

func (c *scoreRequest) target() (string, string) { return c.TaskID, c.Dialect }

// scoreResult is the rewards of one completion played as a one-turn episode.
type scoreResult struct {
	Rewards rewardsJSON `json:"rewards"`
	Info    stepInfo    `json:"info"`
}

func (s *Server) score(w http.ResponseWriter, r *http.Request) {
	req := scoreRequest{Completions: capped[completion]{max: s.cfg.MaxBatch, what: "completions in one request"}}
	task, d, ok := s.decodeTarget(w, r, &req)
	if !ok {
		return
	}
	completions := req.Completions.items
	if len(completions) == 0 {
		writeError(w, badRequest(`"completions" is required: a list of assistant replies`))
		return
	}
	for i, c := range completions {
		if e := c.check(); e != nil {
			e.Message = fmt.Sprintf("completion %d: %s", i, e.Message)
			writeError(w, e)
			return
		}
	}
	reqCtx := r.Context()
	// One completion's failure makes the whole reply a 503, so the first one cancels the rest:
	// those running stop and those waiting for a slot never start (they ran on, each to its
	// end, for an answer nobody would read).
	ctx, cancel := context.WithCancelCause(reqCtx)
	defer cancel(nil)
	out := make([]scoreResult, len(completions))
	// A completion takes its execution slot (--parallel) before its episode is started or its
	// goroutine exists, and the request waits for one slot at a time: so the episodes a score
	// request holds are the ones running, however many requests wait (200 requests of 1,024
	// slow completions started all 204,800 episodes at once, 918 MB, and queued every one of
	// them ahead of other clients' steps).
	var wg sync.WaitGroup
	for i := range completions {
		if err := s.slots.Acquire(ctx, 1); err != nil {
			cancel(err)
			break
		}
		if ctx.Err() != nil { // a completion failed while this one got its slot
			s.slots.Release(1)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.slots.Release(1) // after cancel, so the loop cannot start another
			var err error
			if out[i], err = s.scoreOne(ctx, *task, d, completions[i].reply); err != nil {
				cancel(fmt.Errorf("completion %d: %w", i, err)) // the first cause is kept
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		writeError(w, s.execError(reqCtx, "scoring "+task.ID, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": task.ID, "dialect": string(d), "results": out})
}

// scoreOne plays completion as the only turn of an episode (so converged is 0) and judges it;
// the caller holds an execution slot for it.
func (s *Server) scoreOne(ctx context.Context, task datasets.Task, d datasets.Dialect, completion reply) (scoreResult, error) {
	st, err := s.start(ctx, task, d, 1)
	if err != nil {
		return scoreResult{}, err
	}
	tu, err := play(ctx, st, completion)
	if err != nil {
		return scoreResult{}, err
	}
	tr := st.Trajectory()
	return scoreResult{Rewards: s.rewardsOf(tr), Info: infoOf(tu, tr, true)}, nil
}
