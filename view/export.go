package view

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/curate"
)

// Export formats.
const (
	// FormatParquet is a Parquet file with the dataset's schema (curate.Row), written by
	// curate's own writer.
	FormatParquet = "parquet"
	// FormatJSONL is one JSON object per row, with the Parquet column names as keys.
	FormatJSONL = "jsonl"
)

// FormatOf returns the export format a file name asks for by its extension.
func FormatOf(name string) (string, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".parquet":
		return FormatParquet, nil
	case ".jsonl":
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("%s: want a .parquet or .jsonl file name (or say --format)", name)
}

// Export writes every dataset row matching q (its filters; its order, offset and limit are
// left out: rows come in dataset order) to w in format, and returns how many. When a dataset
// has annotations (its AnnotationsFile), the rows are AnnotatedRows: two more columns, labels
// and note. A full-text
// query waits for the full-text index. Only datasets export: a run dir's trajectories have
// no token counts until curate build gives them some.
func (s *Server) Export(ctx context.Context, q Query, format string, w io.Writer) (int, error) {
	if s.kind != KindDataset {
		return 0, fmt.Errorf("export reads dataset dirs, not %s dirs (run curate build first)", s.kind)
	}
	if format != FormatParquet && format != FormatJSONL {
		return 0, fmt.Errorf("format %q: want %s or %s", format, FormatParquet, FormatJSONL)
	}
	if len(queryWords(q.FullText)) > 0 {
		if err := s.WaitSearch(ctx); err != nil {
			return 0, err
		}
	}
	text, err := s.preHits(q)
	if err != nil {
		return 0, err
	}
	q.Sort = ""
	s.ix.mu.RLock()
	hits, _ := s.ix.matches(q, text)
	// Ids follow (source, position): the positions of each source come out ascending.
	pos := make([][]int, len(s.datasets))
	for _, id := range hits {
		e := &s.ix.entries[id]
		pos[e.src] = append(pos[e.src], int(e.pos))
	}
	s.ix.mu.RUnlock()

	// With annotations (a dataset with its sidecar file), each row gets its labels and note.
	var snaps []map[string]Annotation
	annotated := false
	for _, a := range s.notes {
		m, exists := a.snapshot()
		snaps = append(snaps, m)
		annotated = annotated || exists
	}
	put, finish := exportWriter[curate.Row](w, format, func(_ int, r *curate.Row) curate.Row { return *r })
	if annotated {
		put, finish = exportWriter[AnnotatedRow](w, format, func(src int, r *curate.Row) AnnotatedRow {
			an := snaps[src][r.Key]
			if an.Labels == nil {
				an.Labels = []string{}
			}
			return AnnotatedRow{Row: *r, Labels: an.Labels, Note: an.Note}
		})
	}
	n := 0
	for src, d := range s.datasets {
		if err := d.rows(ctx, pos[src], func(r *curate.Row) error { n++; return put(src, r) }); err != nil {
			return n, err
		}
	}
	if err := finish(); err != nil {
		return n, fmt.Errorf("export: %w", err)
	}
	return n, nil
}

// AnnotatedRow is an exported row of an annotated dataset: curate.Row's columns, then the
// row's labels and note from the dataset's sidecar file (empty when it has none).
type AnnotatedRow struct {
	curate.Row
	Labels []string `parquet:"labels,list" json:"labels"`
	Note   string   `parquet:"note" json:"note"`
}

// exportWriter returns the functions writing rows of type T, made by conv from a dataset row
// of source src, to w in format, and finishing the file.
func exportWriter[T any](w io.Writer, format string, conv func(src int, r *curate.Row) T) (put func(int, *curate.Row) error, finish func() error) {
	if format == FormatParquet {
		pw := parquet.NewGenericWriter[T](w, curate.ParquetOptions(0)...)
		return func(src int, r *curate.Row) error { _, err := pw.Write([]T{conv(src, r)}); return err }, pw.Close
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return func(src int, r *curate.Row) error { return enc.Encode(conv(src, r)) }, bw.Flush
}

// rows reads the whole rows at the ascending positions, in order, giving each to fn: each row
// group holding one of them is read through, skipping ahead where the next wanted row is
// far.
func (d *dataset) rows(ctx context.Context, positions []int, fn func(*curate.Row) error) error {
	const far = 256
	buf := make([]curate.Row, 64)
	for _, df := range d.files {
		for g, rg := range df.pf.RowGroups() {
			start, end := df.groupStart[g], df.groupStart[g]+int(rg.NumRows())
			if len(positions) == 0 || positions[0] >= end {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			err := guard(func() error {
				r := parquet.NewGenericRowGroupReader[curate.Row](rg)
				defer r.Close()
				at := start // the position the reader is at
				for len(positions) > 0 && positions[0] < end {
					if p := positions[0]; p-at > far {
						if err := r.SeekToRow(int64(p - start)); err != nil {
							return err
						}
						at = p
					}
					clear(buf)
					n, err := r.Read(buf[:min(len(buf), end-at)])
					for k := 0; k < n; k++ {
						if len(positions) > 0 && positions[0] == at+k {
							positions = positions[1:]
							if err := fn(&buf[k]); err != nil {
								return err
							}
						}
					}
					at += n
					if n == 0 && err == nil {
						err = io.ErrUnexpectedEOF
					}
					if err != nil && (!errors.Is(err, io.EOF) || len(positions) > 0 && positions[0] < end) {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("read %s, row group %d: %w", df.path, g, err)
			}
		}
	}
	return nil
}

// handleExport streams the rows the page's filters select as a file download:
// /api/export?format=parquet|jsonl&FILTERS.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	// format is the export's own parameter; the rest is the Query.
	filters := r.URL.Query()
	format := filters.Get("format")
	filters.Del("format")
	q, err := ParseQuery(filters)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if format != FormatParquet && format != FormatJSONL {
		httpError(w, http.StatusBadRequest, fmt.Errorf("format=%q: want %s or %s", format, FormatParquet, FormatJSONL))
		return
	}
	if s.kind != KindDataset {
		httpError(w, http.StatusBadRequest, fmt.Errorf("export reads dataset dirs, not %s dirs", s.kind))
		return
	}
	if _, err := s.preHits(q); err != nil {
		httpError(w, searchErrorStatus(err), err)
		return
	}
	name := "export." + format
	if len(s.datasets) == 1 {
		name = filepath.Base(filepath.Clean(s.datasets[0].dir)) + "-export." + format
	}
	ctype := map[string]string{FormatParquet: "application/vnd.apache.parquet", FormatJSONL: "application/jsonl"}[format]
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	w.Header().Set("Cache-Control", "no-store")
	if _, err := s.Export(r.Context(), q, format, w); err != nil {
		// The status is sent: a broken download is all the client can be told. Cut the
		// connection so that it is not taken for a whole file.
		panic(http.ErrAbortHandler)
	}
}
