package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/rundir"
)

// Kind is what a PATH given to the viewer holds.
type Kind string

// Kinds of PATH.
const (
	// KindDataset is a curate build output: data/*.parquet.
	KindDataset Kind = "dataset"
	// KindRun is a distill run dir: manifest.json, journal, shards/.
	KindRun Kind = "run"
	// KindEval is a student eval dir: a run dir of one policy plus summary.json, results.jsonl.
	KindEval Kind = "eval"
)

// Detect says which kind of directory path is, or why it is none of them.
func Detect(path string) (Kind, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is a file, not a dataset dir (data/*.parquet), a run dir or an eval dir", path)
	}
	if files, _ := filepath.Glob(filepath.Join(path, curate.DataDir, "*.parquet")); len(files) > 0 {
		return KindDataset, nil
	}
	if _, err := os.Stat(filepath.Join(path, rundir.ManifestFile)); err == nil {
		// An eval dir gets its summary and results at the end of each invocation; during the
		// first one it looks like a run dir, and is shown as one.
		for _, f := range []string{evaluate.SummaryFile, evaluate.ResultsFile} {
			if _, err := os.Stat(filepath.Join(path, f)); err == nil {
				return KindEval, nil
			}
		}
		return KindRun, nil
	}
	return "", fmt.Errorf("%s is not a dataset dir (no %s/*.parquet), a run dir or an eval dir (no %s)", path, curate.DataDir, rundir.ManifestFile)
}

// detectAll checks that every path is of one kind and returns it. Run dirs given with eval
// dirs are eval dirs still in their first invocation (Detect cannot tell them from a distill
// run until summary.json is written), so a live evaluation can be compared with finished ones.
func detectAll(paths []string) (Kind, error) {
	if len(paths) == 0 {
		return "", errors.New("no PATH given: a dataset dir, a run dir or eval dirs")
	}
	var kind Kind
	first := ""
	article := map[Kind]string{KindDataset: "a", KindRun: "a", KindEval: "an"}
	for _, p := range paths {
		k, err := Detect(p)
		if err != nil {
			return "", err
		}
		switch {
		case kind == "":
			kind, first = k, p
		case k == KindRun && kind == KindEval:
		case k == KindEval && kind == KindRun:
			kind = KindEval
		case k != kind:
			return "", fmt.Errorf("%s is %s %s dir but %s is %s %s dir: give PATHs of one kind", first, article[kind], kind, p, article[k], k)
		}
	}
	return kind, nil
}
