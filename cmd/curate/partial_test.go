package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestViewPartialLoadPostgres: after `distill load --limit N` (the first sample database only)
// and a distill run of those N tasks on PostgreSQL, curate view of the dataset with --tasks
// and --pg-dsn starts (it checks the databases its rows use, not every task's) and runs a
// row's final and gold SQL on PostgreSQL as the reader.
func TestViewPartialLoadPostgres(t *testing.T) {
	shared.SkipServers(t)
	tok := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	dsn, drop := pgtest.FreshDB(t, "cs_view_")
	defer drop()
	reader := fmt.Sprintf("cs_rd_vw%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	t.Cleanup(func() { // after the database is dropped
		if err := sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), reader); err != nil {
			t.Errorf("drop reader %s: %v", reader, err)
		}
	})
	root, tmp := t.TempDir(), t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 10
	if tasks[limit-1].DBID != tasks[0].DBID || tasks[len(tasks)-1].DBID == tasks[0].DBID {
		t.Fatalf("the first %d sample tasks should share one database, the last another", limit)
	}
	distill, curate := testbin.Build(t, "../distill"), testbin.Build(t, ".")
	lim := fmt.Sprint(limit)
	run, ds := filepath.Join(tmp, "run"), filepath.Join(tmp, "ds")
	for _, args := range [][]string{
		{"load", "--tasks", "sample", "--limit", lim, "--db-root", root, "--dialect", "postgres", "--dsn", dsn, "--reader", reader},
		{"--tasks", "sample", "--limit", lim, "--db-root", root, "--dialects", "postgres", "--pg-dsn", dsn, "--reader", reader,
			"--teachers", "oracle", "--out", run, "--progress", "off"},
	} {
		if code, _, stderr := testbin.Run(t, exec.Command(distill, args...)); code != 0 {
			t.Fatalf("distill %v: exit %d\n%s", args, code, stderr)
		}
	}
	if r := runBinary(t, curate, "build", run, "--tokenizer", tok, "--out", ds, "--quiet"); r.code != 0 || !strings.Contains(r.stdout, lim+" rows in 1 shard (") {
		t.Fatalf("build: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, path := range []string{ds, run} {
		_, line := startView(t, curate, path, "--tasks", "sample", "--db-root", root, "--pg-dsn", dsn, "--reader", reader)
		m := regexp.MustCompile(`(\d+) rows of .* serving (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
		if m == nil || m[1] != lim {
			t.Fatalf("view %s: start line %q", path, line)
		}
		var rr struct {
			Final, Gold struct {
				Outcome, Engine, Absent string
			}
		}
		resp, err := http.Get(m[2] + "/api/results?id=0")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&rr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("view %s: results: %d %v", path, resp.StatusCode, err)
		}
		if rr.Final.Outcome != "ok" || rr.Gold.Outcome != "ok" || !strings.Contains(rr.Gold.Engine, "PostgreSQL") {
			t.Errorf("view %s: results of row 0: %+v", path, rr)
		}
	}
}
