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
	st, base, root, files := stepCheckpoint(t)
	step, out := filepath.Join(root, "step"), filepath.Join(base, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		copyFile(t, src, filepath.Join(out, name)) // the same bytes, outside the root
	}
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
		dir := linkedCheckpoint(t, filepath.Join(root, "out-"+linked), files, linked, filepath.Join(out, linked))
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

// TestSuccessorLooksThroughOpener: what a reload looks at before it opens (the directory, the
// index and model.safetensors to choose between them, tokenizer.json to load it or not, the
// entries checked to be regular files) is looked at through Options.Opener too: a link out of
// the root to nothing is ErrOutsideRoot, as one to a file is (TestSuccessorOpensThroughOpener),
// so that whether a path outside exists does not show. Before, a dangling tokenizer.json or
// index link out was taken for a missing file (the reload loaded, or said "has neither"), and
// a directory link out said "no such file".
func TestSuccessorLooksThroughOpener(t *testing.T) {
	st, base, root, files := stepCheckpoint(t)
	gone := filepath.Join(base, "gone")
	files[safetensors.IndexFile] = ""
	dirs := map[string]string{filepath.Join(root, "gone-dir"): "the directory"}
	if err := os.Symlink(gone, filepath.Join(root, "gone-dir")); err != nil {
		t.Fatal(err)
	}
	for linked := range files {
		dirs[linkedCheckpoint(t, filepath.Join(root, "gone-"+linked), files, linked, filepath.Join(gone, linked))] = linked
	}
	for dir, linked := range dirs {
		next, err := st.Successor(dir, Options{Opener: regular.Confine(root)})
		if err == nil {
			next.Close()
		}
		if !errors.Is(err, regular.ErrOutsideRoot) {
			t.Errorf("%s a link out of the root to nothing, confined: %v, want ErrOutsideRoot", linked, err)
		}
	}
}

// stepCheckpoint copies the tiny model and the Qwen2.5 tokenizer into base/ckpt/step (base a
// temporary directory, links resolved) and opens it; files are the checkpoint's file names and
// their sources.
func stepCheckpoint(t *testing.T) (st *Student, base, root string, files map[string]string) {
	t.Helper()
	model, tok := shared.Path(t, "models/tiny-qwen2-f32"), shared.Path(t, "tokenizer/qwen2.5")
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(base, "ckpt")
	step := filepath.Join(root, "step")
	if err := os.MkdirAll(step, 0o755); err != nil {
		t.Fatal(err)
	}
	files = map[string]string{ // name in the checkpoint: its source
		"config.json":            filepath.Join(model, "config.json"),
		"generation_config.json": filepath.Join(model, "generation_config.json"),
		safetensors.SingleFile:   filepath.Join(model, safetensors.SingleFile),
		"tokenizer.json":         filepath.Join(tok, "tokenizer.json"),
		"tokenizer_config.json":  filepath.Join(tok, "tokenizer_config.json"),
	}
	for name, src := range files {
		copyFile(t, src, filepath.Join(step, name))
	}
	st, err = Open(step, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, base, root, files
}

// linkedCheckpoint makes dir a checkpoint of links to root/step's files (named by files' keys,
// the index left out) but linked, a link to target.
func linkedCheckpoint(t *testing.T, dir string, files map[string]string, linked, target string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		to := filepath.Join("..", "step", name) // inside the root
		if name == linked {
			to = target
		} else if name == safetensors.IndexFile {
			continue
		}
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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
