package view

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Facets: the categorical columns the table filters on, with their value counts.
const (
	facetTeacher = iota
	facetDialect
	facetDifficulty
	facetDB
	nFacets
)

var facetNames = [nFacets]string{"teacher", "dialect", "difficulty", "db_id"}

// Entry flags.
const (
	flagConverged = 1 << iota
	flagExecOK
	flagCorrect
	flagTruncated
	// flagUnjudged: the row's outcome is unjudged (rundir.Outcome.Unjudged: its gold SQL gave
	// no result).
	flagUnjudged
)

// entry is what the index keeps of one row: the filterable values, a lowercased search text
// and where the whole row is (source and position in it). About 100 bytes plus the texts.
type entry struct {
	src, pos   int32
	facet      [nFacets]uint16
	turns      int16
	violations int16
	flags      uint8
	tokens     int32
	trainable  int32
	taskIndex  int32
	sample     int32
	key        string
	taskID     string
	question   string
	finalSQL   string
	// search is question, final SQL, gold SQL, db_id and key, lowercased, joined by "\x00".
	search string
	// err is set for a row that could not be read; it matches only unfiltered queries.
	err string
}

// facet interns the values of one categorical column.
type facet struct {
	names []string
	ids   map[string]uint16
}

// lumpedValues names the last id of a facet with more distinct values than ids: every value
// from there on shares it.
const lumpedValues = "(further values)"

func (f *facet) id(s string) uint16 {
	if id, ok := f.ids[s]; ok {
		return id
	}
	if len(f.names) == 1<<16-1 {
		return f.ids[lumpedValues]
	}
	if len(f.names) == 1<<16-2 {
		s = lumpedValues
	}
	id := uint16(len(f.names))
	f.names = append(f.names, s)
	f.ids[s] = id
	return id
}

// index holds the entries of every row, appended as rows are read (a live run grows it), and
// answers filtered, sorted, paged queries by scanning them: 75,858 rows scan in a few
// milliseconds (docs/BENCHMARKS.md), so no per-column structures are kept.
type index struct {
	mu      sync.RWMutex
	entries []entry
	facets  [nFacets]facet
	// version counts additions, for caches of derived pages.
	version int64
	// truncKnown is false when the rows carry no truncation mark (datasets built before the
	// truncated_turns column), so the filter is not offered.
	truncKnown bool
}

func newIndex() *index {
	ix := &index{}
	for i := range ix.facets {
		ix.facets[i].ids = map[string]uint16{}
	}
	return ix
}

// rowValues are the values of one row as the sources give them to the index.
type rowValues struct {
	teacher, dialect, difficulty, db string
	turns, violations                int
	converged, execOK, correct       bool
	unjudged, truncated              bool
	tokens, trainable                int
	taskIndex, sample                int
	key, taskID, question            string
	finalSQL, goldSQL                string
}

// add appends one row and returns its id.
func (ix *index) add(src, pos int, v rowValues) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e := entry{
		src: int32(src), pos: int32(pos), turns: int16(min(v.turns, 1<<15-1)), violations: int16(min(v.violations, 1<<15-1)),
		tokens: int32(v.tokens), trainable: int32(v.trainable), taskIndex: int32(v.taskIndex), sample: int32(v.sample),
		key: v.key, taskID: v.taskID, question: v.question, finalSQL: v.finalSQL,
		search: strings.ToLower(strings.Join([]string{v.question, v.finalSQL, v.goldSQL, v.db, v.key}, "\x00")),
	}
	e.facet[facetTeacher] = ix.facets[facetTeacher].id(v.teacher)
	e.facet[facetDialect] = ix.facets[facetDialect].id(v.dialect)
	e.facet[facetDifficulty] = ix.facets[facetDifficulty].id(v.difficulty)
	e.facet[facetDB] = ix.facets[facetDB].id(v.db)
	if v.converged {
		e.flags |= flagConverged
	}
	if v.execOK {
		e.flags |= flagExecOK
	}
	if v.correct {
		e.flags |= flagCorrect
	}
	if v.truncated {
		e.flags |= flagTruncated
	}
	if v.unjudged {
		e.flags |= flagUnjudged
	}
	ix.entries = append(ix.entries, e)
	ix.version++
	return len(ix.entries) - 1
}

// addError appends a row that could not be read, with the reason.
func (ix *index) addError(src, pos int, key, err string) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e := entry{src: int32(src), pos: int32(pos), key: key, err: err}
	for f := range e.facet {
		e.facet[f] = ix.facets[f].id("")
	}
	ix.entries = append(ix.entries, e)
	ix.version++
	return len(ix.entries) - 1
}

