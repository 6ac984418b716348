package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/cli/clitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

func runBinary(t *testing.T, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), cli.TokenizerEnv+"=") // only --tokenizer counts
	var r result
	r.code, r.stdout, r.stderr = testbin.Run(t, cmd)
	return r
}

// nothingAt fails unless out does not exist and no temporary directory of a build into it is
// left beside it.
func nothingAt(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after a failed build (stat: %v)", out, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "."+filepath.Base(out)+".") {
			t.Errorf("half-written %s left beside %s", e.Name(), out)
		}
	}
}

// sampleRun distils the bundled sample with the oracle into dir (in-process, real SQLite).
func sampleRun(t *testing.T, dir string) {
	t.Helper()
	oracleRun(t, dir, 0, 1)
}

// handRun writes a run dir whose one shard holds lines, each journaled as committed.
func handRun(t *testing.T, dir string, lines ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, rundir.ShardsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.ManifestFile), []byte(`{"protocol":"`+protocol.ProtocolVersion+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	shard := rundir.ShardName("oracle", datasets.SQLite, 0)
	var data, journal bytes.Buffer
	for i, l := range lines {
		data.WriteString(l + "\n")
		e, _ := json.Marshal(rundir.JournalEntry{Key: "k" + string(rune('0'+i)), Task: "t", Teacher: "oracle", Dialect: datasets.SQLite, Shard: shard, End: int64(data.Len())})
		journal.Write(append(e, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.ShardsDir, shard), data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.JournalFile), journal.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput drives the real binary with bad run dirs, bad tokenizers and bad datasets: each
// exits non-zero with an error naming the input, and leaves nothing at --out.
func TestBadInput(t *testing.T) {
	tokPath := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	tmp := t.TempDir()
	bin := testbin.Build(t, ".")
	good := filepath.Join(tmp, "good")
	sampleRun(t, good)
	trajLine := func() string {
		for tr, err := range rundir.Trajectories(good) {
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(tr)
			return string(b)
		}
		t.Fatal("sample run has no trajectory")
		return ""
	}()

	// The good run builds: the failures below are the input's, not the harness's.
	okOut := filepath.Join(tmp, "ok", "ds")
	os.MkdirAll(filepath.Dir(okOut), 0o755)
	if r := runBinary(t, bin, "build", good, "--tokenizer", tokPath, "--out", okOut, "--quiet"); r.code != 0 {
		t.Fatalf("good run: exit %d: %s", r.code, r.stderr)
	}
	// The dataset dir gets the mode of every other output dir (0755 less the umask), not the
	// 0700 of a temporary directory.
	ref := filepath.Join(tmp, "ok", "ref")
	if err := os.Mkdir(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{okOut, filepath.Join(okOut, "data")} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.Stat(ref)
		if fi.Mode().Perm() != want.Mode().Perm() {
			t.Errorf("%s: mode %v, want %v like every output dir", d, fi.Mode().Perm(), want.Mode().Perm())
		}
	}
	hand := filepath.Join(tmp, "hand")
	handRun(t, hand, trajLine)
	if r := runBinary(t, bin, "build", hand, "--tokenizer", tokPath, "--out", filepath.Join(tmp, "ok", "hand-ds"), "--quiet"); r.code != 0 {
		t.Fatalf("hand-written run of one good line: exit %d: %s", r.code, r.stderr)
	}

	mk := func(name string, fn func(dir string)) string {
		d := filepath.Join(tmp, name)
		fn(d)
		return d
	}
	empty := mk("empty", func(d string) { os.Mkdir(d, 0o755) })
	notRun := mk("notrun", func(d string) {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "notes.txt"), []byte("hello"), 0o644)
	})
	noShards := mk("noshards", func(d string) {
		os.MkdirAll(filepath.Join(d, rundir.ShardsDir), 0o755)
		os.WriteFile(filepath.Join(d, rundir.ManifestFile), []byte(`{}`), 0o644)
	})
	truncated := mk("truncated", func(d string) { handRun(t, d, trajLine[:len(trajLine)/2]) })
	wrongTypes := mk("wrongtypes", func(d string) { handRun(t, d, `{"key":"k","turns":"five","messages":7}`) })
	noKey := mk("nokey", func(d string) { handRun(t, d, `{"teacher":"oracle"}`) })
	badJournal := mk("badjournal", func(d string) {
		handRun(t, d, trajLine)
		// A bad last line is taken for a torn write (distill's crash rule); one in the middle is not.
		j, _ := os.ReadFile(filepath.Join(d, rundir.JournalFile))
		os.WriteFile(filepath.Join(d, rundir.JournalFile), append([]byte("{not json\n"), j...), 0o644)
	})

	tokDir := filepath.Join(tmp, "tok")
	os.Mkdir(tokDir, 0o755)
	writeTok := func(name, content string) string {
		p := filepath.Join(tokDir, name)
		os.Mkdir(p, 0o755)
		p = filepath.Join(p, "tokenizer.json")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notJSON := writeTok("notjson", "this is not JSON {")
	wordPiece := writeTok("wordpiece", `{"version":"1.0","model":{"type":"WordPiece","vocab":{"a":0}}}`)
	realTok, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	var tokMap map[string]any
	if err := json.Unmarshal(realTok, &tokMap); err != nil {
		t.Fatal(err)
	}
	tokMap["added_tokens"] = []any{}
	noChatML, _ := json.Marshal(tokMap)
	noChatMLPath := writeTok("nochatml", string(noChatML))
	tokIsDir := filepath.Join(tokDir, "isdir")
	os.MkdirAll(filepath.Join(tokIsDir, "tokenizer.json"), 0o755)

	for _, c := range []struct {
		name string
		runs []string
		tok  string
		want []string // all must appear in stderr
	}{
		{"missing run dir", []string{filepath.Join(tmp, "nosuch")}, tokPath, []string{filepath.Join(tmp, "nosuch"), "manifest.json"}},
		{"run dir is a file", []string{tokPath}, tokPath, []string{tokPath}},
		{"empty dir", []string{empty}, tokPath, []string{empty, "run dir"}},
		{"not a run dir", []string{notRun}, tokPath, []string{notRun, "manifest.json"}},
		{"no shards", []string{noShards}, tokPath, []string{noShards, "no shards"}},
		{"truncated JSON line", []string{truncated}, tokPath, []string{truncated, "line 1"}},
		{"wrong types", []string{wrongTypes}, tokPath, []string{wrongTypes, "line 1"}},
		{"no key", []string{noKey}, tokPath, []string{noKey, "no key"}},
		{"malformed journal", []string{badJournal}, tokPath, []string{badJournal, "journal"}},
		{"good run then a bad one", []string{good, truncated}, tokPath, []string{truncated}},
		{"run dir twice", []string{good, good}, tokPath, []string{"duplicate key", good}},
		{"missing tokenizer", []string{good}, filepath.Join(tokDir, "nosuch.json"), []string{filepath.Join(tokDir, "nosuch.json")}},
		{"tokenizer not JSON", []string{good}, notJSON, []string{notJSON}},
		{"tokenizer not BPE", []string{good}, wordPiece, []string{wordPiece, "WordPiece"}},
		{"tokenizer without ChatML tokens", []string{good}, noChatMLPath, []string{noChatMLPath, "<|im_start|>"}},
		{"tokenizer.json a directory", []string{good}, tokIsDir, []string{filepath.Join(tokIsDir, "tokenizer.json")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ds")
			args := append([]string{"build", "--tokenizer", c.tok, "--out", out, "--quiet"}, c.runs...)
			r := runBinary(t, bin, args...)
			if r.code == 0 {
				t.Fatalf("exit 0; stdout %q", r.stdout)
			}
			t.Logf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not name %q", r.stderr, w)
				}
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("panicked: %s", r.stderr)
			}
			nothingAt(t, out)
		})
	}

	t.Run("output exists and is not empty", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "ds")
		os.Mkdir(out, 0o755)
		keep := filepath.Join(out, "keep.txt")
		os.WriteFile(keep, []byte("mine"), 0o644)
		r := runBinary(t, bin, "build", good, "--tokenizer", tokPath, "--out", out, "--quiet")
		if r.code == 0 || !strings.Contains(r.stderr, out) {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
			t.Fatalf("existing file touched: %q %v", b, err)
		}
	})
	t.Run("output parent missing", func(t *testing.T) {
		out := filepath.Join(tmp, "nosuchparent", "ds")
		r := runBinary(t, bin, "build", good, "--tokenizer", tokPath, "--out", out, "--quiet")
		if r.code == 0 || !strings.Contains(r.stderr, out) {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which reads files whatever their mode")
		}
		locked := mk("locked", func(d string) { handRun(t, d, trajLine) })
		shard := filepath.Join(locked, rundir.ShardsDir, rundir.ShardName("oracle", datasets.SQLite, 0))
		lockedTok := writeTok("locked", string(realTok))
		for _, p := range []string{shard, lockedTok} {
			if err := os.Chmod(p, 0); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(p, 0o644)
		}
		for _, c := range []struct{ run, tok, want string }{{locked, tokPath, shard}, {good, lockedTok, lockedTok}} {
			out := filepath.Join(t.TempDir(), "ds")
			r := runBinary(t, bin, "build", c.run, "--tokenizer", c.tok, "--out", out, "--quiet")
			if r.code == 0 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "permission denied") {
				t.Errorf("exit %d, stderr %q, want it to name %s", r.code, r.stderr, c.want)
			}
			nothingAt(t, out)
		}
	})

	// verify and stats on datasets that are not datasets, or hold a damaged Parquet file.
	damaged := filepath.Join(tmp, "damaged")
	if err := os.CopyFS(damaged, os.DirFS(okOut)); err != nil {
		t.Fatal(err)
	}
	parts, _ := filepath.Glob(filepath.Join(damaged, "data", "*.parquet"))
	if len(parts) == 0 {
		t.Fatal("good dataset has no Parquet file")
	}
	b, _ := os.ReadFile(parts[0])
	os.WriteFile(parts[0], b[:len(b)/2], 0o644)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"verify: not a dataset", []string{"verify", good, "--tokenizer", tokPath}, good},
		{"verify: damaged Parquet", []string{"verify", damaged, "--tokenizer", tokPath}, parts[0]},
		{"stats: not a dataset", []string{"stats", empty}, empty},
		{"stats: damaged Parquet", []string{"stats", damaged}, parts[0]},
		{"verify: tokenizer not JSON", []string{"verify", okOut, "--tokenizer", notJSON}, notJSON},
		{"stats: plots into a file", []string{"stats", okOut, "--plots", tokPath}, tokPath},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, c.args...)
			if r.code == 0 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q, want it to name %s", r.code, r.stderr, c.want)
			}
			t.Logf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
		})
	}
}

// TestConventions: help, --version and usage errors of every command, through the built binary.
func TestConventions(t *testing.T) {
	clitest.Conventions(t, testbin.Build(t, "."), program)
}
