package student

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/internal/regular"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestSuccessorOpensThroughOpener: every file a reload reads (config.json,
// generation_config.json, model.safetensors, the safetensors index, tokenizer.json,
// tokenizer_config.json) is opened through Options.Opener, down through qwen2, safetensors and
// tokenizer: a checkpoint in a root whose one file is a link out of it is refused
// (ErrOutsideRoot) by an Opener confined to the root, and loads with the plain one. Each file
// the Opener were not handed down to would be read through the link.
func TestSuccessorOpensThroughOpener(t *testing.T) {
	model, tok := shared.Path(t, "models/tiny-qwen2-f32"), shared.Path(t, "tokenizer/qwen2.5")
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, out := filepath.Join(base, "ckpt"), filepath.Join(base, "out")
	step := filepath.Join(root, "step")
	for _, d := range []string{step, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{ // name in the checkpoint: its source
		"config.json":            filepath.Join(model, "config.json"),
		"generation_config.json": filepath.Join(model, "generation_config.json"),
		safetensors.SingleFile:   filepath.Join(model, safetensors.SingleFile),
		"tokenizer.json":         filepath.Join(tok, "tokenizer.json"),
		"tokenizer_config.json":  filepath.Join(tok, "tokenizer_config.json"),
	}
	for name, src := range files {
		copyFile(t, src, filepath.Join(step, name))
		copyFile(t, src, filepath.Join(out, name)) // the same bytes, outside the root
	}
	st, err := Open(step, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f, err := safetensors.Open(filepath.Join(step, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	weightMap := map[string]string{}
	for _, n := range f.Names() {
		weightMap[n] = safetensors.SingleFile
	}
	f.Close()
	index, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(out, safetensors.IndexFile), index, 0o644); err != nil {
		t.Fatal(err)
	}
	files[safetensors.IndexFile] = ""
	for linked := range files {
		dir := filepath.Join(root, "out-"+linked)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name := range files {
			target := filepath.Join("..", "step", name) // inside the root
			if name == linked {
				target = filepath.Join(out, name)
			} else if name == safetensors.IndexFile {
				continue
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, confined := range []bool{true, false} {
			var o *regular.Opener
			if confined {
				o = regular.Confine(root)
			}
			next, err := st.Successor(dir, Options{Opener: o})
			if err == nil {
				next.Close()
			}
			switch {
			case confined && !errors.Is(err, regular.ErrOutsideRoot):
				t.Errorf("%s a link out of the root, confined: %v, want ErrOutsideRoot", linked, err)
			case !confined && err != nil:
				t.Errorf("%s a link out of the root, plain: %v", linked, err)
			}
		}
	}
}

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
