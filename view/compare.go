package view

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// CompareCell is how one policy did on one task.
type CompareCell struct {
	// Present is false when the policy's eval dir has no trajectory for the task (yet).
	Present bool `json:"present"`
	// ID is the row id of the policy's trajectory (sample 0), -1 when absent.
	ID         int    `json:"id"`
	Correct    bool   `json:"correct"`
	Converged  bool   `json:"converged"`
	ExecOK     bool   `json:"exec_ok"`
	Turns      int    `json:"turns"`
	Violations int    `json:"format_violations"`
	Outcome    string `json:"outcome,omitempty"`
	SQL        string `json:"sql"`
	// Unjudged says the task's gold SQL gave no result for this trajectory, so it could not be
	// judged (rundir.Outcome.Unjudged, as the rows table has it): Correct is false, and the
	// filters count the cell neither correct nor wrong.
	Unjudged bool `json:"unjudged,omitempty"`
}

// judgedWrong reports whether the cell counts as wrong in the compare filters: present, judged
// and not correct. An unjudged cell is neither correct nor wrong there, like an absent one.
func (c CompareCell) judgedWrong() bool { return c.Present && !c.Correct && !c.Unjudged }

// CompareRow is one task across the policies, in the order of the eval dirs given; in a
// dataset, one task in one dialect across the teachers.
type CompareRow struct {
	// Key names the row for /api/task: the task id, and for a dataset "|" and the dialect.
	Key        string        `json:"key"`
	TaskID     string        `json:"task_id"`
	Dialect    string        `json:"dialect,omitempty"`
	Index      int           `json:"index"`
	DBID       string        `json:"db_id"`
	Difficulty string        `json:"difficulty"`
	Question   string        `json:"question"`
	Cells      []CompareCell `json:"cells"`
	// Correct counts the present cells that are correct; DistinctSQL the different final
	// SQL statements among them (case and runs of white space aside): 1 when all agree.
	Correct     int `json:"correct"`
	DistinctSQL int `json:"distinct_sql"`
	// Unjudged counts the present cells that are unjudged (counted as not correct in Correct).
	Unjudged int `json:"unjudged"`
}

// ComparePage is the compare view's table.
type ComparePage struct {
	Policies []string     `json:"policies"`
	Total    int          `json:"total"`
	All      int          `json:"all"`
	Offset   int          `json:"offset"`
	Rows     []CompareRow `json:"rows"`
	// Difficulties lists the buckets present, for the filter.
	Difficulties []string `json:"difficulties"`
	// Unjudged counts the matching rows (all pages) with at least one unjudged cell.
	Unjudged int `json:"unjudged"`
}

// canCompare reports whether the compare view applies: eval dirs, or a dataset (teachers).
func (s *Server) canCompare() bool { return s.kind == KindEval || s.kind == KindDataset }

// served names what the viewer serves, for messages: "this dataset", "these eval dirs".
func (s *Server) served() string {
	if len(s.opts.Paths) == 1 {
		return "this " + string(s.kind) + " dir"
	}
	return "these " + string(s.kind) + " dirs"
}

// teachers is the number of teachers in the index.
func (s *Server) teachers() int {
	s.ix.mu.RLock()
	defer s.ix.mu.RUnlock()
	return len(s.ix.facets[facetTeacher].names)
}

// compareRows joins the eval dirs task by task, or a dataset's teachers task and dialect by
// task and dialect, and counts each row's agreement.
func (s *Server) compareRows() ([]string, []CompareRow) {
	var policies []string
	var rows []CompareRow
	if s.kind == KindDataset {
		policies, rows = s.datasetCompareRows()
	} else {
		policies, rows = s.evalCompareRows()
	}
	for i := range rows {
		r := &rows[i]
		sqls := map[string]bool{}
		for _, c := range r.Cells {
			if c.Present {
				sqls[strings.Join(strings.Fields(strings.ToLower(c.SQL)), " ")] = true
				if c.Correct {
					r.Correct++
				}
				if c.Unjudged {
					r.Unjudged++
				}
			}
		}
		r.DistinctSQL = len(sqls)
	}
	return policies, rows
}

