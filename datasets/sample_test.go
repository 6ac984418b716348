package datasets

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets/sample"
)

// sampleTasks loads the sample into a fresh db root.
func sampleTasks(t *testing.T) []Task {
	t.Helper()
	tasks, err := LoadTasks(SpecSample, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

func TestSampleLoadTasks(t *testing.T) {
	qs, err := sample.Questions()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	tasks, err := LoadTasks(SpecSample, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != len(qs) || len(tasks) < 48 {
		t.Fatalf("%d tasks for %d questions", len(tasks), len(qs))
	}
	ids := map[string]bool{}
	for i, task := range tasks {
		q := qs[i]
		if task.ID != "sample/"+strconv.Itoa(i) || task.Index != i || ids[task.ID] {
			t.Errorf("task %d: id %q index %d (duplicate %v)", i, task.ID, task.Index, ids[task.ID])
		}
		ids[task.ID] = true
		if task.Source != SpecSample || task.DBID != q.DBID || task.Question != q.Question || task.Evidence != q.Evidence || task.Difficulty != q.Difficulty {
			t.Errorf("task %s does not carry its question: %+v vs %+v", task.ID, task, q)
		}
		if want := filepath.Join(root, q.DBID, q.DBID+".sqlite"); task.DBPath != want {
			t.Errorf("task %s: db path %s, want %s", task.ID, task.DBPath, want)
		}
		for _, d := range []Dialect{SQLite, Postgres, MySQL} {
			if g, ok := task.GoldFor(d); !ok || g != task.Gold[d] || g != q.Gold[string(d)] {
				t.Errorf("task %s: %s gold %q", task.ID, d, g)
			}
		}
	}
	// A second load reuses the built files.
	st, err := os.Stat(tasks[0].DBPath)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadTasks(SpecSample, root)
	if err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(again[0].DBPath); err != nil || !os.SameFile(st, st2) {
		t.Fatalf("second load rebuilt %s: %v", again[0].DBPath, err)
	}
}

func TestSampleLoadTasksNoSetup(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	tasks, err := LoadTasks("sample", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "chainedsql", "sample-"+sample.Version)
	for _, task := range tasks {
		if !strings.HasPrefix(task.DBPath, dir+string(filepath.Separator)) {
			t.Fatalf("task %s: db path %s is not under %s", task.ID, task.DBPath, dir)
		}
	}
	for _, db := range sample.Databases() {
		if _, err := os.Stat(filepath.Join(dir, db, db+".sqlite")); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkLoadSampleBuild loads the sample into a fresh db root each time: four databases built
// from their scripts.
func BenchmarkLoadSampleBuild(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadTasks(SpecSample, b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadSampleReuse loads the sample when its databases are already built.
func BenchmarkLoadSampleReuse(b *testing.B) {
	root := b.TempDir()
	if _, err := LoadTasks(SpecSample, root); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadTasks(SpecSample, root); err != nil {
			b.Fatal(err)
		}
	}
}
