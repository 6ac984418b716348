package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestModelTokenizer: every subcommand that loads a model directory without tokenizer.json
// takes the tokenizer as the flag docs say, with no --tokenizer from $CHAINEDSQL_TOKENIZER,
// else ../shared/tokenizer/qwen2.5 (eval's student:DIR policy too), and with none of them
// fails with an error that names the subcommand and says how to give one.
func TestModelTokenizer(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32")
	tok := shared.Path(t, "tokenizer/qwen2.5")
	dev := birdDir(t)
	t.Setenv(policies.EnvStudentTokenizer, "")
	t.Chdir(t.TempDir()) // no ../shared here
	eval := func() (int, string) {
		code, _, errs := run(t, "eval", "--model", model, "--tasks", "bird:"+dev, "--out", filepath.Join(t.TempDir(), "e"),
			"--max-turns", "1", "--max-tokens", "4", "--progress", "off")
		return code, errs
	}

	t.Setenv(cli.TokenizerEnv, tok)
	if code, errs := eval(); code != 0 {
		t.Fatalf("eval with $%s: exit %d: %s", cli.TokenizerEnv, code, errs)
	}

	t.Setenv(cli.TokenizerEnv, "")
	for _, c := range []struct {
		sub  string
		args []string
	}{
		{"eval", []string{"--tasks", "bird:" + dev, "--out", filepath.Join(t.TempDir(), "e"), "--progress", "off"}},
		{"serve", []string{"--addr", "127.0.0.1:0"}},
		{"chat", nil},
		{"rollout", []string{"--tasks", "bird:" + dev, "--out", filepath.Join(t.TempDir(), "r.parquet")}},
	} {
		code, _, errs := run(t, append([]string{c.sub, "--model", model}, c.args...)...)
		if code != 1 || !strings.HasPrefix(errs, "student "+c.sub+": ") || !strings.Contains(errs, model+" has no tokenizer.json") ||
			!strings.Contains(errs, "--tokenizer PATH or $"+cli.TokenizerEnv) {
			t.Errorf("%s without a tokenizer: exit %d, stderr %q", c.sub, code, errs)
		}
	}

	// ../shared/tokenizer/qwen2.5 from the working directory, as curate and tokenize take it.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "shared", "tokenizer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tok, filepath.Join(root, "shared", "tokenizer", "qwen2.5")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(root, "work"))
	if code, errs := eval(); code != 0 {
		t.Fatalf("eval with ../shared/tokenizer/qwen2.5: exit %d: %s", code, errs)
	}
}
