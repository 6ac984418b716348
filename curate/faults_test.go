//go:build faults

package curate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chainedsql/chainedsql/internal/testbin"
)

// Crash safety of Build (issue 8): run with `go test -tags faults -run '^TestFaults' ./curate`.

const (
	faultTrajectories = 3000
	faultRowsPerShard = 400
	faultRowGroupRows = 100
	faultKills        = 24
)

func faultOptions(tok Tokenizer, out string) BuildOptions {
	return BuildOptions{Tokenizer: tok, TokenizerName: "qwen2.5", Out: out, RowsPerShard: faultRowsPerShard, RowGroupRows: faultRowGroupRows}
}

// TestFaultsCurateKillChild is the child process of TestFaultsCurateKill (it does nothing in a
// normal run): it builds $CURATE_KILL_RUN into $CURATE_KILL_OUT.
func TestFaultsCurateKillChild(t *testing.T) {
	run, out := os.Getenv("CURATE_KILL_RUN"), os.Getenv("CURATE_KILL_OUT")
	if run == "" || out == "" {
		t.Skip("child of TestFaultsCurateKill only")
	}
	if _, err := Build(context.Background(), []string{run}, faultOptions(loadTokenizer(t), out)); err != nil {
		t.Fatal(err)
	}
}

// TestFaultsCurateKill SIGKILLs a process running Build at random moments. After each kill the
// output is either absent or a complete dataset identical to an uninterrupted build, and the
// only other thing beside it is a temporary directory that the next build removes; the final
// rerun gives byte-identical files and leaves no temporary directory.
func TestFaultsCurateKill(t *testing.T) {
	if os.Getenv("CURATE_KILL_RUN") != "" {
		t.Skip("in the child")
	}
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	runDir := filepath.Join(tmp, "run")
	synthRun(t, runDir, faultTrajectories, 8, 500)
	ref := filepath.Join(tmp, "ref", "ds")
	if err := os.Mkdir(filepath.Dir(ref), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), []string{runDir}, faultOptions(tok, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)

	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "ds")
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFaultsCurateKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CURATE_KILL_RUN="+runDir, "CURATE_KILL_OUT="+out)
		return cmd
	}
	// Uncut child runs: how long a build takes in a fresh process (the shortest of three, and
	// shorter still when a child finishes before its kill: the first ran while go test was still
	// compiling other packages, several times slower), and that it gives the same bytes as the
	// in-process build.
	full := testbin.Shortest(3, func() {
		if b, err := child().CombinedOutput(); err != nil {
			t.Fatalf("uncut child: %v\n%s", err, b)
		}
		sameTree(t, "uncut child build", readTree(t, out), want)
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
	})

	rng := rand.New(rand.NewPCG(20, 26))
	var kills, absent, complete, midWrite int
	for attempt := 0; kills < faultKills && attempt < 3*faultKills; attempt++ {
		before := tempDirs(t, work, "ds")
		cmd := child()
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(full) * 5 / 4)))
		cmd.Process.Kill()
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && !ee.Exited() {
			kills++
		} else if err == nil {
			full = min(full, time.Since(began))
		}
		switch st := checkAfterKill(t, work, "ds", want, before); st {
		case "absent":
			absent++
		case "complete":
			complete++
			// Killed after the rename: take the dataset away so the next run builds again.
			if err := os.RemoveAll(out); err != nil {
				t.Fatal(err)
			}
		case "mid-write":
			absent++
			midWrite++
		}
	}
	if kills < faultKills {
		t.Fatalf("only %d of the runs were killed before they finished", kills)
	}
	if midWrite == 0 {
		t.Fatal("no kill landed while Parquet files were being written: the test proved little")
	}
	if b, err := child().CombinedOutput(); err != nil {
		t.Fatalf("final rerun: %v\n%s", err, b)
	}
	sameTree(t, "final rerun", readTree(t, out), want)
	ents, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "ds" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("beside the dataset after the final rerun: %v, want only ds", names)
	}
	t.Logf("%d trajectories, uncut build in a child %v; %d kills: %d left no dataset (%d of them mid-way through the Parquet files), %d after the dataset was in place; final rerun byte-identical",
		faultTrajectories, full.Round(time.Millisecond), kills, absent, midWrite, complete)
}

