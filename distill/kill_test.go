package distill_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/teachers"
)

const killSamples = 30

// TestKillChild is the child process of TestKillAndResume (it does nothing in a normal run): it
// distils into $DISTILL_KILL_DIR against the teacher at $DISTILL_KILL_URL.
func TestKillChild(t *testing.T) {
	dir := os.Getenv("DISTILL_KILL_DIR")
	if dir == "" {
		t.Skip("child of TestKillAndResume only")
	}
	tasks := shopTasks(os.Getenv("DISTILL_KILL_DB"))
	samples := killSamples
	if n, err := strconv.Atoi(os.Getenv("DISTILL_KILL_SAMPLES")); err == nil && n > 0 {
		samples = n
	}
	ep := teachers.Endpoint{Name: "fake", BaseURL: os.Getenv("DISTILL_KILL_URL"), Model: "test-model", MaxConcurrency: 8,
		MaxRetries: 3, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Timeout: 5 * time.Second}
	h := fakeTeacherEP(t, ep)
	cfg := distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "test:shop", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{h, {Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}},
		Samples:  samples, Opener: &sandbox.Connector{}, Schemas: testSchemas(), Concurrency: 4, MaxShardLines: 37}
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// TestKillAndResume SIGKILLs a distilling process at random moments, then lets a rerun finish:
// the committed keys are exactly the full key set, each once, and the shards hold nothing else.
func TestKillAndResume(t *testing.T) {
	if os.Getenv("DISTILL_KILL_DIR") != "" {
		t.Skip("in the child")
	}
	path, tasks := makeShopDB(t)
	gold := goldByQuestion(tasks)
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		resp := teacherScript(gold)(r)
		resp.Delay = 15 * time.Millisecond
		return resp
	})
	dir := t.TempDir()
	kills := killLoop(t, 6, rand.New(rand.NewPCG(1, 2)), 150, 400, func() *exec.Cmd { return killChild(dir, srv.BaseURL(), path) })
	got := committed(t, dir)
	want := map[string]bool{}
	for _, task := range tasks {
		for _, teacher := range []string{"fake", "oracle"} {
			for s := 0; s < killSamples; s++ {
				want[episode.Key(task.ID, teacher, datasets.SQLite, s)] = true
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys committed, want %d", len(got), len(want))
	}
	for k := range want {
		if got[k] == nil {
			t.Fatalf("key %s lost", k)
		}
	}
	if lines := readShardLines(t, dir); len(lines) != len(want) {
		t.Fatalf("%d shard lines for %d keys: duplicates or leftovers", len(lines), len(want))
	}
	t.Logf("%d of 6 runs killed mid-run; %d keys complete", kills, len(got))
	if kills == 0 {
		t.Fatal("no run was killed mid-run: the test proved nothing")
	}
}

// killChild is a command that runs this test binary as TestKillChild, distilling the shop
// database at db into dir against the teacher at url; env adds variables (DISTILL_KILL_SAMPLES).
func killChild(dir, url, db string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "DISTILL_KILL_DIR="+dir, "DISTILL_KILL_URL="+url, "DISTILL_KILL_DB="+db), env...)
	return cmd
}

// killLoop starts child n times, SIGKILLs each after lo plus up to spread milliseconds, then runs
// it once more to completion. It returns how many runs the kill hit before they ended.
func killLoop(t *testing.T, n int, rng *rand.Rand, lo, spread int, child func() *exec.Cmd) int {
	t.Helper()
	kills := 0
	for range n {
		cmd := child()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(lo+rng.IntN(spread)) * time.Millisecond)
		cmd.Process.Kill()
		var ee *exec.ExitError
		if err := cmd.Wait(); errors.As(err, &ee) && !ee.Exited() {
			kills++
		}
	}
	if out, err := child().CombinedOutput(); err != nil {
		t.Fatalf("final run: %v\n%s", err, out)
	}
	return kills
}
