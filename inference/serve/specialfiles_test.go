package serve_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// TestLoadersRefuseSpecialFilesWhenOpened: every file a reload reads (config.json,
// generation_config.json, tokenizer.json, the safetensors index and shards) is refused at once
// when what is opened there is a FIFO, a link to /dev/zero or a JSON file over regular.MaxJSON
// (a huge sparse file). Successor's regularFiles checks the directory before the load, but a
// file swapped for a FIFO after that check hung the load's os.Open for good (waiting for a
// writer), and a sparse config.json of terabytes was read into memory whole: the check has to be
// made on what the load itself opens. Without it the FIFO cases are still running after 10 s.
func TestLoadersRefuseSpecialFilesWhenOpened(t *testing.T) {
	loaders := map[string]func(path string) error{
		"config.json": func(p string) error { _, err := qwen2.ReadConfig(p); return err },
		serve.GenerationConfigFile: func(p string) error {
			_, err := serve.ReadGenerationConfig(filepath.Dir(p))
			return err
		},
		"tokenizer.json":                 func(p string) error { _, err := tokenizer.Load(filepath.Dir(p)); return err },
		safetensors.IndexFile:            func(p string) error { _, err := safetensors.OpenIndex(p); return err },
		safetensors.SingleFile:           func(p string) error { _, err := safetensors.Open(p); return err },
		"read/" + safetensors.SingleFile: func(p string) error { _, err := safetensors.ReadFile(p); return err },
	}
	kinds := map[string]func(t *testing.T, path string) (says string){
		"fifo": func(t *testing.T, path string) string {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			// Should a load still open the FIFO, this unblocks it when the test ends.
			t.Cleanup(func() {
				if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			return "is not a regular file (p---------)"
		},
		"zero": func(t *testing.T, path string) string {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
			return "is not a regular file (Dc---------)"
		},
		"dir": func(t *testing.T, path string) string {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			return "is not a regular file (d---------)"
		},
		"sparse": func(t *testing.T, path string) string {
			if !strings.HasSuffix(path, ".json") {
				return ""
			}
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(regular.MaxJSON + 1); err != nil {
				t.Skipf("a sparse file: %v", err)
			}
			return "over the limit of"
		},
	}
	for name, load := range loaders {
		for kind, mk := range kinds {
			t.Run(strings.ReplaceAll(name, "/", "_")+"/"+kind, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), filepath.Base(name))
				says := mk(t, path)
				if says == "" {
					t.Skip("not a JSON file")
				}
				done := make(chan error, 1)
				go func() { done <- load(path) }()
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), says) {
						t.Errorf("%v, want %q", err, says)
					}
					if errors.Is(err, os.ErrNotExist) {
						t.Errorf("%v is not-exist", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("load of %s still running after 10 s", path)
				}
			})
		}
	}
}

// TestReloadRefusesFIFOShard: a sharded checkpoint whose index names a shard file without the
// .safetensors suffix that is a FIFO is refused at once through a reload, and the next reload
// loads. Successor's check before the load looks only at .json and .safetensors entries, so
// without the check at open this reload waited on the FIFO for good (every later reload 409).
func TestReloadRefusesFIFOShard(t *testing.T) {
	sw, dir := tinySwap(t)
	d := t.TempDir()
	for _, name := range []string{"config.json", serve.GenerationConfigFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shard := filepath.Join(d, "weights-1")
	if err := syscall.Mkfifo(shard, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(shard, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	index := `{"weight_map": {"model.norm.weight": "weights-1"}}`
	if err := os.WriteFile(filepath.Join(d, safetensors.IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sw.Reload(context.Background(), d)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "weights-1 is not a regular file") {
			t.Errorf("reload: %v, want the shard refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reload of a FIFO shard still running after 10 s")
	}
	if info, err := sw.Reload(context.Background(), dir); err != nil || info.Version != 2 {
		t.Fatalf("the next reload: %+v %v", info, err)
	}
}