// tempDirs lists the build's temporary directories in dir.
func tempDirs(t *testing.T, dir, name string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "."+name+".curate-") {
			m[e.Name()] = true
		}
	}
	return m
}

// checkAfterKill inspects dir after a killed build into dir/name: "absent" (no dataset, no
// Parquet file outside temporary directories), "mid-write" (the same, with a temporary
// directory of this run, not in earlier, holding Parquet parts) or "complete" (a valid dataset
// identical to want).
func checkAfterKill(t *testing.T, dir, name string, want map[string][]byte, earlier map[string]bool) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	state := "absent"
	for _, e := range ents {
		switch {
		case e.Name() == name:
			validDataset(t, filepath.Join(dir, name))
			sameTree(t, "dataset in place after a kill", readTree(t, filepath.Join(dir, name)), want)
			return "complete"
		case strings.HasPrefix(e.Name(), "."+name+".curate-") && e.IsDir():
			parts, _ := filepath.Glob(filepath.Join(dir, e.Name(), DataDir, "*.parquet"))
			if len(parts) > 0 && !earlier[e.Name()] {
				state = "mid-write"
			}
		default:
			t.Fatalf("unexpected %s in the output's directory after a kill", e.Name())
		}
	}
	return state
}

// validDataset checks that every Parquet file opens with parquet-go and that the rows add up
// to what stats.json and the card's front matter say.
func validDataset(t *testing.T, dir string) {
	t.Helper()
	ds, err := Open(dir)
	if err != nil {
		t.Fatalf("dataset after a kill does not open: %v", err)
	}
	if ds.Report == nil || int64(ds.Report.Rows) != ds.NumRows || len(ds.Report.Shards) != len(ds.Files) {
		t.Fatalf("dataset %s: %d rows in %d files, stats.json says %+v", dir, ds.NumRows, len(ds.Files), ds.Report)
	}
	card, err := os.ReadFile(filepath.Join(dir, CardFile))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(string(card), "---\n", 3)
	if len(parts) != 3 {
		t.Fatalf("card %s has no front matter", dir)
	}
	var front struct {
		Info struct {
			Splits []CardSplit `yaml:"splits"`
		} `yaml:"dataset_info"`
	}
	if err := yaml.Unmarshal([]byte(parts[1]), &front); err != nil {
		t.Fatal(err)
	}
	if len(front.Info.Splits) != 1 || int64(front.Info.Splits[0].NumExamples) != ds.NumRows {
		t.Fatalf("card says %+v, the files hold %d rows", front.Info.Splits, ds.NumRows)
	}
	n := 0
	if err := ds.Rows(context.Background(), func(*Row) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if int64(n) != ds.NumRows {
		t.Fatalf("read %d rows, metadata says %d", n, ds.NumRows)
	}
}

// TestFaultsCurateCancel cancels Build (Ctrl-C in the CLI) after a varying number of batches:
// the error is context.Canceled, and nothing is left at or beside the output path.
func TestFaultsCurateCancel(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	runDir := filepath.Join(tmp, "run")
	synthRun(t, runDir, 1000, 9, 300)
	for _, after := range []int{1, 3, 8, 15} {
		work := filepath.Join(tmp, fmt.Sprintf("work%d", after))
		if err := os.Mkdir(work, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		opts := faultOptions(tok, filepath.Join(work, "ds"))
		opts.RowsPerShard = 100 // several closed shards before the later cancels
		batches := 0
		opts.Progress = func(BuildProgress) {
			if batches++; batches == after {
				cancel()
			}
		}
		_, err := Build(ctx, []string{runDir}, opts)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel after %d batches: err = %v, want context.Canceled", after, err)
		}
		ents, err := os.ReadDir(work)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Fatalf("cancel after %d batches left %s", after, ents[0].Name())
		}
	}
}

// readTree reads every regular file under dir, keyed by slash-separated relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sameTree(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d files, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("%s: %s missing", what, name)
		}
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: %s differs (%d bytes, want %d)", what, name, len(g), len(w))
		}
	}
}
