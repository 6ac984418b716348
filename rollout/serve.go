package rollout

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
)

// Server answers POST /v1/rollouts for `student rollout --serve` (docs/ROLLOUT.md): one rollout
// at a time, wholly on the weights serving when it starts, written to a file in Out.
type Server[M serve.Model] struct {
	// Swap holds the weights; a rollout holds the ones it starts on until it ends.
	Swap *serve.Swap[M]
	// Bind gives the generator and tokenizer of the weights m.
	Bind func(m M) (*generate.Generator, Tokenizer)
	// Config is every rollout's configuration: its Tasks are the tasks served (a request
	// selects among them), its Seed the default seed; Generator, Tokenizer and Model come from
	// the weights each rollout acquires.
	Config Config
	// Subsets assigns the served tasks to train and validation; Subset is the subset of a
	// request that names none ("" for every task).
	Subsets datasets.Subsets
	Subset  string
	// Out is the directory every file is written in; DefaultOut, when not empty, the file of a
	// request that names none.
	Out        *OutDir
	DefaultOut string
	// Done, when set, is called after each rollout is written, with its file.
	Done func(file string, rep *Report)
	// Log receives the request log; nil for none.
	Log *log.Logger

	running sync.Mutex
}

// Request is the body of POST /v1/rollouts; every field is optional.
type Request struct {
	// Out is the file to write, in the server's output directory (default its --out).
	Out string `json:"out"`
	// Seed is the sampling seed (default the server's --seed).
	Seed *int64 `json:"seed"`
	// TaskIDs are the tasks to play, in this order, one group each (default every task
	// served, or those of Subset).
	TaskIDs []string `json:"task_ids"`
	// Subset is "train" or "val": only the tasks of that subset (default the server's
	// --subset); with TaskIDs, each must be in it.
	Subset string `json:"subset"`
}

// Reply is POST /v1/rollouts' answer.
type Reply struct {
	Object string `json:"object"` // "rollout"
	// Out is the absolute path of the file written.
	Out  string `json:"out"`
	Seed int64  `json:"seed"`
	// Subset is the subset the tasks were selected from ("" for all); Tasks counts the groups
	// played, Group the episodes of each.
	Subset string `json:"subset,omitempty"`
	Tasks  int    `json:"tasks"`
	Group  int    `json:"group"`
	// Weights are the weights every episode of the rollout was decoded with.
	Weights serve.WeightsInfo `json:"weights"`
	*Report
}

// ServeHTTP runs the rollout a POST /v1/rollouts asks for.
func (s *Server[M]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "", "method_not_allowed", r.Method+" /v1/rollouts: method not allowed (use POST)")
		return
	}
	var req Request
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "", "", fmt.Sprintf(`request body is not {"out": "FILE", "seed": N, "task_ids": [ID, ...], "subset": "train"|"val"}: %v`, err))
		return
	}
	reply := Reply{Object: "rollout", Seed: s.Config.Seed, Subset: cmp.Or(req.Subset, s.Subset), Group: s.Config.Group}
	if req.Seed != nil {
		reply.Seed = *req.Seed
	}
	tasks, indexes, err := Select(s.Config.Tasks, Selection{TaskIDs: req.TaskIDs, Subset: reply.Subset, Subsets: s.Subsets})
	if err != nil {
		var se *SelectError
		param := ""
		if errors.As(err, &se) {
			param = se.Param
		}
		s.logf("rollouts: tasks refused: %v", err)
		writeError(w, http.StatusBadRequest, param, "invalid_tasks", err.Error())
		return
	}
	reply.Tasks = len(tasks)
	name := cmp.Or(req.Out, s.DefaultOut)
	if name == "" {
		writeError(w, http.StatusBadRequest, "out", "", fmt.Sprintf(`out: the Parquet file to write is required ({"out": "FILE"}, a name in %s; the server has no --out)`, s.Out.Dir()))
		return
	}
	path, err := s.Out.Resolve(name)
	if err != nil {
		s.logf("rollouts: out %q refused: %v", name, err)
		writeOutError(w, err)
		return
	}
	reply.Out = path
	if !s.running.TryLock() {
		writeError(w, http.StatusConflict, "", "rollout_in_progress", "a rollout is already running; retry when it ends")
		return
	}
	defer s.running.Unlock()
	m, info, release, err := s.Swap.Acquire()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "closing", err.Error())
		return
	}
	defer release()
	reply.Weights = info
	cfg := s.Config
	cfg.Tasks, cfg.TaskIndexes = tasks, indexes
	cfg.Generator, cfg.Tokenizer = s.Bind(m)
	cfg.Model, cfg.Seed = info.Model, reply.Seed
	cfg.WeightsPath, cfg.WeightsVersion = info.Path, info.Version
	s.logf("rollouts: seed %d to %s on weights version %d (%s): %d tasks × %d", reply.Seed, path, info.Version, info.Path, len(tasks), cfg.Group)
	rows, rep, err := Run(r.Context(), cfg)
	if err == nil {
		err = s.Out.Write(path, rows)
	}
	if err != nil {
		s.logf("rollouts: %s failed: %v", path, err)
		if isOutError(err) {
			writeOutError(w, err)
			return
		}
		writeError(w, http.StatusInternalServerError, "", "rollout_failed", clientMessage(err))
		return
	}
	if s.Done != nil {
		s.Done(path, rep)
	}
	reply.Report = rep
	serve.WriteJSON(w, http.StatusOK, reply)
}

func (s *Server[M]) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log.Printf(format, args...)
	}
}

// isOutError reports whether err is an OutDir refusal.
func isOutError(err error) bool {
	return errors.Is(err, ErrBadName) || errors.Is(err, ErrOutside) || errors.Is(err, ErrNotTable)
}

// writeOutError answers an OutDir refusal of the request's out: 400 for a name that cannot be
// a file, 403 for one outside the directory or a file that is not a rollout table; any other
// error is the server's (500).
func writeOutError(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "out_unchecked"
	switch {
	case errors.Is(err, ErrOutside):
		status, code = http.StatusForbidden, "out_outside_dir"
	case errors.Is(err, ErrNotTable):
		status, code = http.StatusForbidden, "out_not_rollout"
	case errors.Is(err, ErrBadName):
		status, code = http.StatusBadRequest, "invalid_out"
	}
	writeError(w, status, "out", code, clientMessage(err))
}

// writeError writes a refusal in OpenAI's error shape, with its param and code ("" for null).
func writeError(w http.ResponseWriter, status int, param, code, msg string) {
	serve.WriteParamError(w, status, param, code, msg)
}

// clientMessage is err's text without this package's prefix, for a client.
func clientMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "rollout: ")
}
