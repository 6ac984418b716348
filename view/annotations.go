package view

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// AnnotationsFile is the name of a dataset's sidecar file of row notes and labels, in the
// dataset dir beside dataset_card.md: one JSON object (Annotation) per annotated row, sorted
// by key. Keyed by row key, it applies as well to a rebuild of the same runs (copy it into the
// new dataset dir); lines whose key is not in the dataset stay in the file, unused.
const AnnotationsFile = "annotations.jsonl"

// Limits on one row's annotation.
const (
	MaxLabels   = 32
	MaxLabelLen = 100
	MaxNoteLen  = 64 << 10
)

// Annotation is a person's note and labels on one dataset row, keyed by the row's key column
// (distill's task|teacher|dialect|sample, unique in a dataset and the same in every build from
// the same runs, whatever the row order).
type Annotation struct {
	Key    string   `json:"key"`
	Labels []string `json:"labels"`
	Note   string   `json:"note"`
	// Rev counts the saves of the row's annotation: a save names the revision it was edited
	// from, so that one tab does not overwrite what another saved meanwhile.
	Rev     int       `json:"rev"`
	Updated time.Time `json:"updated"`
}

// empty reports whether the annotation says nothing (it is then left out of the file).
func (a *Annotation) empty() bool { return len(a.Labels) == 0 && a.Note == "" }

// errConflict is a save from a revision that is no longer the stored one.
var errConflict = errors.New("the row's annotation was changed meanwhile (another tab or viewer)")

// annotations is one dataset's sidecar file and what it holds. A save re-reads the file under
// the lock, so two viewers of one dataset see each other's saves and conflict on the same row
// rather than overwrite it; the file is replaced whole, atomically (atomicfile), so a reader or
// a crash sees the old or the new file, never a torn one.
type annotations struct {
	path string
	mu   sync.Mutex
	rows map[string]Annotation
	// exists: the file was there when read (or has been written since).
	exists bool
}

// loadAnnotations reads the sidecar file of dataset dir; a missing file is no annotations.
func loadAnnotations(dir string) (*annotations, error) {
	a := &annotations{path: filepath.Join(dir, AnnotationsFile)}
	if err := a.read(); err != nil {
		return nil, err
	}
	return a, nil
}

// read replaces the held annotations by the file's; the caller holds mu or owns a.
func (a *annotations) read() error {
	data, err := os.ReadFile(a.path)
	if errors.Is(err, fs.ErrNotExist) {
		a.rows, a.exists = map[string]Annotation{}, false
		return nil
	}
	if err != nil {
		return fmt.Errorf("annotations: %w", err)
	}
	rows := map[string]Annotation{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 4*MaxNoteLen+1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var an Annotation
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&an); err != nil {
			return fmt.Errorf("annotations %s:%d: %w", a.path, n, err)
		}
		if an.Key == "" {
			return fmt.Errorf("annotations %s:%d: no key", a.path, n)
		}
		if _, dup := rows[an.Key]; dup {
			return fmt.Errorf("annotations %s:%d: key %q twice", a.path, n, an.Key)
		}
		rows[an.Key] = an
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("annotations %s: %w", a.path, err)
	}
	a.rows, a.exists = rows, true
	return nil
}

// get returns the annotation of the row with key.
func (a *annotations) get(key string) (Annotation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	an, ok := a.rows[key]
	return an, ok
}

// snapshot returns every annotation by key (a map save replaces, never changes), and whether
// the file exists.
func (a *annotations) snapshot() (map[string]Annotation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rows, a.exists
}

