package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestInterrupt: with a teacher that never answers in time, the first Ctrl-C lets the episodes
// in flight drain (distill keeps running), the second abandons them with a note, and distill
// exits 130.
func TestInterrupt(t *testing.T) {
	bin := testbin.Build(t, ".")
	var requests atomic.Int32
	srv := oaitest.NewServer(t, func(oaitest.Request) oaitest.Response {
		requests.Add(1)
		return oaitest.Response{Delay: time.Minute}
	})
	cfg := filepath.Join(t.TempDir(), "teachers.yaml")
	text := fmt.Sprintf("defaults:\n  base_url: %s\n  api_key_env: \"\"\n  max_retries: 0\n  max_concurrency: 2\n", srv.BaseURL())
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "--teachers", "glm", "--tasks", "sample", "--limit", "4",
		"--out", filepath.Join(t.TempDir(), "run"), "--progress", "off", "--drain-timeout", "1m")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAINEDSQL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logPath := filepath.Join(t.TempDir(), "stderr")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	stderr := func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill() // when the test failed before its end
	for deadline := time.Now().Add(time.Minute); requests.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no request reached the teacher in a minute:\n%s", stderr())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		t.Fatalf("exited on the first Ctrl-C (%v) instead of draining:\n%s", err, stderr())
	case <-time.After(500 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitInterrupted {
			t.Fatalf("after the second Ctrl-C: %v, want exit status 130:\n%s", err, stderr())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after the second Ctrl-C:\n%s", stderr())
	}
	if !strings.Contains(stderr(), "distill: abandoning the episodes in flight\n") {
		t.Errorf("stderr has no note of the abandoned episodes:\n%s", stderr())
	}
}
