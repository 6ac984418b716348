package curate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/parquet-go/parquet-go"
)

// Dataset is a dataset directory opened for reading.
type Dataset struct {
	Dir string
	// Files are the Parquet shards, sorted (the row order).
	Files []string
	// NumRows is the row count from the shards' metadata.
	NumRows int64
	// Report is stats.json; nil when the directory has none.
	Report *BuildReport
}

// Open finds a dataset's shards (data/*.parquet) and reads stats.json when present.
func Open(dir string) (*Dataset, error) {
	files, err := filepath.Glob(filepath.Join(dir, DataDir, "*.parquet"))
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("dataset %s: no %s/*.parquet (is it a curate build output?)", dir, DataDir)
	}
	sort.Strings(files)
	d := &Dataset{Dir: dir, Files: files}
	for _, f := range files {
		n, err := countRows(f)
		if err != nil {
			return nil, err
		}
		d.NumRows += n
	}
	if _, err := os.Stat(filepath.Join(dir, StatsFile)); err == nil {
		if d.Report, err = ReadReport(dir); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func countRows(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return 0, fmt.Errorf("parquet %s: %w", path, err)
	}
	return pf.NumRows(), nil
}

// Rows streams every row in order to fn, reading a few hundred rows at a time. fn may keep the
// row it is given.
func (d *Dataset) Rows(ctx context.Context, fn func(*Row) error) error {
	for _, f := range d.Files {
		if err := readFile(ctx, f, fn); err != nil {
			return err
		}
	}
	return nil
}

// ReadRows opens the dataset at dir and streams its rows to fn.
func ReadRows(ctx context.Context, dir string, fn func(*Row) error) error {
	d, err := Open(dir)
	if err != nil {
		return err
	}
	return d.Rows(ctx, fn)
}

func readFile(ctx context.Context, path string, fn func(*Row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := parquet.NewGenericReader[Row](f)
	defer r.Close()
	buf := make([]Row, 128)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		clear(buf)
		n, err := r.Read(buf)
		for i := 0; i < n; i++ {
			row := buf[i]
			if ferr := fn(&row); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}
