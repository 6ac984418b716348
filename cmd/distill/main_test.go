package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dialects", "oracle-sql"}, "unknown dialect"},
		{[]string{"--shard", "2/2"}, "shard"},
		{[]string{"--progress", "fancy"}, "--progress"},
		{[]string{"--teachers", "nosuch:x"}, "unknown prefix"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code == 0 {
			t.Errorf("%v: exit 0", c.args)
		}
		if c.want != "" && !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}

func TestNeedsTeachers(t *testing.T) {
	if needsTeachers("oracle") || needsTeachers("oracle,student:/m") || !needsTeachers("oracle,glm") || !needsTeachers("teacher:qwen") {
		t.Fatal("needsTeachers")
	}
	ds, err := parseDialects("SQLite, postgres")
	if err != nil || len(ds) != 2 || ds[1] != datasets.Postgres {
		t.Fatalf("%v %v", ds, err)
	}
}

// TestMainJob is the README's main job: the bundled sample on SQLite with the oracle, no keys.
func TestMainJob(t *testing.T) {
	if _, err := datasets.LoadTasks("sample", ""); err != nil {
		t.Skipf("the sample benchmark does not load yet: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errb bytes.Buffer
	if code := run([]string{"--teachers", "oracle", "--tasks", "sample", "--dialects", "sqlite", "--out", dir, "--progress", "log"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "oracle") || !strings.Contains(out.String(), "100.0%") {
		t.Fatalf("summary:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"--teachers", "oracle", "--tasks", "sample", "--dialects", "sqlite", "--out", dir, "--progress", "off"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "0 done now") {
		t.Fatalf("resume: exit %d: %s", code, out.String())
	}
}