// save stores an.Labels and an.Note (as cleanAnnotation gives them) for an.Key when the
// stored revision is an.Rev (0: none), and returns the stored annotation with its new
// revision (0 again when both are empty: the row leaves the file); errConflict and the stored
// one otherwise.
func (a *annotations) save(an Annotation) (Annotation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.read(); err != nil {
		return Annotation{}, err
	}
	cur, ok := a.rows[an.Key]
	if !ok {
		cur = Annotation{Key: an.Key, Labels: []string{}}
	}
	if cur.Rev != an.Rev {
		return cur, errConflict
	}
	next := Annotation{Key: an.Key, Labels: an.Labels, Note: an.Note, Rev: cur.Rev + 1, Updated: time.Now().UTC().Truncate(time.Second)}
	rows := maps.Clone(a.rows)
	if next.empty() {
		// The row leaves the file, so its revision is 0 again.
		delete(rows, an.Key)
		next.Rev = 0
	} else {
		rows[an.Key] = next
	}
	if err := writeAnnotations(a.path, rows); err != nil {
		return Annotation{}, err
	}
	a.rows, a.exists = rows, true
	return next, nil
}

// writeAnnotations replaces the file at path by rows, one per line, sorted by key.
func writeAnnotations(path string, rows map[string]Annotation) error {
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, k := range keys {
		if err := enc.Encode(rows[k]); err != nil {
			return fmt.Errorf("annotations: %w", err)
		}
	}
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("annotations: %w", err)
	}
	return nil
}

// cleanAnnotation trims the labels, drops empty and repeated ones, and checks the limits.
func cleanAnnotation(labels []string, note string) ([]string, string, error) {
	out := []string{}
	for _, l := range labels {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || slices.Contains(out, l):
			continue
		case !utf8.ValidString(l) || strings.IndexFunc(l, unicode.IsControl) >= 0:
			return nil, "", fmt.Errorf("label %q: control characters or invalid UTF-8", l)
		case utf8.RuneCountInString(l) > MaxLabelLen:
			return nil, "", fmt.Errorf("label %q…: over %d characters", string([]rune(l)[:20]), MaxLabelLen)
		}
		out = append(out, l)
	}
	if len(out) > MaxLabels {
		return nil, "", fmt.Errorf("%d labels: at most %d", len(out), MaxLabels)
	}
	if !utf8.ValidString(note) {
		return nil, "", errors.New("note: invalid UTF-8")
	}
	if len(note) > MaxNoteLen {
		return nil, "", fmt.Errorf("note of %d bytes: at most %d", len(note), MaxNoteLen)
	}
	if strings.TrimSpace(note) == "" {
		note = ""
	}
	return out, note, nil
}

// annotationOf returns the annotation of row e (a zero one with the key when there is none),
// and false when the row cannot carry one: not a dataset row, or a row without a key.
func (s *Server) annotationOf(e entry) (Annotation, bool) {
	if s.kind != KindDataset || e.key == "" || e.err != "" {
		return Annotation{}, false
	}
	an, ok := s.notes[e.src].get(e.key)
	if !ok {
		an = Annotation{Key: e.key, Labels: []string{}}
	}
	return an, true
}

// annotationRequest is the body of POST /api/annotate.
type annotationRequest struct {
	ID     *int     `json:"id"`
	Labels []string `json:"labels"`
	Note   string   `json:"note"`
	Rev    int      `json:"rev"`
}

// handleAnnotate saves a row's note and labels: POST /api/annotate with
// {"id": ROW, "labels": [...], "note": "...", "rev": REV}, REV the revision the page shows.
// It answers the stored annotation; 409 with the stored one when REV is no longer it.
func (s *Server) handleAnnotate(w http.ResponseWriter, r *http.Request) {
	var req annotationRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("annotation: want {\"id\": ROW, \"labels\": [...], \"note\": \"...\", \"rev\": N}: %w", err))
		return
	}
	if req.ID == nil {
		httpError(w, http.StatusBadRequest, errors.New("annotation: no row id"))
		return
	}
	if s.kind != KindDataset {
		httpError(w, http.StatusBadRequest, fmt.Errorf("annotations are kept beside a dataset, not a %s dir: run curate build and view the dataset", s.kind))
		return
	}
	e, ok := s.ix.get(*req.ID)
	if !ok {
		httpError(w, http.StatusNotFound, fmt.Errorf("row %d: %w (the index has %d rows)", *req.ID, errNoRow, s.ix.len()))
		return
	}
	if _, ok := s.annotationOf(e); !ok {
		httpError(w, http.StatusBadRequest, fmt.Errorf("row %d has no key to annotate it by", *req.ID))
		return
	}
	labels, note, err := cleanAnnotation(req.Labels, req.Note)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	an, err := s.notes[e.src].save(Annotation{Key: e.key, Labels: labels, Note: note, Rev: req.Rev})
	switch {
	case errors.Is(err, errConflict):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "annotation": an})
		return
	case err != nil:
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, an)
}