// get returns the entry with id i.
func (ix *index) get(i int) (entry, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if i < 0 || i >= len(ix.entries) {
		return entry{}, false
	}
	return ix.entries[i], true
}

func (ix *index) len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.entries)
}

// Query is a table request: filters, text search, order and page.
type Query struct {
	// Facet values to keep (any of them), per facet; nil keeps all. In URLs a facet's name is
	// repeated once per value (teacher=a&teacher=b).
	Facets [nFacets][]string
	// Tri-state flags: nil any, else the wanted value. Unjudged (URL: unjudged) keeps the rows
	// whose gold SQL gave no result (1), or those judged (0).
	Converged, ExecOK, Correct, Unjudged, Truncated *bool
	// Violations: "" any, "none" or "some".
	Violations string
	// Turns and Tokens ranges, inclusive; 0 is open.
	TurnsMin, TurnsMax, TokensMin, TokensMax int
	// Text: every word (or "quoted phrase") must occur, ignoring case, in the question, the
	// final SQL, the gold SQL, db_id or the key.
	Text string
	// FullText (URL: text): every word must begin a word of the messages' fields In (URL: in,
	// comma-separated; empty: all), through the full-text index (textIndex).
	FullText string
	In       []int
	// Labels (URL: label, repeated): keep the rows annotated with any of them.
	Labels []string
	// Noted and Labelled (URL: noted, labelled; 1 or 0) keep the rows with or without a note,
	// with or without a label; nil any.
	Noted, Labelled *bool
	// Sort is a column of RowSummary by its JSON name (id, teacher, …, tokens, trainable), "-"
	// before it for descending order; "" is row order.
	Sort          string
	Offset, Limit int
}

// MaxLimit bounds Query.Limit.
const MaxLimit = 500

// queryKeys are the URL parameters a Query is read from (the names of the page's filter
// controls, then its order and page), in the order the README lists them.
var queryKeys = []string{
	facetNames[facetTeacher], facetNames[facetDialect], facetNames[facetDifficulty], facetNames[facetDB],
	"converged", "exec_ok", "correct", "unjudged", "truncated", "violations",
	"turns_min", "turns_max", "tokens_min", "tokens_max",
	"q", "text", "in", "label", "noted", "labelled",
	"sort", "offset", "limit",
}

// ParseQuery reads a Query from URL parameters (the names of the page's filter controls). A
// parameter that is not one of queryKeys is an error naming it, so that a misspelt filter
// does not select every row.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	if err := checkKeys(v, queryKeys); err != nil {
		return q, err
	}
	for f, name := range facetNames {
		if vals := v[name]; len(vals) > 0 {
			q.Facets[f] = vals
		}
	}
	tri := func(name string) (*bool, error) {
		switch v.Get(name) {
		case "":
			return nil, nil
		case "1", "true", "yes":
			t := true
			return &t, nil
		case "0", "false", "no":
			f := false
			return &f, nil
		}
		return nil, fmt.Errorf("%s=%q: want 1 or 0", name, v.Get(name))
	}
	var err error
	if q.Converged, err = tri("converged"); err != nil {
		return q, err
	}
	if q.ExecOK, err = tri("exec_ok"); err != nil {
		return q, err
	}
	if q.Correct, err = tri("correct"); err != nil {
		return q, err
	}
	if q.Unjudged, err = tri("unjudged"); err != nil {
		return q, err
	}
	if q.Truncated, err = tri("truncated"); err != nil {
		return q, err
	}
	if q.Noted, err = tri("noted"); err != nil {
		return q, err
	}
	if q.Labelled, err = tri("labelled"); err != nil {
		return q, err
	}
	switch q.Violations = v.Get("violations"); q.Violations {
	case "", "none", "some":
	default:
		return q, fmt.Errorf("violations=%q: want none or some", q.Violations)
	}
	ints := []struct {
		name string
		dst  *int
	}{{"turns_min", &q.TurnsMin}, {"turns_max", &q.TurnsMax}, {"tokens_min", &q.TokensMin}, {"tokens_max", &q.TokensMax}, {"offset", &q.Offset}, {"limit", &q.Limit}}
	for _, it := range ints {
		if *it.dst, err = wholeNumber(v, it.name); err != nil {
			return q, err
		}
	}
	if q.Limit == 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, MaxLimit)
	if q.Sort = v.Get("sort"); q.Sort != "" {
		if _, ok := sortKeys[strings.TrimPrefix(q.Sort, "-")]; !ok {
			return q, fmt.Errorf("sort=%q: want a column (%s), - before it for descending order", q.Sort, strings.Join(sortColumns(), ", "))
		}
	}
	q.Text = v.Get("q")
	q.Labels = v["label"]
	q.FullText = v.Get("text")
	if q.In, err = parseFields(v.Get("in")); err != nil {
		return q, err
	}
	return q, nil
}

