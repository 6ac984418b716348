package cli

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/rundir"
)

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	return fs
}

func TestDialects(t *testing.T) {
	fs := newFlagSet()
	list := AddDialects(fs, "")
	one := AddDialect(fs, "", "", datasets.Postgres, datasets.MySQL)
	if !slices.Equal(list.List(), []datasets.Dialect{datasets.SQLite}) || one.One() != "" {
		t.Fatalf("defaults: %v %q", list.List(), one.One())
	}
	if err := fs.Parse([]string{"--dialects", "SQLite, postgres,", "--dialect", "MySQL"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(list.List(), []datasets.Dialect{datasets.SQLite, datasets.Postgres}) || one.One() != datasets.MySQL || list.String() != "sqlite,postgres" {
		t.Fatalf("parsed: %v %q", list.List(), one.One())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dialects", "oracle-sql"}, `unknown dialect "oracle-sql"`},
		{[]string{"--dialects", " , "}, "names no dialect"},
		{[]string{"--dialect", "sqlite"}, "want postgres or mysql"},
	} {
		if err := fs.Parse(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestProgressAndShard(t *testing.T) {
	fs := newFlagSet()
	p := AddProgress(fs)
	s := AddShard(fs, "the tasks", "")
	if live, log := p.Writers(new(bytes.Buffer)); live || log == nil || s.Shard != (rundir.Shard{}) {
		t.Fatalf("defaults: auto on a buffer is log lines (live %t, log %v); shard %v", live, log, s.Shard)
	}
	if err := fs.Parse([]string{"--progress", "off", "--shard", "1/4"}); err != nil {
		t.Fatal(err)
	}
	if live, log := p.Writers(new(bytes.Buffer)); live || log != nil || s.Shard != (rundir.Shard{Index: 1, Count: 4}) {
		t.Fatalf("off: live %t, log %v; shard %v", live, log, s.Shard)
	}
	if err := fs.Parse([]string{"--progress", "live"}); err != nil {
		t.Fatal(err)
	}
	if live, _ := p.Writers(new(bytes.Buffer)); !live {
		t.Fatal("--progress live is not live")
	}
	for _, args := range [][]string{{"--progress", "fancy"}, {"--shard", "4/4"}} {
		if err := fs.Parse(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func TestTasks(t *testing.T) {
	fs := newFlagSet()
	one := AddTasks(fs, TaskOptions{Default: "sample", Limit: true})
	if one.Spec() != "sample" || one.Check() != nil {
		t.Fatalf("default: %q %v", one.Spec(), one.Check())
	}
	if err := fs.Parse([]string{"--tasks", "bird:a", "--tasks", "spider:b", "--limit", "-1"}); err != nil {
		t.Fatal(err)
	}
	if one.Spec() != "spider:b" || len(one.Specs()) != 1 || !isUsage(one.Check()) {
		t.Fatalf("the last --tasks counts: %q; --limit -1: %v", one.Specs(), one.Check())
	}

	fs = newFlagSet()
	many := AddTasks(fs, TaskOptions{Default: "sample", Repeat: true})
	if fs.Lookup("limit") != nil {
		t.Fatal("--limit defined without Limit")
	}
	if err := fs.Parse([]string{"--tasks", "bird:a", "--tasks", "spider:b"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(many.Specs(), []string{"bird:a", "spider:b"}) {
		t.Fatalf("repeated: %q", many.Specs())
	}

	fs = newFlagSet()
	req := AddTasks(fs, TaskOptions{Required: true, Limit: true})
	if err := req.Check(); !isUsage(err) || !strings.Contains(err.Error(), "--tasks is required") {
		t.Fatalf("required: %v", err)
	}
	if err := fs.Parse([]string{"--tasks", "sample", "--limit", "2"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := req.Load()
	if err != nil {
		t.Skipf("the sample benchmark does not load: %v", err)
	}
	if len(tasks) != 2 {
		t.Fatalf("--limit 2: %d tasks", len(tasks))
	}
	if _, err := (&Tasks{specs: specList{list: []string{"nosuch:x"}}}).Load(); err == nil || isUsage(err) || !strings.Contains(err.Error(), "tasks nosuch:x") {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestDSNsCheck(t *testing.T) {
	d := &DSNs{}
	if err := d.Check([]datasets.Dialect{datasets.SQLite}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []datasets.Dialect{datasets.Postgres, datasets.MySQL} {
		if err := d.Check([]datasets.Dialect{datasets.SQLite, x}); !isUsage(err) || !strings.Contains(err.Error(), "needs --") {
			t.Errorf("%s without a DSN: %v", x, err)
		}
	}
}

func TestOutAndTeachers(t *testing.T) {
	fs := newFlagSet()
	out := AddOut(fs, "", "the dir", true)
	if err := out.Check(); !isUsage(err) {
		t.Fatalf("required --out missing: %v", err)
	}
	if !strings.HasSuffix(fs.Lookup("out").Usage, "(required)") {
		t.Fatalf("help %q", fs.Lookup("out").Usage)
	}
	if AddOut(newFlagSet(), "runs/demo", "run dir", false).Check() != nil {
		t.Fatal("an optional --out with a default is refused")
	}
	if NeedsTeachers("oracle") || NeedsTeachers("oracle,student:/m") || !NeedsTeachers("oracle,glm") || !NeedsTeachers("teacher:qwen") || NeedsTeachers("") {
		t.Fatal("NeedsTeachers")
	}
	if cfg, err := (&Teachers{}).Load("oracle,student:/m"); cfg != nil || err != nil {
		t.Fatalf("no teacher named: %v %v", cfg, err)
	}
}
