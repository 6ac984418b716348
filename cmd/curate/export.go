package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"time"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/view"
)

var exportCmd = &cli.Command{
	Name:    "export",
	Summary: "write the rows of a dataset that a filter selects as Parquet (the dataset's schema) or JSONL",
	Args:    "DATASET_DIR",
	Help: `--where is the viewer's filter as its URL gives it (the part after "#/?" when a filter is set
in curate view), e.g. 'teacher=glm&correct=0&text=wait&in=reasoning', 'label=good', 'noted=1'
(rows with a note) or 'labelled=0' (rows without a label); sort, offset and limit are taken and
ignored, any other key is a usage error. Rows come in dataset order. A dataset
with notes and labels (its annotations.jsonl) exports two more columns, labels and note.`,
	Setup: setupExport,
}

func setupExport(fs *flag.FlagSet) cli.Func {
	where := fs.String("where", "", "filter in the viewer's URL form: teacher=A&dialect=B&correct=0&violations=some&turns_min=2&q=WORDS&text=WORDS&in=reasoning,sql,observation&label=L&noted=1&labelled=0 (empty: every row)")
	out := fs.String("out", "", "file to write: NAME.parquet or NAME.jsonl (required)")
	format := fs.String("format", "", "parquet or jsonl (default: from --out's extension)")
	return func(ctx context.Context, c *cli.Call) error {
		if *out == "" {
			return cli.Usagef("--out FILE is required")
		}
		v, err := url.ParseQuery(*where)
		if err != nil {
			return cli.Usagef("--where %q: %v", *where, err)
		}
		q, err := view.ParseQuery(v)
		if err != nil {
			return cli.Usagef("--where: %v", err)
		}
		f := *format
		if f == "" {
			if f, err = view.FormatOf(*out); err != nil {
				return cli.Usagef("--out %v", err)
			}
		}
		if f != view.FormatParquet && f != view.FormatJSONL {
			return cli.Usagef("--format %q: want %s or %s", f, view.FormatParquet, view.FormatJSONL)
		}
		began := time.Now()
		srv, err := view.Open(ctx, view.Options{Paths: c.Args, NoFullText: q.FullText == ""})
		if err != nil {
			return err
		}
		defer srv.Close()
		file, err := atomicfile.Create(*out, 0o644)
		if err != nil {
			return fmt.Errorf("create %s: %w", *out, err)
		}
		n, err := srv.Export(ctx, q, f, file)
		if err != nil {
			file.Abort()
			return err
		}
		if err := file.Commit(); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
		fmt.Fprintf(c.Stdout, "%s: %d of %d rows written to %s in %s\n", c.Name, n, srv.Rows(), *out, time.Since(began).Round(time.Millisecond))
		return nil
	}
}