// datasetCompareRows groups a dataset's rows by task and dialect, a cell per teacher (its
// sample-0 row, else its first).
func (s *Server) datasetCompareRows() ([]string, []CompareRow) {
	s.ix.mu.RLock()
	defer s.ix.mu.RUnlock()
	teachers := slices.Clone(s.ix.facets[facetTeacher].names)
	slices.Sort(teachers)
	col := map[string]int{}
	for i, t := range teachers {
		col[t] = i
	}
	byKey := map[string]int{}
	var rows []CompareRow
	for id := range s.ix.entries {
		e := &s.ix.entries[id]
		if e.err != "" {
			continue
		}
		name := func(f int) string { return s.ix.facets[f].names[e.facet[f]] }
		key := e.taskID + "|" + name(facetDialect)
		k, ok := byKey[key]
		if !ok {
			k = len(rows)
			byKey[key] = k
			cells := make([]CompareCell, len(teachers))
			for j := range cells {
				cells[j].ID = -1
			}
			rows = append(rows, CompareRow{Key: key, TaskID: e.taskID, Dialect: name(facetDialect), Index: int(e.taskIndex), DBID: name(facetDB),
				Difficulty: name(facetDifficulty), Question: e.question, Cells: cells})
		}
		c := &rows[k].Cells[col[name(facetTeacher)]]
		if c.Present && e.sample != 0 {
			continue
		}
		*c = CompareCell{Present: true, ID: id, Correct: e.flags&flagCorrect != 0, Converged: e.flags&flagConverged != 0,
			ExecOK: e.flags&flagExecOK != 0, Unjudged: e.flags&flagUnjudged != 0, Turns: int(e.turns), Violations: int(e.violations), SQL: e.finalSQL}
	}
	slices.SortStableFunc(rows, func(a, b CompareRow) int { return cmp.Or(a.Index-b.Index, strings.Compare(a.Dialect, b.Dialect)) })
	return teachers, rows
}

// evalCompareRows joins the eval dirs task by task. A task's cell comes from the policy's
// sample-0 trajectory; where results.jsonl has the task (after a vote, say), its outcome wins.
func (s *Server) evalCompareRows() ([]string, []CompareRow) {
	policies := make([]string, len(s.runs))
	byTask := map[string]*CompareRow{}
	var order []*CompareRow
	s.idsMu.RLock()
	ids := make([][]int, len(s.ids))
	for i := range s.ids {
		ids[i] = slices.Clone(s.ids[i])
	}
	s.idsMu.RUnlock()
	for p, r := range s.runs {
		policies[p] = r.policyName()
		_, results := r.evalFiles()
		for pos, t := range r.snapshot() {
			row := byTask[t.TaskID]
			if row == nil {
				row = &CompareRow{Key: t.TaskID, TaskID: t.TaskID, Index: t.TaskIndex, DBID: t.DBID, Difficulty: t.Difficulty, Question: t.Question,
					Cells: make([]CompareCell, len(s.runs))}
				for k := range row.Cells {
					row.Cells[k].ID = -1
				}
				byTask[t.TaskID] = row
				order = append(order, row)
			}
			c := &row.Cells[p]
			if c.Present && t.Sample != 0 {
				continue
			}
			o := t.Outcome()
			*c = CompareCell{Present: true, ID: -1, Correct: o.Correct, Converged: o.Converged, ExecOK: o.ExecOK, Unjudged: o.Unjudged, Turns: o.Turns,
				Violations: o.FormatViolations, SQL: t.FinalSQL}
			if pos < len(ids[p]) {
				c.ID = ids[p][pos]
			}
			for k := len(t.Turns) - 1; k >= 0; k-- {
				if e := t.Turns[k].Exec; e != nil {
					c.Outcome = string(e.Outcome)
					break
				}
			}
			if res, ok := results[t.TaskID]; ok {
				c.Correct, c.Unjudged, c.Outcome, c.SQL = res.Correct, res.EpisodeOutcome().Unjudged, res.Outcome, res.SQL
			}
		}
	}
	slices.SortStableFunc(order, func(a, b *CompareRow) int { return a.Index - b.Index })
	rows := make([]CompareRow, len(order))
	for i, r := range order {
		rows[i] = *r
	}
	return policies, rows
}

