package curate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestShardMerge runs distill as three shard processes (--shard i/3, each its own run dir) and
// once unsharded, concurrently, with the oracle on the bundled sample on SQLite:
// Build of the three shard dirs gives the same rows as Build of the single run, and a shard dir
// passed twice is refused naming the duplicate.
func TestShardMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs cmd/distill four times")
	}
	tok := loadTokenizer(t)
	bin := testbin.Build(t, "../cmd/distill")
	tmp := t.TempDir()
	single := filepath.Join(tmp, "single")
	shards := []string{filepath.Join(tmp, "shard0"), filepath.Join(tmp, "shard1"), filepath.Join(tmp, "shard2")}
	common := []string{"--teachers", "oracle", "--tasks", "sample", "--dialects", "sqlite", "--samples", "2", "--progress", "off"}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	runOne := func(i int, out string, extra ...string) {
		defer wg.Done()
		args := append(append(append([]string{}, common...), "--out", out), extra...)
		if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			errs[i] = fmt.Errorf("distill %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	wg.Add(4)
	go runOne(3, single)
	for i, d := range shards {
		go runOne(i, d, "--shard", fmt.Sprintf("%d/3", i))
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	build := func(name string, dirs []string) []Row {
		t.Helper()
		out := filepath.Join(tmp, name)
		rep, err := Build(context.Background(), dirs, BuildOptions{Tokenizer: tok, TokenizerName: "qwen2.5", Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if rep.ExcludedCount != 0 {
			t.Fatalf("%s: %d excluded: %+v", name, rep.ExcludedCount, rep.Excluded)
		}
		var rows []Row
		if err := ReadRows(context.Background(), out, func(r *Row) error { rows = append(rows, *r); return nil }); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	want := build("ds-single", []string{single})
	got := build("ds-merged", shards)
	perShard := map[string]int{}
	for _, r := range got {
		perShard[r.SourceRun]++
	}
	for _, d := range shards {
		if perShard[filepath.Base(d)] == 0 {
			t.Fatalf("shard %s contributed no rows (%v): the split did not split", d, perShard)
		}
	}
	// The rows' order follows the run dirs, and source_run names the run dir; everything else
	// must match row for row once sorted by key.
	norm := func(rows []Row) []Row {
		for i := range rows {
			rows[i].SourceRun = ""
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
		return rows
	}
	want, got = norm(want), norm(got)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("merged shards give %d rows, the single run %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("row %d differs:\nmerged %+v\nsingle %+v", i, got[i], want[i])
		}
	}

	dupOut := filepath.Join(tmp, "ds-dup")
	_, err := Build(context.Background(), []string{shards[0], shards[1], shards[0]}, BuildOptions{Tokenizer: tok, Out: dupOut})
	if err == nil || !strings.Contains(err.Error(), "duplicate key") || !strings.Contains(err.Error(), shards[0]) {
		t.Fatalf("shard dir passed twice: err = %v, want a duplicate key error naming %s", err, shards[0])
	}
	if _, err := os.Stat(dupOut); !os.IsNotExist(err) {
		t.Fatalf("refused build left %s (stat: %v)", dupOut, err)
	}
	t.Logf("%d rows from 3 shards (%v) equal the single run's", len(got), perShard)
}