// checkKeys returns an error naming the first parameter of v (in sorted order) that is not
// one of keys, with the closest key when one is a likely misspelling, and the keys.
func checkKeys(v url.Values, keys []string) error {
	var unknown []string
	for k := range v {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	k := unknown[0]
	hint := ""
	if near := closest(k, keys); near != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", near)
	}
	return fmt.Errorf("unknown key %q%s: want %s", k, hint, strings.Join(keys, ", "))
}

// closest is the key of keys nearest to s by edit distance when it is a likely misspelling of
// it (at most 2 edits, fewer than half of s's length), else "".
func closest(s string, keys []string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(s, k); d < bestD && 2*d < len(s) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, over bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// wholeNumber reads parameter name as a number >= 0 (0 when absent).
func wholeNumber(v url.Values, name string) (int, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a whole number >= 0", name, s)
	}
	return n, nil
}

// RowSummary is one row of the table.
type RowSummary struct {
	ID         int    `json:"id"`
	Key        string `json:"key"`
	Teacher    string `json:"teacher"`
	Dialect    string `json:"dialect"`
	Difficulty string `json:"difficulty"`
	DBID       string `json:"db_id"`
	TaskID     string `json:"task_id"`
	Question   string `json:"question"`
	Turns      int    `json:"turns"`
	Converged  bool   `json:"converged"`
	ExecOK     bool   `json:"exec_ok"`
	Correct    bool   `json:"correct"`
	// Unjudged: the row's gold SQL gave no result, so it could not be correct.
	Unjudged   bool   `json:"unjudged,omitempty"`
	Violations int    `json:"format_violations"`
	Truncated  bool   `json:"truncated"`
	Tokens     int    `json:"tokens"`
	Trainable  int    `json:"trainable"`
	Error      string `json:"error,omitempty"`
	// Labels and Noted are the row's annotation: its labels, and whether it has a note.
	Labels []string `json:"labels,omitempty"`
	Noted  bool     `json:"noted,omitempty"`
}

// FacetCount is one facet value and how many matching rows have it.
type FacetCount struct {
	Value string `json:"value"`
	Count int    `json:"count"`
}

// Page is the answer to a Query.
type Page struct {
	Total  int          `json:"total"`
	All    int          `json:"all"`
	Offset int          `json:"offset"`
	Rows   []RowSummary `json:"rows"`
	// Facets counts, per facet, the matching rows of each value when that facet's own filter
	// is left out (so the choices that would widen the selection stay visible).
	Facets map[string][]FacetCount `json:"facets"`
	// Labels counts the matching rows of each label of the dataset's annotations, the label
	// filter left out; absent when no row has a label.
	Labels []FacetCount `json:"labels,omitempty"`
}

// searchTerms splits a search into lowercased words and "quoted phrases".
func searchTerms(text string) []string {
	var terms []string
	for i, part := range strings.Split(strings.ToLower(text), `"`) {
		if i%2 == 1 {
			if p := strings.TrimSpace(part); p != "" {
				terms = append(terms, p)
			}
			continue
		}
		terms = append(terms, strings.Fields(part)...)
	}
	return terms
}

// compiled is a Query with its facet values resolved to ids.
type compiled struct {
	q     Query
	words []string
	keep  [nFacets][]bool // nil: any
	// text is the bitmap of the rows the full-text query matches; nil: no such query.
	text []uint64
}

func (ix *index) compile(q Query, text []uint64) compiled {
	c := compiled{q: q, words: searchTerms(q.Text), text: text}
	for f, vals := range q.Facets {
		if vals == nil {
			continue
		}
		keep := make([]bool, len(ix.facets[f].names))
		for _, v := range vals {
			if id, ok := ix.facets[f].ids[v]; ok {
				keep[id] = true
			}
		}
		c.keep[f] = keep
	}
	return c
}

