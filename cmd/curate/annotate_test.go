package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/view"
)

// startView starts curate view on a free loopback port with args, and returns it and its
// start line; the process is killed when the test ends.
func startView(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"view", "--addr", "127.0.0.1:0"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no start line: %v", err)
	}
	return cmd, line
}

// TestViewAnnotate drives the built binary: curate view saves a row's labels and note into
// the dataset's annotations.jsonl through its guard (a foreign Host or a page of another
// origin is refused), and curate export --where label=… selects the row and writes the labels
// and note columns, in JSONL and Parquet.
func TestViewAnnotate(t *testing.T) {
	sd := newSampleDataset(t)
	cmd, line := startView(t, sd.bin, sd.ds)
	m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("start line %q", line)
	}
	base := m[1]
	post := func(host, origin, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/api/annotate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := post("attacker.example", "", `{"id":5,"labels":["evil"]}`); code != http.StatusForbidden {
		t.Errorf("foreign Host: %d %s", code, b)
	}
	if code, b := post("", "http://attacker.example", `{"id":5,"labels":["evil"]}`); code != http.StatusForbidden {
		t.Errorf("another origin: %d %s", code, b)
	}
	sidecar := filepath.Join(sd.ds, view.AnnotationsFile)
	if _, err := os.Stat(sidecar); !os.IsNotExist(err) {
		t.Errorf("refused saves made %s: %v", sidecar, err)
	}
	if code, b := post("", "", `{"id":5,"labels":["keep","hard"],"note":"ok","rev":0}`); code != 200 {
		t.Fatalf("save: %d %s", code, b)
	}
	var key string
	resp, err := http.Get(base + "/api/row?id=5")
	if err != nil {
		t.Fatal(err)
	}
	var d view.Detail
	json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	key = d.Key
	if d.Annotation == nil || d.Annotation.Rev != 1 || key == "" {
		t.Errorf("row 5 after the save: %+v", d.Annotation)
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	data, err := os.ReadFile(sidecar)
	if err != nil || !strings.Contains(string(data), `"key":"`+key+`"`) {
		t.Fatalf("sidecar %s: %v\n%s", sidecar, err, data)
	}

	for _, ext := range []string{"jsonl", "parquet"} {
		out := filepath.Join(sd.tmp, "keep."+ext)
		r := runBinary(t, sd.bin, "export", sd.ds, "--where", "label=keep", "--out", out)
		if r.code != 0 || !strings.Contains(r.stdout, "1 of 56 rows written") {
			t.Fatalf("export --where label=keep: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
		var got []view.AnnotatedRow
		if ext == "jsonl" {
			b, _ := os.ReadFile(out)
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var ar view.AnnotatedRow
				if err := json.Unmarshal([]byte(l), &ar); err != nil {
					t.Fatal(err)
				}
				got = append(got, ar)
			}
		} else {
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			pr := parquet.NewGenericReader[view.AnnotatedRow](f)
			got = make([]view.AnnotatedRow, pr.NumRows())
			n, _ := pr.Read(got)
			got = got[:n]
			pr.Close()
			f.Close()
			if got, ok := testbin.DuckDB(t, "select labels, note from read_parquet('"+out+"')"); ok && got != `[{"labels":["keep","hard"],"note":"ok"}]` {
				t.Errorf("DuckDB reads the labels and note of %s as %s", out, got)
			}
		}
		if len(got) != 1 || got[0].Key != key || !slices.Equal(got[0].Labels, []string{"keep", "hard"}) || got[0].Note != "ok" || len(got[0].Messages) == 0 {
			t.Errorf("%s export of label=keep: %+v", ext, got)
		}
	}
	// The note and labelled filters: the one annotated row, and the others.
	for where, want := range map[string]string{"noted=1": "1 of 56 rows written", "labelled=0": "55 of 56 rows written", "noted=0&labelled=1": "0 of 56 rows written"} {
		r := runBinary(t, sd.bin, "export", sd.ds, "--where", where, "--out", filepath.Join(sd.tmp, "where.jsonl"))
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("export --where %s: exit %d, %q %q, want %q", where, r.code, r.stdout, r.stderr, want)
		}
	}
}