// annotated reports whether a row of the datasets has an annotation.
func (s *Server) annotated() bool {
	for _, a := range s.notes {
		if m, _ := a.snapshot(); len(m) > 0 {
			return true
		}
	}
	return false
}

// annotationHits is the bitmap of the rows whose annotation passes q's annotation filters
// (any of q.Labels, q.Noted, q.Labelled); nil when q has none. Rows of run and eval dirs,
// which take no annotations, count as having neither note nor label.
func (s *Server) annotationHits(q Query) []uint64 {
	if len(q.Labels) == 0 && q.Noted == nil && q.Labelled == nil {
		return nil
	}
	s.ix.mu.RLock()
	defer s.ix.mu.RUnlock()
	bits := make([]uint64, (len(s.ix.entries)+63)/64)
	snaps := make([]map[string]Annotation, len(s.notes))
	for i, a := range s.notes {
		snaps[i], _ = a.snapshot()
	}
	for id := range s.ix.entries {
		e := &s.ix.entries[id]
		var an Annotation
		if s.kind == KindDataset && e.key != "" {
			an = snaps[e.src][e.key]
		}
		if annotationPasses(q, an) {
			bits[id/64] |= 1 << (id % 64)
		}
	}
	return bits
}

// annotationPasses reports whether a row annotated an passes q's annotation filters.
func annotationPasses(q Query, an Annotation) bool {
	if len(q.Labels) > 0 && !slices.ContainsFunc(an.Labels, func(l string) bool { return slices.Contains(q.Labels, l) }) {
		return false
	}
	if q.Noted != nil && *q.Noted != (an.Note != "") {
		return false
	}
	return q.Labelled == nil || *q.Labelled == (len(an.Labels) > 0)
}

// labelCounts counts the labels of the rows hits (every label of the annotations, 0 for those
// no hit has), sorted by label; nil when no row of the datasets has an annotation. The caller
// holds s.ix.mu.
func (s *Server) labelCounts(hits []int32) []FacetCount {
	if s.kind != KindDataset {
		return nil
	}
	snaps := make([]map[string]Annotation, len(s.notes))
	any := false
	for i, a := range s.notes {
		snaps[i], _ = a.snapshot()
		any = any || len(snaps[i]) > 0
	}
	if !any {
		return nil
	}
	counts := map[string]int{}
	for _, an := range snaps {
		for _, a := range an {
			for _, l := range a.Labels {
				counts[l] += 0
			}
		}
	}
	for _, id := range hits {
		e := &s.ix.entries[id]
		if an, ok := snaps[e.src][e.key]; ok && e.key != "" {
			for _, l := range an.Labels {
				counts[l]++
			}
		}
	}
	out := make([]FacetCount, 0, len(counts))
	for l, n := range counts {
		out = append(out, FacetCount{Value: l, Count: n})
	}
	slices.SortFunc(out, func(a, b FacetCount) int { return strings.Compare(a.Value, b.Value) })
	return out
}

// intersect is the intersection of two row bitmaps, nil standing for every row.
func intersect(a, b []uint64) []uint64 {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := make([]uint64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] & b[i]
	}
	return out
}
