package datasets

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Spider hardness levels, as the official evaluation names them.
const (
	SpiderEasy   = "easy"
	SpiderMedium = "medium"
	SpiderHard   = "hard"
	SpiderExtra  = "extra"
)

// spiderRecord is one entry of Spider's dev.json / train_spider.json.
type spiderRecord struct {
	DBID     *string         `json:"db_id"`
	Question *string         `json:"question"`
	Query    *string         `json:"query"`
	SQL      json.RawMessage `json:"sql"`
}

// loadSpider loads a Spider question file (dev.json, or the dev.json of a folder). When
// tables.json is next to it, every db_id must be listed there. Databases are at
// <dir>/database/<db>/<db>.sqlite unless dbRoot is set. Difficulty is Spider's official hardness
// (easy, medium, hard, extra) computed from the record's parsed "sql" field, empty without one.
// IDs are "spider-<file stem>/<index>".
func loadSpider(path, dbRoot string) ([]Task, error) {
	file, err := resolveFile(path, "dev.json")
	if err != nil {
		return nil, err
	}
	known, err := spiderTables(filepath.Join(filepath.Dir(file), "tables.json"))
	if err != nil {
		return nil, err
	}
	recs, err := readRecords(file)
	if err != nil {
		return nil, err
	}
	defRoot := filepath.Join(filepath.Dir(file), "database")
	prefix := "spider-" + stem(file)
	tasks := make([]Task, len(recs))
	for i, raw := range recs {
		var r spiderRecord
		if err := decodeRecord(file, i, raw, &r); err != nil {
			return nil, err
		}
		db, err := required(file, i, "db_id", r.DBID)
		if err != nil {
			return nil, err
		}
		if err := checkDBID(file, i, db); err != nil {
			return nil, err
		}
		if known != nil && !known[db] {
			return nil, fmt.Errorf("%s: record %d: db_id %q is not in tables.json", file, i, db)
		}
		q, err := required(file, i, "question", r.Question)
		if err != nil {
			return nil, err
		}
		gold, err := required(file, i, "query", r.Query)
		if err != nil {
			return nil, err
		}
		hardness := ""
		if len(r.SQL) > 0 && string(r.SQL) != "null" {
			if hardness, err = SpiderHardness(r.SQL); err != nil {
				return nil, fmt.Errorf("%s: record %d: field \"sql\": %w", file, i, err)
			}
		}
		tasks[i] = Task{
			ID: fmt.Sprintf("%s/%d", prefix, i), Index: i, DBID: db, Question: q,
			Gold: map[Dialect]string{SQLite: gold}, Difficulty: hardness,
			Source: "spider", DBPath: sqlitePath(dbRoot, defRoot, db),
		}
	}
	return tasks, nil
}

