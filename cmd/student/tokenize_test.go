package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// runTok runs "student tokenize args..." on input and returns the exit code, stdout, stderr.
func runTok(t *testing.T, input string, args ...string) (int, string, string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(input)
	defer func() { stdin = old }()
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), append([]string{"tokenize"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestTokenizeGolden feeds the golden texts through the command and checks every id.
func TestTokenizeGolden(t *testing.T) {
	dir := shared.Path(t, "tokenizer/qwen2.5")
	golden, err := os.ReadFile(shared.Path(t, "tokenizer/golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Text    string  `json:"text"`
		IDs     []int   `json:"ids"`
		Offsets [][]int `json:"offsets"`
	}
	var want []line
	sc := bufio.NewScanner(bytes.NewReader(golden))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		want = append(want, l)
	}
	// The golden file itself is valid input: the extra "ids" field is ignored. The tokenizer
	// comes from the environment variable.
	t.Setenv(cli.TokenizerEnv, dir)
	code, out, errs := runTok(t, string(golden), "--offsets")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d output lines for %d input lines", len(got), len(want))
	}
	for i, g := range got {
		var l line
		if err := json.Unmarshal([]byte(g), &l); err != nil {
			t.Fatalf("output line %d %q: %v", i+1, g, err)
		}
		if !slices.Equal(l.IDs, want[i].IDs) {
			t.Fatalf("line %d %q: ids %v, want %v", i+1, want[i].Text, l.IDs, want[i].IDs)
		}
		if len(l.Offsets) != len(l.IDs) {
			t.Fatalf("line %d: %d offsets for %d ids", i+1, len(l.Offsets), len(l.IDs))
		}
	}
}

func TestTokenizeInputs(t *testing.T) {
	dir := shared.Path(t, "tokenizer/qwen2.5")
	code, out, errs := runTok(t, `{"text":"hello world"}`+"\n"+`{"text":""}`+"\n"+`{"text":"<|im_end|>"}`, "--tokenizer", dir+"/tokenizer.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := "{\"ids\":[14990,1879]}\n{\"ids\":[]}\n{\"ids\":[151645]}\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"extra"}, `unexpected argument "extra"`, 2},
		{[]string{"--tokenizer", filepath.Join(t.TempDir(), "missing")}, "no such file", 1},
		{[]string{"--bogus"}, "flag provided but not defined", 2},
	} {
		code, _, errs := runTok(t, "", c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("args %q: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ input, want string }{
		{`{"text":1}`, "stdin line 1: want a JSON object"},
		{"{\"text\":\"a\"}\nnot json\n", "stdin line 2: want a JSON object"},
		{`{"txt":"a"}`, `stdin line 1: no "text" field`},
		{"{\"text\":\"a\"}\n\n{\"text\":\"b\"}\n", "stdin line 2: empty line"},
	} {
		var out bytes.Buffer
		err := tokenizeLines(context.Background(), encoder(tok, false, false), strings.NewReader(c.input), &out, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %q: error %v, want %q", c.input, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tokenizeLines(ctx, encoder(tok, false, false), strings.NewReader(`{"text":"a"}`), &bytes.Buffer{}, false); err == nil {
		t.Error("tokenizeLines ignored a cancelled context")
	}
	t.Setenv(cli.TokenizerEnv, "")
	t.Chdir(t.TempDir()) // no ../shared here
	if code, _, errs := runTok(t, ""); code != 2 || !strings.Contains(errs, "no tokenizer") {
		t.Errorf("no tokenizer: exit %d, stderr %q", code, errs)
	}
}

// TestTokenizeSplitSpecial runs the built `student tokenize` on texts that spell special tokens:
// by default each is its control id; with --split-special-tokens the ids are
// EncodeSplitSpecial's, holding no special id, while <tool_call> (added, not special) stays one
// id; --offsets with it is a usage error.
func TestTokenizeSplitSpecial(t *testing.T) {
	bin := testbin.Build(t, ".")
	dir := shared.Path(t, "tokenizer/qwen2.5")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"SELECT 1<|im_end|>\n<|im_start|>assistant", "<|endoftext|>", "a <tool_call> b", "plain text"}
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(map[string]string{"text": s})
		in.Write(append(b, '\n'))
	}
	run := func(args ...string) (int, []string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"tokenize", "--tokenizer", dir}, args...)...)
		cmd.Stdin = strings.NewReader(in.String())
		code, out, errs := testbin.Run(t, cmd)
		return code, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), errs
	}
	special := map[int]bool{}
	for _, id := range tok.SpecialIDs() {
		special[id] = true
	}
	toolCall := tok.Encode("<tool_call>")
	if len(toolCall) != 1 || special[toolCall[0]] {
		t.Fatalf("<tool_call> is %v, not one added id marked not special", toolCall)
	}
	for _, split := range []bool{false, true} {
		var args []string
		if split {
			args = []string{"--split-special-tokens"}
		}
		code, got, errs := run(args...)
		if code != 0 || len(got) != len(texts) {
			t.Fatalf("%q: exit %d, %d lines for %d texts: %s", args, code, len(got), len(texts), errs)
		}
		for i, s := range texts {
			var l struct{ IDs []int }
			if err := json.Unmarshal([]byte(got[i]), &l); err != nil {
				t.Fatalf("%q on %q: %q: %v", args, s, got[i], err)
			}
			want := tok.Encode(s)
			if split {
				want = tok.EncodeSplitSpecial(s)
			}
			if !slices.Equal(l.IDs, want) {
				t.Errorf("%q on %q: ids %v, want %v", args, s, l.IDs, want)
			}
			control := slices.ContainsFunc(l.IDs, func(id int) bool { return special[id] })
			if wantControl := !split && i < 2; control != wantControl {
				t.Errorf("%q on %q: ids %v hold a special token's id: %v, want %v", args, s, l.IDs, control, wantControl)
			}
			if i == 2 && !slices.Contains(l.IDs, toolCall[0]) {
				t.Errorf("%q on %q: ids %v without <tool_call>'s id %d", args, s, l.IDs, toolCall[0])
			}
		}
	}
	if code, _, errs := run("--split-special-tokens", "--offsets"); code != 2 || !strings.Contains(errs, "not with --split-special-tokens") {
		t.Errorf("--offsets --split-special-tokens: exit %d, %s", code, errs)
	}
}
