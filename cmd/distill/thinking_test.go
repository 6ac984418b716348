package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestOwnTeacherThinks: a teacher of one's own name on a known provider (DashScope here, whose
// thinking models refuse a non-streamed call that thinks) is asked for thinking in the
// provider's way unless its config says thinking: false; and a run whose first episodes all
// meet the same client error stops with that error and its fix, keeping what it wrote.
func TestOwnTeacherThinks(t *testing.T) {
	bin := testbin.Build(t, ".")
	const model = "qwen3-235b-a22b"
	srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		return oaitest.Response{Think: "count the rows", Content: "<sql>SELECT 1</sql>"}
	}, oaitest.WithPersonality(oaitest.Personalities["dashscope"]), oaitest.WithModels(model))
	run := func(t *testing.T, extra string) (int, string, string, []oaitest.Request) {
		t.Helper()
		tmp := t.TempDir()
		cfg := filepath.Join(tmp, "teachers.yaml")
		text := fmt.Sprintf("teachers:\n  mine:\n    provider: dashscope\n    base_url: %s\n    model: %s\n    api_key_env: \"\"\n    max_retries: 0\n%s",
			srv.BaseURL(), model, extra)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		before := srv.Count()
		out := filepath.Join(tmp, "run")
		code, stderr := runBinary(t, bin, "--config", cfg, "--teachers", "mine", "--tasks", "sample", "--limit", "30",
			"--concurrency", "1", "--max-turns", "1", "--out", out, "--progress", "off")
		return code, stderr, out, srv.Requests()[before:]
	}
	thinking := func(r oaitest.Request) string { return string(r.Field("enable_thinking")) }

	t.Run("asked for thinking by default", func(t *testing.T) {
		code, stderr, _, reqs := run(t, "")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if len(reqs) == 0 {
			t.Fatal("no request")
		}
		for _, r := range reqs {
			if thinking(r) != "true" || !r.Stream {
				t.Fatalf("request %d: enable_thinking %s, stream %v; want true, true", r.Seq, thinking(r), r.Stream)
			}
		}
	})
	t.Run("thinking false turns it off", func(t *testing.T) {
		code, stderr, _, reqs := run(t, "    thinking: false\n    stream: false\n")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, r := range reqs {
			if thinking(r) != "false" || r.Stream {
				t.Fatalf("request %d: enable_thinking %s, stream %v; want false, false", r.Seq, thinking(r), r.Stream)
			}
		}
	})
	t.Run("the same client error stops the run", func(t *testing.T) {
		code, stderr, out, reqs := run(t, "    stream: false\n")
		if code != cli.ExitFailure {
			t.Fatalf("exit %d, want %d: %s", code, cli.ExitFailure, stderr)
		}
		t.Logf("stderr: %s", strings.TrimSpace(stderr))
		for _, w := range []string{"mine", fmt.Sprintf("first %d episodes", distill.StopAfterSameErrors), "HTTP 400",
			oaitest.DashScopeNonStreamMessage, "stream: true", "thinking: false", "--retry-failed"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr does not say %q", w)
			}
		}
		// The stop is decided as failures commit, in order; the worker may have started a few
		// more episodes (and sent their requests) meanwhile, but not the rest of the 30.
		if len(reqs) < distill.StopAfterSameErrors || len(reqs) >= 30 {
			t.Errorf("%d requests sent, want %d or a few more, not all 30 (the run stops at the third failure)", len(reqs), distill.StopAfterSameErrors)
		}
		t.Logf("%d requests sent before the stop", len(reqs))
		b, err := os.ReadFile(filepath.Join(out, "failures.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		// The three failures that stop the run are written; so are failures the writer commits
		// in the same batch after them (distill.StopAfterSameErrors), never more than were sent.
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) < distill.StopAfterSameErrors || len(lines) > len(reqs) {
			t.Errorf("failures.jsonl has %d lines, want %d to %d (the requests sent)", len(lines), distill.StopAfterSameErrors, len(reqs))
		}
		for _, l := range lines {
			var f struct{ Reason string }
			if err := json.Unmarshal([]byte(l), &f); err != nil || f.Reason != "policy:client_error" {
				t.Errorf("failure line %q: reason %q (%v)", l, f.Reason, err)
			}
		}
		if _, err := os.Stat(filepath.Join(out, "usage.json")); err != nil {
			t.Errorf("usage.json not written: %v", err)
		}
	})
}
