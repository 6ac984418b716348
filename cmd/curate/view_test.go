package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestView drives the built binary: curate view serves a dataset (rows, a trajectory, the loss
// mask, the embedded page, with --tasks a row's final and gold results), refuses requests for
// other hosts, stops on SIGINT; bad input (a directory of none of the kinds, a damaged Parquet
// file, tasks that do not load, a port in use) is one line and exit 1.
func TestView(t *testing.T) {
	sd := newSampleDataset(t)
	tokPath, bin, tmp, run, ds := sd.tok, sd.bin, sd.tmp, sd.run, sd.ds

	t.Run("serves", func(t *testing.T) {
		cmd, line := startView(t, bin, ds, "--tokenizer", tokPath)
		m := regexp.MustCompile(`(\d+) rows of dataset .* serving (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
		if m == nil || m[1] != "56" {
			t.Fatalf("start line %q", line)
		}
		base := m[2]
		getJSON := func(path string, v any) {
			t.Helper()
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
			}
		}
		var page struct {
			Total int `json:"total"`
		}
		getJSON("/api/rows?correct=1", &page)
		if page.Total != 56 {
			t.Errorf("correct rows: %d", page.Total)
		}
		var mask struct {
			Tokens          [][3]int `json:"tokens"`
			Trainable       int      `json:"trainable"`
			StoredTokens    int      `json:"stored_tokens"`
			StoredTrainable int      `json:"stored_trainable"`
		}
		getJSON("/api/mask?id=5", &mask)
		if len(mask.Tokens) == 0 || len(mask.Tokens) != mask.StoredTokens || mask.Trainable != mask.StoredTrainable {
			t.Errorf("mask: %d tokens (%d trainable), row %d (%d)", len(mask.Tokens), mask.Trainable, mask.StoredTokens, mask.StoredTrainable)
		}
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `<script src="app.js">`) {
			t.Errorf("index page: %s", body)
		}
		req, _ := http.NewRequest("GET", base+"/api/info", nil)
		req.Host = "attacker.example"
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("foreign Host: %v %v", resp, err)
		}
		testbin.Interrupt(t, cmd, 10*time.Second)
	})

	t.Run("results", func(t *testing.T) {
		// With --tasks the row pages' final and gold SQL run on the task's database.
		_, line := startView(t, bin, ds, "--tasks", "sample", "--exec-timeout", "5s")
		m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("start line %q", line)
		}
		type view struct {
			SQL         string          `json:"sql"`
			Outcome     string          `json:"outcome"`
			Total       int             `json:"total"`
			Observation json.RawMessage `json:"observation"`
			Absent      string          `json:"absent"`
		}
		var rr struct{ Final, Gold view }
		resp, err := http.Get(m[1] + "/api/results?id=3")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil || resp.StatusCode != 200 {
			t.Fatalf("results: %d %v", resp.StatusCode, err)
		}
		// The oracle's final SQL is the gold: the two results are one.
		if rr.Gold.Outcome != "ok" || rr.Gold.SQL == "" || rr.Gold.SQL != rr.Final.SQL || string(rr.Gold.Observation) != string(rr.Final.Observation) || rr.Gold.Absent != "" {
			t.Errorf("results of the oracle's row: %+v", rr)
		}
	})

	damaged := filepath.Join(tmp, "damaged")
	if err := os.CopyFS(damaged, os.DirFS(ds)); err != nil {
		t.Fatal(err)
	}
	parts, _ := filepath.Glob(filepath.Join(damaged, "data", "*.parquet"))
	b, _ := os.ReadFile(parts[0])
	os.WriteFile(parts[0], b[:len(b)/2], 0o644)
	empty := filepath.Join(tmp, "empty")
	os.Mkdir(empty, 0o755)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"not a dataset, run or eval dir", []string{"view", empty}, empty + " is not a dataset dir"},
		{"a file", []string{"view", tokPath}, "is a file"},
		{"mixed kinds", []string{"view", ds, run}, "give PATHs of one kind"},
		{"damaged Parquet", []string{"view", damaged}, parts[0]},
		{"tasks that do not load", []string{"view", ds, "--tasks", "bird:" + filepath.Join(empty, "dev.json")}, "dev.json"},
		{"port in use", []string{"view", ds, "--addr", busy.Addr().String()}, busy.Addr().String() + " is in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, c.args...)
			msg := strings.TrimSpace(r.stderr)
			// The "no tokenizer" notice comes before the error when there is no tokenizer.
			if i := strings.LastIndex(msg, "\n"); i >= 0 && strings.Contains(msg[:i], "loss-mask view is off") {
				msg = msg[i+1:]
			}
			if r.code != 1 || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Fatalf("exit %d, stderr %q: want exit 1 and one line with %q", r.code, r.stderr, c.want)
			}
			t.Logf("%s", msg)
		})
	}
}
