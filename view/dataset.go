package view

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/rundir"
)

// indexRow is the projection of curate.Row that the index reads: every column but messages
// and reasoning, which hold nearly all the bytes. Its tags must name curate.Row's columns
// with the same types (TestIndexRowMatchesSchema checks).
type indexRow struct {
	Teacher          string `parquet:"teacher"`
	Model            string `parquet:"model"`
	Dialect          string `parquet:"dialect"`
	DBID             string `parquet:"db_id"`
	TaskID           string `parquet:"task_id"`
	TaskIndex        int64  `parquet:"task_index"`
	Sample           int64  `parquet:"sample"`
	Difficulty       string `parquet:"difficulty"`
	Question         string `parquet:"question"`
	Turns            int64  `parquet:"turns"`
	Converged        bool   `parquet:"converged"`
	ExecOK           bool   `parquet:"exec_ok"`
	Correct          bool   `parquet:"correct"`
	FormatViolations int64  `parquet:"format_violations"`
	// TruncatedTurns is absent from datasets built before run-dir format v2 (read as 0;
	// dataset.truncKnown says whether every shard has it).
	TruncatedTurns int64 `parquet:"truncated_turns"`
	// MalformedTurns is absent from datasets built before the column (read as 0).
	MalformedTurns int64  `parquet:"malformed_turns"`
	NumTokens      int64  `parquet:"num_tokens"`
	NumTrainable   int64  `parquet:"num_trainable_tokens"`
	FinalSQL       string `parquet:"final_sql"`
	GoldSQL        string `parquet:"gold_sql"`
	// GoldError is absent from datasets before chainedsql-sft/v5 (read as "": judged).
	GoldError string `parquet:"gold_error"`
	SourceRun string `parquet:"source_run"`
	Key       string `parquet:"key"`
}

// truncatedColumn is the dataset column counting a row's truncated turns.
const truncatedColumn = "truncated_turns"

// datasetFile is one open Parquet shard.
type datasetFile struct {
	path string
	f    *os.File
	pf   *parquet.File
	// groupStart[g] is the dataset-wide index of row group g's first row.
	groupStart []int
}

// dataset is an opened dataset dir. curate.Open finds and validates the shards; the viewer
// keeps them open to read single rows by position, which curate's streaming reader does not
// offer (the run-dir readers are consolidated in one package later, issue 18; this belongs
// with them).
type dataset struct {
	dir    string
	ds     *curate.Dataset
	files  []*datasetFile
	report *curate.BuildReport
	// truncKnown: every shard has the truncated_turns column.
	truncKnown bool
}

func openDataset(dir string) (*dataset, error) {
	ds, err := curate.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot open dataset %s: %w", dir, err)
	}
	d := &dataset{dir: dir, ds: ds, report: ds.Report, truncKnown: true}
	next := 0
	for _, path := range ds.Files {
		f, err := os.Open(path)
		if err != nil {
			d.close()
			return nil, err
		}
		df := &datasetFile{path: path, f: f}
		d.files = append(d.files, df)
		st, err := f.Stat()
		if err == nil {
			df.pf, err = parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
		}
		if err != nil {
			d.close()
			return nil, fmt.Errorf("damaged Parquet file %s: %w", path, err)
		}
		if _, ok := df.pf.Schema().Lookup(truncatedColumn); !ok {
			d.truncKnown = false
		}
		for _, rg := range df.pf.RowGroups() {
			df.groupStart = append(df.groupStart, next)
			next += int(rg.NumRows())
		}
	}
	return d, nil
}

func (d *dataset) close() {
	for _, f := range d.files {
		f.f.Close()
	}
}

// scan reads the columns of T of every row in order, giving each row to fn. The rows of a row
// group whose columns do not decode, from the first one not read, go to bad with the error
// (naming the file and group), and the scan goes on with the next group: those rows show
// their error, the rest of the dataset still works.
// T is a projection of curate.Row (indexRow, textRow).
func scan[T any](ctx context.Context, d *dataset, fn func(i int, r *T), bad func(i int, err error)) error {
	buf := make([]T, 256)
	for _, df := range d.files {
		for g, rg := range df.pf.RowGroups() {
			if err := ctx.Err(); err != nil {
				return err
			}
			i := df.groupStart[g]
			end := i + int(rg.NumRows())
			err := guard(func() error {
				r := parquet.NewGenericRowGroupReader[T](rg)
				defer r.Close()
				for {
					clear(buf)
					n, err := r.Read(buf)
					for k := 0; k < n; k++ {
						fn(i, &buf[k])
						i++
					}
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						return err
					}
				}
			})
			if err != nil {
				err = fmt.Errorf("damaged Parquet file %s, row group %d: %w", df.path, g, err)
				for ; i < end; i++ {
					bad(i, err)
				}
			}
		}
	}
	return nil
}

// row reads the whole row at dataset position i.
func (d *dataset) row(i int) (*curate.Row, error) {
	for _, df := range d.files {
		for g, rg := range df.pf.RowGroups() {
			start := df.groupStart[g]
			if i < start || i >= start+int(rg.NumRows()) {
				continue
			}
			var out curate.Row
			err := guard(func() error {
				r := parquet.NewGenericRowGroupReader[curate.Row](rg)
				defer r.Close()
				if err := r.SeekToRow(int64(i - start)); err != nil {
					return err
				}
				rows := make([]curate.Row, 1)
				n, err := r.Read(rows)
				if n == 1 {
					out = rows[0]
					return nil
				}
				if err == nil || errors.Is(err, io.EOF) {
					err = errors.New("no row there")
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("row %d (%s, row group %d): %w", i, filepath.Base(df.path), g, err)
			}
			return &out, nil
		}
	}
	return nil, fmt.Errorf("row %d: out of range", i)
}

// guard runs fn, turning a panic of the Parquet decoder on damaged bytes into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cannot decode: %v", p)
		}
	}()
	return fn()
}

// outcome returns the row's outcome as curate.Row.Outcome reads it.
func (r *indexRow) outcome() rundir.Outcome {
	return rundir.NewOutcome(r.Converged, r.ExecOK, r.Correct, int(r.Turns), int(r.FormatViolations), int(r.TruncatedTurns), int(r.MalformedTurns), r.GoldError)
}