// spiderTables reads the db_ids of tables.json; nil, nil when the file is absent.
func spiderTables(path string) (map[string]bool, error) {
	recs, err := readRecords(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	known := make(map[string]bool, len(recs))
	for i, raw := range recs {
		var r struct {
			DBID *string `json:"db_id"`
		}
		if err := decodeRecord(path, i, raw, &r); err != nil {
			return nil, err
		}
		db, err := required(path, i, "db_id", r.DBID)
		if err != nil {
			return nil, err
		}
		known[db] = true
	}
	return known, nil
}

// SpiderHardness computes the official Spider hardness (easy, medium, hard, extra) of a parsed
// query in Spider's JSON "sql" form, as evaluation.py's Evaluator.eval_hardness does, quirks
// included (its aggregation count tests element 0 of each unit, so WHERE/HAVING condition units
// count when negated and HAVING's "and"/"or" connectives always count). Hand-written: there is no
// Go port of Spider's evaluation.
func SpiderHardness(sqlJSON []byte) (string, error) {
	var s spiderSQL
	if err := json.Unmarshal(sqlJSON, &s); err != nil {
		return "", err
	}
	c1, err := s.component1()
	if err != nil {
		return "", err
	}
	c2, err := s.component2()
	if err != nil {
		return "", err
	}
	co, err := s.others()
	if err != nil {
		return "", err
	}
	switch {
	case c1 <= 1 && co == 0 && c2 == 0:
		return SpiderEasy, nil
	case (co <= 2 && c1 <= 1 && c2 == 0) || (c1 <= 2 && co < 2 && c2 == 0):
		return SpiderMedium, nil
	case (co > 2 && c1 <= 2 && c2 == 0) || (2 < c1 && c1 <= 3 && co <= 2 && c2 == 0) || (c1 <= 1 && co == 0 && c2 <= 1):
		return SpiderHard, nil
	}
	return SpiderExtra, nil
}

// spiderSQL is the parsed-SQL structure of Spider's JSON; units stay generic JSON values.
type spiderSQL struct {
	From struct {
		TableUnits []any `json:"table_units"`
		Conds      []any `json:"conds"`
	} `json:"from"`
	Select    []any `json:"select"`
	Where     []any `json:"where"`
	GroupBy   []any `json:"groupBy"`
	Having    []any `json:"having"`
	OrderBy   []any `json:"orderBy"`
	Limit     any   `json:"limit"`
	Intersect any   `json:"intersect"`
	Union     any   `json:"union"`
	Except    any   `json:"except"`
}

// likeOp is WHERE_OPS.index('like') in Spider's process_sql.py.
const likeOp = 9

// every returns xs[start::2].
func every(xs []any, start int) []any {
	var out []any
	for i := start; i < len(xs); i += 2 {
		out = append(out, xs[i])
	}
	return out
}

// condUnits returns the condition units and the connectives of FROM, WHERE and HAVING.
func (s *spiderSQL) condUnits() (units [][]any, ops []any, err error) {
	for _, part := range [][]any{s.From.Conds, s.Where, s.Having} {
		for _, u := range every(part, 0) {
			l, ok := u.([]any)
			if !ok || len(l) < 5 {
				return nil, nil, fmt.Errorf("condition unit %v is not [not_op, op_id, val_unit, val1, val2]", u)
			}
			units = append(units, l)
		}
		ops = append(ops, every(part, 1)...)
	}
	return units, ops, nil
}

func (s *spiderSQL) component1() (int, error) {
	n := 0
	for _, part := range [][]any{s.Where, s.GroupBy, s.OrderBy} {
		if len(part) > 0 {
			n++
		}
	}
	if s.Limit != nil {
		n++
	}
	if len(s.From.TableUnits) > 0 {
		n += len(s.From.TableUnits) - 1
	}
	units, ops, err := s.condUnits()
	if err != nil {
		return 0, err
	}
	for _, op := range ops {
		if op == "or" {
			n++
		}
	}
	for _, u := range units {
		if f, ok := u[1].(float64); ok && f == likeOp {
			n++
		}
	}
	return n, nil
}

func (s *spiderSQL) component2() (int, error) {
	units, _, err := s.condUnits()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range units {
		for _, v := range u[3:5] {
			if _, ok := v.(map[string]any); ok {
				n++
			}
		}
	}
	for _, v := range []any{s.Intersect, s.Except, s.Union} {
		if v != nil {
			n++
		}
	}
	return n, nil
}

// hasAgg is evaluation.py's has_agg: unit[0] != AGG_OPS.index('none'), i.e. != 0 in Python terms
// (False == 0; a string's element 0 is a character, never 0).
func hasAgg(unit any) bool {
	switch u := unit.(type) {
	case string:
		return true
	case []any:
		if len(u) == 0 {
			return false
		}
		switch e := u[0].(type) {
		case bool:
			return e
		case float64:
			return e != 0
		}
		return true
	}
	return true
}

func countAgg(units []any) int {
	n := 0
	for _, u := range units {
		if hasAgg(u) {
			n++
		}
	}
	return n
}

func (s *spiderSQL) others() (int, error) {
	if len(s.Select) < 2 {
		return 0, fmt.Errorf("select %v is not [is_distinct, [agg_units]]", s.Select)
	}
	sel, ok := s.Select[1].([]any)
	if !ok {
		return 0, fmt.Errorf("select %v is not [is_distinct, [agg_units]]", s.Select)
	}
	agg := countAgg(sel) + countAgg(every(s.Where, 0)) + countAgg(s.GroupBy)
	if len(s.OrderBy) > 0 {
		if len(s.OrderBy) < 2 {
			return 0, fmt.Errorf("orderBy %v is not [direction, [val_units]]", s.OrderBy)
		}
		vus, ok := s.OrderBy[1].([]any)
		if !ok {
			return 0, fmt.Errorf("orderBy %v is not [direction, [val_units]]", s.OrderBy)
		}
		var first, second []any
		for _, vu := range vus {
			l, ok := vu.([]any)
			if !ok || len(l) < 3 {
				return 0, fmt.Errorf("val_unit %v is not [unit_op, col_unit1, col_unit2]", vu)
			}
			if truthy(l[1]) {
				first = append(first, l[1])
			}
			if truthy(l[2]) {
				second = append(second, l[2])
			}
		}
		agg += countAgg(append(first, second...))
	}
	agg += countAgg(s.Having)
	n := 0
	if agg > 1 {
		n++
	}
	if len(sel) > 1 {
		n++
	}
	if len(s.Where) > 1 {
		n++
	}
	if len(s.GroupBy) > 1 {
		n++
	}
	return n, nil
}

// truthy is Python truthiness of a JSON value.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}
