package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// badModel makes a copy of the model directory src in dir/name, with config.json replaced by
// config (when non-nil) and model.safetensors by weights (when non-nil); unchanged files are
// symbolic links to src's.
func badModel(t *testing.T, src, dir, name string, config, weights []byte) string {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, content := range map[string][]byte{"config.json": config, "model.safetensors": weights, "generation_config.json": nil} {
		p := filepath.Join(d, file)
		var err error
		if content != nil {
			err = os.WriteFile(p, content, 0o644)
		} else {
			err = os.Symlink(filepath.Join(src, file), p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// rewriteHeader returns weights with its safetensors JSON header passed through edit.
func rewriteHeader(t *testing.T, weights []byte, edit func(map[string]any)) []byte {
	t.Helper()
	n := binary.LittleEndian.Uint64(weights[:8])
	var h map[string]any
	if err := json.Unmarshal(weights[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(out, hb...)
	return append(out, weights[8+n:]...)
}

func runStudent(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := testbin.Run(t, exec.Command(bin, args...))
	return code, stderr
}

// TestBadInput drives the real binary (logits, eval) with model directories whose config.json
// or safetensors header lies, bad tokenizers and bad task files: each exits non-zero with an
// error naming the input, and eval creates no eval dir.
func TestBadInput(t *testing.T) {
	src := shared.Path(t, "models/tiny-qwen2-f32")
	tok := shared.Path(t, "tokenizer/qwen2.5")
	bin := testbin.Build(t, ".")
	tmp := t.TempDir()
	dev := birdDir(t)

	config, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	withConfig := func(key string, v any) []byte {
		var m map[string]any
		if err := json.Unmarshal(config, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = v
		b, _ := json.Marshal(m)
		return b
	}
	tensor := "model.embed_tokens.weight"
	setField := func(field string, v any) func(map[string]any) {
		return func(h map[string]any) { h[tensor].(map[string]any)[field] = v }
	}
	offsets := func(h map[string]any) []any { return h[tensor].(map[string]any)["data_offsets"].([]any) }
	var n0 float64
	rewriteHeader(t, weights, func(h map[string]any) { n0 = offsets(h)[0].(float64) })

	lyingLength := append(binary.LittleEndian.AppendUint64(nil, uint64(len(weights))*4), weights[8:4096]...)
	models := []struct {
		name string
		dir  string
		want []string
	}{
		{"config hidden_size disagrees with the weights", badModel(t, src, tmp, "hidden", withConfig("hidden_size", 128), nil), []string{"hidden", tensor, "config.json"}},
		{"config has a layer the weights lack", badModel(t, src, tmp, "layers", withConfig("num_hidden_layers", 3), nil), []string{"layers", "model.layers.2"}},
		{"config vocab_size disagrees", badModel(t, src, tmp, "vocab", withConfig("vocab_size", 1000), nil), []string{"vocab", "1000"}},
		{"config not JSON", badModel(t, src, tmp, "configjson", []byte(`{"hidden_size": 64,`), nil), []string{filepath.Join(tmp, "configjson", "config.json")}},
		{"header length beyond the file", badModel(t, src, tmp, "hdrlen", nil, lyingLength), []string{filepath.Join(tmp, "hdrlen", "model.safetensors")}},
		{"tensor offsets beyond the file", badModel(t, src, tmp, "offsets", nil, rewriteHeader(t, weights, setField("data_offsets", []any{n0, float64(len(weights)) * 2}))), []string{filepath.Join(tmp, "offsets", "model.safetensors"), tensor}},
		{"tensor shape disagrees with its bytes", badModel(t, src, tmp, "shape", nil, rewriteHeader(t, weights, setField("shape", []any{151936, 65}))), []string{filepath.Join(tmp, "shape", "model.safetensors"), tensor}},
		{"tensor dtype unknown", badModel(t, src, tmp, "dtype", nil, rewriteHeader(t, weights, setField("dtype", "F7"))), []string{filepath.Join(tmp, "dtype", "model.safetensors"), "F7"}},
		{"header not JSON", badModel(t, src, tmp, "hdrjson", nil, append(binary.LittleEndian.AppendUint64(nil, 16), []byte("{not json at all")...)), []string{filepath.Join(tmp, "hdrjson", "model.safetensors")}},
		{"weights truncated", badModel(t, src, tmp, "truncated", nil, weights[:len(weights)/2]), []string{filepath.Join(tmp, "truncated", "model.safetensors")}},
		{"model dir missing", filepath.Join(tmp, "nosuchmodel"), []string{filepath.Join(tmp, "nosuchmodel")}},
	}
	check := func(t *testing.T, code int, stderr string, want []string) {
		t.Helper()
		if code == 0 {
			t.Fatalf("exit 0; stderr %q", stderr)
		}
		t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr does not name %q", w)
			}
		}
		if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
			t.Errorf("panicked: %s", stderr)
		}
	}
	for _, m := range models {
		t.Run("logits: "+m.name, func(t *testing.T) {
			code, stderr := runStudent(t, bin, "logits", "--model", m.dir, "--tokenizer", tok, "--ids", "151644,872,198", "--top", "2")
			check(t, code, stderr, m.want)
		})
		t.Run("eval: "+m.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "eval")
			code, stderr := runStudent(t, bin, "eval", "--policy", "student:"+m.dir, "--tokenizer", tok, "--tasks", "bird:"+dev, "--out", out, "--progress", "off")
			check(t, code, stderr, m.want)
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("eval dir %s created by a failed eval (stat: %v)", out, err)
			}
		})
	}

	notJSON := filepath.Join(tmp, "tok-notjson", "tokenizer.json")
	wordPiece := filepath.Join(tmp, "tok-wordpiece", "tokenizer.json")
	for p, content := range map[string]string{notJSON: "not JSON {", wordPiece: `{"model": {"type": "WordPiece", "vocab": {}}}`} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	truncatedDev := filepath.Join(tmp, "dev-truncated", "dev.json")
	wrongTypes := filepath.Join(tmp, "dev-types", "dev.json")
	data, _ := os.ReadFile(dev)
	for p, content := range map[string]string{truncatedDev: string(data[:len(data)/2]), wrongTypes: `[{"question_id": "zero", "db_id": "shop", "question": "q", "SQL": "SELECT 1"}]`} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	aFile := filepath.Join(tmp, "afile")
	os.WriteFile(aFile, []byte("x"), 0o644)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"tokenizer not JSON", []string{"--policy", "student:" + src, "--tokenizer", notJSON, "--tasks", "bird:" + dev}, []string{notJSON}},
		{"tokenizer not BPE", []string{"--policy", "student:" + src, "--tokenizer", wordPiece, "--tasks", "bird:" + dev}, []string{wordPiece, "WordPiece"}},
		{"task file truncated", []string{"--policy", "oracle", "--tasks", "bird:" + truncatedDev}, []string{truncatedDev}},
		{"task file wrong types", []string{"--policy", "oracle", "--tasks", "bird:" + wrongTypes}, []string{wrongTypes, "question_id"}},
		{"task file missing", []string{"--policy", "oracle", "--tasks", "bird:" + filepath.Join(tmp, "nosuch.json")}, []string{filepath.Join(tmp, "nosuch.json")}},
		{"database file missing", []string{"--policy", "oracle", "--tasks", "bird:" + dev, "--db-root", filepath.Join(tmp, "no-dbs")}, []string{filepath.Join(tmp, "no-dbs")}},
		{"postgres DSN malformed", []string{"--policy", "oracle", "--tasks", "bird:" + dev, "--dialect", "postgres", "--pg-dsn", "postgres://%zz"}, []string{"postgres"}},
	} {
		t.Run("eval: "+c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "eval")
			code, stderr := runStudent(t, bin, append([]string{"eval", "--out", out, "--progress", "off"}, c.args...)...)
			check(t, code, stderr, c.want)
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("eval dir %s created by a failed eval (stat: %v)", out, err)
			}
		})
	}
	t.Run("eval: out is a file", func(t *testing.T) {
		code, stderr := runStudent(t, bin, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--out", aFile, "--progress", "off")
		check(t, code, stderr, []string{aFile})
		if b, _ := os.ReadFile(aFile); string(b) != "x" {
			t.Errorf("%s overwritten: %q", aFile, b)
		}
	})
	// A non-empty folder that is not an eval dir (a dataset, notes) is refused, left as it was;
	// an eval dir of the same run resumes.
	t.Run("eval: out is a folder of notes", func(t *testing.T) {
		notes := filepath.Join(t.TempDir(), "notes")
		note := filepath.Join(notes, "todo.md")
		if err := os.MkdirAll(notes, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(note, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stderr := runStudent(t, bin, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--out", notes, "--progress", "off")
		check(t, code, stderr, []string{notes, "not an eval dir to resume", "todo.md"})
		if ents, _ := os.ReadDir(notes); len(ents) != 1 {
			t.Errorf("%s: %d entries after the refusal, want 1", notes, len(ents))
		}
		resumed := filepath.Join(t.TempDir(), "eval")
		for i := range 2 {
			if code, stderr := runStudent(t, bin, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--out", resumed, "--progress", "off"); code != 0 {
				t.Fatalf("run %d into an eval dir: exit %d: %s", i, code, stderr)
			}
		}
	})
}
