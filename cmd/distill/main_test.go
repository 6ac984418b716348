package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/cli/clitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// run runs the program in-process and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return program.Run(context.Background(), args, stdout, stderr)
}

func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dialects", "oracle-sql"}, 2, `invalid value "oracle-sql" for --dialects: unknown dialect`},
		{[]string{"--shard", "2/2"}, 2, "shard"},
		{[]string{"--progress", "fancy"}, 2, "--progress"},
		{[]string{"--limit", "-1"}, 2, "--limit -1 is negative"},
		{[]string{"--nosuch"}, 2, "flag provided but not defined: --nosuch"},
		{[]string{"--teachers", "nosuch:x"}, 1, "unknown prefix"},
		{[]string{"extra"}, 2, `unknown command "extra"`},
		{[]string{"--progress", "off", "extra"}, 2, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
		if lines := strings.Count(errb.String(), "\n"); code == 2 && (lines != 2 || !strings.HasSuffix(errb.String(), "run 'distill -h' for usage\n")) {
			t.Errorf("%v: a usage error in %d lines, want its line and the hint: %q", c.args, lines, errb.String())
		}
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

// TestConventions: help, --version and usage errors of every command, through the built binary.
func TestConventions(t *testing.T) {
	clitest.Conventions(t, testbin.Build(t, "."), program)
}

// TestStudentTokenizer: distill's student:DIR policy over a model directory without
// tokenizer.json takes $CHAINEDSQL_TOKENIZER when $CHAINEDSQL_STUDENT_TOKENIZER is unset (the
// student subcommands' fallback, cli.FallbackTokenizer), and with neither says which to set.
func TestStudentTokenizer(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32")
	tok := shared.Path(t, "tokenizer/qwen2.5")
	t.Setenv(policies.EnvStudentTokenizer, "")
	t.Chdir(t.TempDir()) // no ../shared here
	args := func() []string {
		return []string{"--teachers", "student:" + model, "--tasks", "sample", "--dialects", "sqlite", "--limit", "1",
			"--max-turns", "1", "--max-tokens", "4", "--out", filepath.Join(t.TempDir(), "run"), "--progress", "off"}
	}
	var out, errb bytes.Buffer
	t.Setenv(cli.TokenizerEnv, tok)
	if code := run(args(), &out, &errb); code != 0 {
		t.Fatalf("with $%s: exit %d: %s", cli.TokenizerEnv, code, errb.String())
	}
	errb.Reset()
	t.Setenv(cli.TokenizerEnv, "")
	if code := run(args(), &out, &errb); code != 1 || !strings.Contains(errb.String(), "has no tokenizer.json") ||
		!strings.Contains(errb.String(), "$"+policies.EnvStudentTokenizer+" or $"+cli.TokenizerEnv) {
		t.Errorf("without a tokenizer: exit %d, stderr %q", code, errb.String())
	}
}