// match reports whether e, row id, passes every filter except facet skip (-1: none skipped).
func (c *compiled) match(id int, e *entry, skip int) bool {
	for f := range c.keep {
		if f != skip && c.keep[f] != nil && !c.keep[f][e.facet[f]] {
			return false
		}
	}
	q := &c.q
	if e.err != "" {
		// An unreadable row has no values to filter on: it shows only when nothing filters.
		return q.Converged == nil && q.ExecOK == nil && q.Correct == nil && q.Unjudged == nil && q.Truncated == nil && q.Violations == "" &&
			q.TurnsMin == 0 && q.TurnsMax == 0 && q.TokensMin == 0 && q.TokensMax == 0 && len(c.words) == 0 && c.text == nil
	}
	if c.text != nil && (id/64 >= len(c.text) || c.text[id/64]&(1<<(id%64)) == 0) {
		return false
	}
	flag := func(want *bool, bit uint8) bool { return want == nil || *want == (e.flags&bit != 0) }
	if !flag(q.Converged, flagConverged) || !flag(q.ExecOK, flagExecOK) || !flag(q.Correct, flagCorrect) || !flag(q.Unjudged, flagUnjudged) ||
		!flag(q.Truncated, flagTruncated) {
		return false
	}
	switch q.Violations {
	case "none":
		if e.violations != 0 {
			return false
		}
	case "some":
		if e.violations == 0 {
			return false
		}
	}
	if (q.TurnsMin > 0 && int(e.turns) < q.TurnsMin) || (q.TurnsMax > 0 && int(e.turns) > q.TurnsMax) {
		return false
	}
	if (q.TokensMin > 0 && int(e.tokens) < q.TokensMin) || (q.TokensMax > 0 && int(e.tokens) > q.TokensMax) {
		return false
	}
	for _, w := range c.words {
		if !strings.Contains(e.search, w) {
			return false
		}
	}
	return true
}

// Query answers q; text is the full-text match of q.FullText (nil: none).
func (ix *index) Query(q Query, text []uint64) Page {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	hits, counts := ix.matches(q, text)
	p := Page{Total: len(hits), All: len(ix.entries), Offset: q.Offset, Rows: []RowSummary{}, Facets: map[string][]FacetCount{}}
	for _, i := range pageOf(hits, q.Offset, q.Limit) {
		p.Rows = append(p.Rows, ix.summary(int(i)))
	}
	for f, cs := range counts {
		var fc []FacetCount
		for id, n := range cs {
			fc = append(fc, FacetCount{Value: ix.facets[f].names[id], Count: n})
		}
		slices.SortFunc(fc, func(a, b FacetCount) int { return strings.Compare(a.Value, b.Value) })
		p.Facets[facetNames[f]] = fc
	}
	return p
}

// matches returns the ids of the rows matching q in its order, and the facet counts; the
// caller holds ix.mu.
func (ix *index) matches(q Query, text []uint64) ([]int32, [nFacets][]int) {
	c := ix.compile(q, text)
	var hits []int32
	var counts [nFacets][]int
	for f := range counts {
		counts[f] = make([]int, len(ix.facets[f].names))
	}
	for i := range ix.entries {
		e := &ix.entries[i]
		if c.match(i, e, -1) {
			hits = append(hits, int32(i))
			for f := range counts {
				counts[f][e.facet[f]]++
			}
			continue
		}
		// A row failing only one facet filter still counts for that facet's choices.
		for f := range counts {
			if c.keep[f] != nil && !c.keep[f][e.facet[f]] && c.match(i, e, f) {
				counts[f][e.facet[f]]++
			}
		}
	}
	ix.sortHits(hits, q.Sort)
	return hits, counts
}

// pageOf is s[offset:offset+limit] clipped to s, for any offset and limit >= 0 (a huge offset
// from a URL must not overflow into a negative bound).
func pageOf[T any](s []T, offset, limit int) []T {
	lo := min(offset, len(s))
	return s[lo : lo+min(limit, len(s)-lo)]
}

func (ix *index) summary(i int) RowSummary {
	e := &ix.entries[i]
	name := func(f int) string { return ix.facets[f].names[e.facet[f]] }
	return RowSummary{
		ID: i, Key: e.key, Teacher: name(facetTeacher), Dialect: name(facetDialect), Difficulty: name(facetDifficulty),
		DBID: name(facetDB), TaskID: e.taskID, Question: e.question, Turns: int(e.turns),
		Converged: e.flags&flagConverged != 0, ExecOK: e.flags&flagExecOK != 0, Correct: e.flags&flagCorrect != 0,
		Unjudged: e.flags&flagUnjudged != 0, Truncated: e.flags&flagTruncated != 0, Violations: int(e.violations), Tokens: int(e.tokens), Trainable: int(e.trainable),
		Error: e.err,
	}
}