// handleCompare answers the compare table. Parameters: good=P (policy P correct), bad=P
// (policy P wrong), differ=1 (the policies disagree on correctness), allwrong=1 (every
// present policy wrong), sqldiffer=1 (their final SQL differs), difficulty, dialect, q (words
// of the question or db_id), offset, limit. Wrong means judged wrong: an unjudged cell (its
// gold SQL gave no result) is neither correct nor wrong to these filters, as if the policy had
// no trajectory for the task; allwrong needs at least one judged cell.
func (s *Server) handleCompare(w http.ResponseWriter, r *http.Request) {
	if !s.canCompare() {
		httpError(w, http.StatusNotFound, fmt.Errorf("the compare view needs eval dirs or a dataset, not %s", s.served()))
		return
	}
	v := r.URL.Query()
	policies, rows := s.compareRows()
	pol := func(name string) (int, error) {
		if v.Get(name) == "" {
			return -1, nil
		}
		p, err := strconv.Atoi(v.Get(name))
		if err != nil || p < 0 || p >= len(policies) {
			return 0, fmt.Errorf("%s=%q: want a policy number from 0 to %d", name, v.Get(name), len(policies)-1)
		}
		return p, nil
	}
	good, err := pol("good")
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	bad, err := pol("bad")
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	offset, err := wholeNumber(v, "offset")
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	limit, err := wholeNumber(v, "limit")
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if limit == 0 {
		limit = 50
	}
	limit = min(limit, MaxLimit)
	differ, allWrong, sqlDiffer := v.Get("differ") == "1", v.Get("allwrong") == "1", v.Get("sqldiffer") == "1"
	diff, dialect := v.Get("difficulty"), v.Get("dialect")
	words := searchTerms(v.Get("q"))
	page := ComparePage{Policies: policies, All: len(rows), Offset: offset, Rows: []CompareRow{}, Difficulties: []string{}}
	seen := map[string]bool{}
	var hits []CompareRow
	for _, row := range rows {
		if !seen[row.Difficulty] {
			seen[row.Difficulty] = true
			page.Difficulties = append(page.Difficulties, row.Difficulty)
		}
		if good >= 0 && !(row.Cells[good].Present && row.Cells[good].Correct) {
			continue
		}
		if bad >= 0 && !row.Cells[bad].judgedWrong() {
			continue
		}
		if differ && !disagree(row.Cells) {
			continue
		}
		if diff != "" && row.Difficulty != diff || dialect != "" && row.Dialect != dialect {
			continue
		}
		if allWrong && (row.Correct > 0 || !slices.ContainsFunc(row.Cells, CompareCell.judgedWrong)) || sqlDiffer && row.DistinctSQL < 2 {
			continue
		}
		text := strings.ToLower(row.Question + "\x00" + row.DBID + "\x00" + row.TaskID)
		match := true
		for _, w := range words {
			match = match && strings.Contains(text, w)
		}
		if match {
			hits = append(hits, row)
			if row.Unjudged > 0 {
				page.Unjudged++
			}
		}
	}
	slices.Sort(page.Difficulties)
	page.Total = len(hits)
	page.Rows = append(page.Rows, pageOf(hits, offset, limit)...)
	writeJSON(w, page)
}

// disagree reports whether the present, judged cells differ in correctness (an unjudged cell
// is neither correct nor wrong).
func disagree(cells []CompareCell) bool {
	var first *bool
	for i := range cells {
		if !cells[i].Present || cells[i].Unjudged {
			continue
		}
		if first == nil {
			first = &cells[i].Correct
		} else if *first != cells[i].Correct {
			return true
		}
	}
	return false
}

// TaskPage is one task across the policies: each policy's trajectory beside the others.
type TaskPage struct {
	Task     CompareRow `json:"task"`
	Policies []string   `json:"policies"`
	// Details holds each policy's trajectory page (nil where the policy has none).
	Details []*Detail `json:"details"`
}

func (s *Server) handleTask(w http.ResponseWriter, r *http.Request) {
	if !s.canCompare() {
		httpError(w, http.StatusNotFound, fmt.Errorf("the compare view needs eval dirs or a dataset, not %s", s.served()))
		return
	}
	id := r.URL.Query().Get("id")
	policies, rows := s.compareRows()
	for _, row := range rows {
		if row.Key != id {
			continue
		}
		page := TaskPage{Task: row, Policies: policies, Details: make([]*Detail, len(policies))}
		for p, c := range row.Cells {
			if c.ID < 0 {
				continue
			}
			if e, ok := s.ix.get(c.ID); ok {
				d, msgs := s.load(e, c.ID)
				if d.Error == "" {
					s.addTrainable(d, msgs)
				}
				page.Details[p] = d
			}
		}
		writeJSON(w, page)
		return
	}
	httpError(w, http.StatusNotFound, fmt.Errorf("no task %q in %s", id, s.served()))
}
