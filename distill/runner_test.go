package distill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/teachers"
)

// teacherScript plays a teacher that is wrong first and corrects itself: per question (by the
// gold map) turn 1 is a wrong column (reasoning in reasoning_content), a reply without tags, or a
// reply cut by the length limit; turn 2 is the gold; turn 3 repeats it.
func teacherScript(gold map[string]string) oaitest.Script {
	return func(r oaitest.Request) oaitest.Response {
		q := strings.TrimPrefix(strings.SplitN(r.FirstUser(), "\n", 2)[0], "Question: ")
		g, ok := gold[q]
		if !ok {
			return oaitest.Response{Content: "<think>unknown question</think>\n<sql>SELECT 1</sql>"}
		}
		if r.Turn() == 0 {
			switch len(q) % 3 {
			case 0:
				return oaitest.Response{ReasoningContent: "Let me try a column.", Content: "<sql>SELECT no_such_column FROM no_such_table</sql>"}
			case 1:
				return oaitest.Response{Content: "I would query the table."}
			default:
				return oaitest.Response{Content: "<think>long thoughts</think>\n<sql>SELECT", FinishReason: "length"}
			}
		}
		return oaitest.Response{Reasoning: "Fixed it.", Content: "<think>Now the right query.</think>\n<sql>" + g + "</sql>"}
	}
}

func goldByQuestion(tasks []datasets.Task) map[string]string {
	m := map[string]string{}
	for _, t := range tasks {
		m[strings.TrimSpace(t.Question)] = t.Gold[datasets.SQLite]
	}
	return m
}

func fakeTeacher(t testing.TB, name string, srv *oaitest.Server, mod func(*teachers.Endpoint)) *episode.PolicyHandle {
	t.Helper()
	ep := teachers.Endpoint{Name: name, BaseURL: srv.BaseURL(), Model: "test-model", MaxConcurrency: 8,
		MaxRetries: 3, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Timeout: 5 * time.Second}
	if mod != nil {
		mod(&ep)
	}
	return fakeTeacherEP(t, ep)
}

func fakeTeacherEP(t testing.TB, ep teachers.Endpoint) *episode.PolicyHandle {
	t.Helper()
	h, err := policies.FromEndpoint(ep)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func baseConfig(t testing.TB, dir string, tasks []datasets.Task, hs ...*episode.PolicyHandle) distill.RunConfig {
	return distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "test:shop", Policies: hs, Dialects: []datasets.Dialect{datasets.SQLite},
		Opener: &testOpener{tb: t}, Schemas: testSchemas(), Toolkit: "test"}
}

// committed returns the keys of a run dir's trajectories, failing on duplicates, and checks the
// shard files hold exactly the journaled lines.
func committed(t *testing.T, dir string) map[string]*rundir.Trajectory {
	t.Helper()
	out := map[string]*rundir.Trajectory{}
	err := rundir.ReadRun(dir, func(tr *rundir.Trajectory) error {
		if _, dup := out[tr.Key]; dup {
			return fmt.Errorf("key %s twice", tr.Key)
		}
		out[tr.Key] = tr
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunScriptedTeacherAndResume(t *testing.T) {
	_, tasks := makeShopDB(t)
	srv := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)))
	dir := t.TempDir()
	var log bytes.Buffer
	cfg := baseConfig(t, dir, tasks, fakeTeacher(t, "fake", srv, nil), &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}})
	cfg.Samples = 2
	cfg.Progress = &log
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := len(tasks) * 2 * 2
	if res.Total != want || res.Done != want || res.Failed != 0 {
		t.Fatalf("result %+v, want %d done", res, want)
	}
	got := committed(t, dir)
	if len(got) != want {
		t.Fatalf("%d trajectories, want %d", len(got), want)
	}
	for _, tr := range got {
		switch tr.Teacher {
		case "oracle":
			if len(tr.Turns) != 2 || !tr.Repeated {
				t.Errorf("%s: oracle turns %d converged %v", tr.Key, len(tr.Turns), tr.Repeated)
			}
		case "fake":
			if len(tr.Turns) != 3 || !tr.Repeated || !tr.ExecOK || tr.Model != "test-model" {
				t.Fatalf("%s: turns %d converged %v exec_ok %v model %q", tr.Key, len(tr.Turns), tr.Repeated, tr.ExecOK, tr.Model)
			}
			t1 := tr.Turns[0]
			switch len(strings.TrimSpace(tr.Question)) % 3 {
			case 0:
				if t1.Reasoning != "Let me try a column." || t1.ReasoningSource != "reasoning_content" || t1.Exec == nil || t1.Exec.Outcome != sandbox.OutcomeError || !strings.Contains(t1.Observation, "Error:") {
					t.Errorf("%s turn 1 (wrong SQL): %+v", tr.Key, t1)
				}
			case 1:
				if !t1.FormatViolation || tr.FormatViolations != 1 {
					t.Errorf("%s turn 1 (no tags): %+v", tr.Key, t1)
				}
			default:
				if !t1.Truncated || t1.FormatViolation || tr.FormatViolations != 0 || tr.TruncatedTurns != 1 || t1.FinishReason != "length" || !strings.Contains(t1.Observation, "length limit") {
					t.Errorf("%s turn 1 (length): %+v", tr.Key, t1)
				}
			}
			if tr.Turns[1].Reasoning != "Fixed it." || tr.Turns[1].ReasoningSource != "reasoning" || tr.Turns[1].SQL != tr.GoldSQL || tr.FinalSQL != tr.GoldSQL {
				t.Errorf("%s turn 2: %+v", tr.Key, tr.Turns[1])
			}
			if tr.Usage.Total() == 0 || tr.Turns[0].Latency <= 0 {
				t.Errorf("%s: no usage or latency", tr.Key)
			}
		}
		if matchReady() && !tr.Correct {
			t.Errorf("%s: not correct", tr.Key)
		}
	}
	u, err := rundir.ReadUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fu := u.Teachers["fake"]; fu == nil || fu.Trajectories != want/2 || fu.Requests != srv.Count() || fu.Client == nil {
		t.Fatalf("usage %+v (server saw %d requests)", fu, srv.Count())
	}
	if !strings.Contains(log.String(), "fake") {
		t.Errorf("no progress lines: %q", log.String())
	}
	var tbl bytes.Buffer
	distill.WriteSummary(&tbl, res.Summary)
	if !strings.Contains(tbl.String(), "converged") || !strings.Contains(tbl.String(), "100.0%") {
		t.Errorf("summary table:\n%s", tbl.String())
	}

	// Resume: nothing is asked again.
	before := srv.Count()
	res, err = distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Count() != before || res.Done != 0 || res.Skipped != want {
		t.Fatalf("resume redid work: %d new requests, %+v", srv.Count()-before, res)
	}

	// A different run into the same dir is refused, naming the field.
	cfg.Samples = 3
	if _, err := distill.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "samples") {
		t.Fatalf("disagreeing manifest: %v", err)
	}
}

func TestRunTornTailsAreCut(t *testing.T) {
	_, tasks := makeShopDB(t)
	dir := t.TempDir()
	cfg := baseConfig(t, dir, tasks[:3], &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}})
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	names, _ := rundir.ShardFiles(dir)
	if len(names) != 1 {
		t.Fatalf("shards %v", names)
	}
	shard := filepath.Join(dir, rundir.ShardsDir, names[0])
	data, _ := os.ReadFile(shard)
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	// Simulate a crash: the journal lost its last entry (torn), and the shard has a torn line.
	jpath := filepath.Join(dir, rundir.JournalFile)
	jdata, _ := os.ReadFile(jpath)
	jl := strings.SplitAfter(strings.TrimSuffix(string(jdata), "\n"), "\n")
	os.WriteFile(jpath, []byte(strings.Join(jl[:len(jl)-1], "")+jl[len(jl)-1][:10]), 0o644)
	f, _ := os.OpenFile(shard, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"protocol":"chained-sql/v1","key":"half`)
	f.Close()
	if n := len(committed(t, dir)); n != 2 {
		t.Fatalf("reader sees %d committed trajectories before resume, want 2", n)
	}
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 1 || len(res.Repairs) != 2 {
		t.Fatalf("resume %+v", res)
	}
	if n := len(readShardLines(t, dir)); n != 3 || len(committed(t, dir)) != 3 {
		t.Fatalf("%d shard lines after resume, want 3 (lines before: %d)", n, len(lines))
	}
}

func TestRunFaults(t *testing.T) {
	_, tasks := makeShopDB(t)
	kinds := append([]oaitest.Fault{}, oaitest.AllFaults...)
	srv := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)),
		oaitest.WithFaultRate(0.35, 7, kinds...), oaitest.WithRetryAfter(time.Millisecond), oaitest.WithSlowDelay(5*time.Millisecond))
	dir := t.TempDir()
	h := fakeTeacher(t, "flaky", srv, func(e *teachers.Endpoint) {
		e.Timeout = 300 * time.Millisecond // hangs end here
		e.MaxRetries = 2
	})
	cfg := baseConfig(t, dir, tasks, h)
	cfg.Samples = 8
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := len(tasks) * 8
	done, fails, reasons := accounted(t, dir)
	if len(done)+len(fails) != want || res.Done+res.Failed != want {
		t.Fatalf("%d keys accounted (%d done, %d failed), want %d", len(done)+len(fails), len(done), len(fails), want)
	}
	if len(fails) == 0 {
		t.Fatalf("a 35%% fault rate over every kind should make some keys fail")
	}
	t.Logf("faults %v; %d done, %d failed by reason %v; %d requests", srv.FaultCounts(), len(done), len(fails), reasons, srv.Count())
	if max := want * 3 * 3; srv.Count() > max {
		t.Fatalf("%d requests: retries are unbounded (max %d)", srv.Count(), max)
	}
	// Failed keys are skipped on resume, retried with RetryFailed.
	before := srv.Count()
	res, err = distill.Run(context.Background(), cfg)
	if err != nil || srv.Count() != before || res.Done+res.Failed != 0 {
		t.Fatalf("plain resume retried failures: %v %+v", err, res)
	}
	cfg.RetryFailed = true
	res, err = distill.Run(context.Background(), cfg)
	if err != nil || res.Done+res.Failed != len(fails) {
		t.Fatalf("retry-failed: %v %+v, want %d attempted", err, res, len(fails))
	}
	if n := len(committed(t, dir)); n != len(done)+res.Done {
		t.Fatalf("%d committed after retry, want %d", n, len(done)+res.Done)
	}
}

// TestRunNoKeyInRunDir checks that the API key reaches the teacher and never the run dir: once
// with transient faults (episodes done), once against a server that refuses the key (every
// episode a 401 failure, the run stopped early with the error), the key nowhere on disk.
func TestRunNoKeyInRunDir(t *testing.T) {
	_, tasks := makeShopDB(t)
	const key = "sk-test-SECRET-0123456789abcdef"
	t.Setenv("DISTILL_TEST_KEY", key)
	noKey := func(dir string) {
		t.Helper()
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			data, _ := os.ReadFile(p)
			if bytes.Contains(data, []byte(key)) || bytes.Contains(data, []byte("SECRET")) {
				t.Errorf("%s contains the API key", p)
			}
			return nil
		})
	}

	srv := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)), oaitest.WithAPIKey(key), oaitest.WithFaultRate(0.2, 3, oaitest.ServerError))
	dir := t.TempDir()
	h := fakeTeacher(t, "keyed", srv, func(e *teachers.Endpoint) { e.APIKeyEnv = "DISTILL_TEST_KEY" })
	cfg := baseConfig(t, dir, tasks, h)
	cfg.Samples = 3
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if len(committed(t, dir)) == 0 {
		t.Fatal("nothing committed: the key was not sent")
	}
	noKey(dir)

	refusing := oaitest.NewServer(t, teacherScript(goldByQuestion(tasks)), oaitest.WithAPIKey("sk-another-key"))
	dir = t.TempDir()
	h = fakeTeacher(t, "keyed", refusing, func(e *teachers.Endpoint) { e.APIKeyEnv = "DISTILL_TEST_KEY" })
	cfg = baseConfig(t, dir, tasks, h)
	if _, err := distill.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a refused key: %v, want the run stopped with the 401", err)
	}
	noKey(dir)
}

func TestRunCancelDrainsAndResumes(t *testing.T) {
	_, tasks := makeShopDB(t)
	gold := goldByQuestion(tasks)
	slow := func(r oaitest.Request) oaitest.Response {
		resp := teacherScript(gold)(r)
		resp.Delay = 20 * time.Millisecond
		return resp
	}
	srv := oaitest.NewServer(t, slow)
	dir := t.TempDir()
	cfg := baseConfig(t, dir, tasks, fakeTeacher(t, "slow", srv, nil))
	cfg.Samples = 10
	cfg.Concurrency = 4
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	res, err := distill.Run(ctx, cfg)
	if !errors.Is(err, distill.ErrInterrupted) {
		t.Fatalf("want ErrInterrupted, got %v (%+v)", err, res)
	}
	if res.Done == 0 || res.Done >= len(tasks)*10 || res.Abandoned != 0 {
		t.Fatalf("drain: %+v", res)
	}
	// Abort abandons in-flight episodes at once and writes nothing partial.
	ctx2, cancel2 := context.WithCancel(context.Background())
	abort, cancelAbort := context.WithCancel(context.Background())
	cfg.Abort = abort
	time.AfterFunc(100*time.Millisecond, func() { cancel2(); cancelAbort() })
	if _, err := distill.Run(ctx2, cfg); !errors.Is(err, distill.ErrInterrupted) {
		t.Fatalf("abort: %v", err)
	}
	cfg.Abort = nil
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if n := len(committed(t, dir)); n != len(tasks)*10 || len(readShardLines(t, dir)) != n {
		t.Fatalf("%d committed after resume, want %d", n, len(tasks)*10)
	}
	for _, tr := range committed(t, dir) {
		if len(tr.Turns) != 3 {
			t.Fatalf("%s: partial trajectory with %d turns", tr.Key, len(tr.Turns))
		}
	}
}

func TestRunShardsPartitionKeys(t *testing.T) {
	_, tasks := makeShopDB(t)
	oracle := &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}
	full := t.TempDir()
	cfg := baseConfig(t, full, tasks, oracle)
	cfg.Samples = 5
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	all := committed(t, full)
	union := map[string]bool{}
	for i := 0; i < 3; i++ {
		d := t.TempDir()
		c := cfg
		c.Dir = d
		c.Shard = rundir.Shard{Index: i, Count: 3}
		if _, err := distill.Run(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		m, _ := rundir.ReadManifest(d)
		if m.Shard != c.Shard {
			t.Fatalf("manifest shard %+v", m.Shard)
		}
		for k := range committed(t, d) {
			if union[k] {
				t.Fatalf("key %s in two shards", k)
			}
			union[k] = true
		}
	}
	if len(union) != len(all) {
		t.Fatalf("shards hold %d keys, the full run %d", len(union), len(all))
	}
	for k := range all {
		if !union[k] {
			t.Fatalf("key %s in no shard", k)
		}
	}
	if _, err := rundir.ParseShard("3/3"); err == nil {
		t.Fatal("3/3 accepted")
	}
}

func TestRunRotatesShards(t *testing.T) {
	_, tasks := makeShopDB(t)
	dir := t.TempDir()
	cfg := baseConfig(t, dir, tasks, &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}})
	cfg.Samples = 4
	cfg.MaxShardLines = 5
	if _, err := distill.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	names, _ := rundir.ShardFiles(dir)
	if len(names) != 5 || names[0] != "oracle.sqlite.0000.jsonl" || names[4] != "oracle.sqlite.0004.jsonl" {
		t.Fatalf("shards %v", names)
	}
	if n := len(committed(t, dir)); n != 24 {
		t.Fatalf("%d committed", n)
	}
	// Resume with a bigger task set is refused (digest/count), with the same set continues.
	cfg.Samples = 5
	if _, err := distill.Run(context.Background(), cfg); err == nil {
		t.Fatal("resume with other samples accepted")
	}
}

// sortedKeys is a helper for failure messages.
func sortedKeys(m map[string]*rundir.Trajectory) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var _ = json.Marshal
var _ sync.Mutex

// TestTasksDigestIgnoresOrder: the digest names the set of task ids, not their order; another
// set gets another digest.
func TestTasksDigestIgnoresOrder(t *testing.T) {
	tasks := []datasets.Task{{ID: "b/2", DBID: "x"}, {ID: "a/1", DBID: "y"}, {ID: "c/3", DBID: "x"}}
	rev := []datasets.Task{tasks[2], tasks[1], tasks[0]}
	if d, r := distill.TasksDigest(tasks), distill.TasksDigest(rev); d != r {
		t.Fatalf("digest %s, reversed %s", d, r)
	}
	if distill.TasksDigest(tasks) == distill.TasksDigest(tasks[:2]) {
		t.Fatal("a smaller task set has the same digest")
	}
	got := distill.GroupByDatabase(tasks)
	if got[0].ID != "b/2" || got[1].ID != "c/3" || got[2].ID != "a/1" || tasks[1].ID != "a/1" {
		t.Fatalf("grouped %v (the input must stay as it was)", got)
	}
}

// TestRunSummaryUnjudged: a task whose gold SQL does not run leaves its trajectories unjudged,
// and the run's summary says how many, next to a correct rate they lower.
func TestRunSummaryUnjudged(t *testing.T) {
	_, tasks := makeShopDB(t)
	tasks[1].Gold = map[datasets.Dialect]string{datasets.SQLite: "SELECT name FROM no_such_table"}
	cfg := baseConfig(t, t.TempDir(), tasks, &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}})
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Summary) != 1 || res.Summary[0].Unjudged != 1 || res.Summary[0].Trajectories != len(tasks) {
		t.Fatalf("summary %+v", res.Summary)
	}
	var tbl bytes.Buffer
	distill.WriteSummary(&tbl, res.Summary)
	lines := strings.Split(strings.TrimSpace(tbl.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "unjudged") || !strings.HasSuffix(strings.TrimSpace(lines[1]), " 1") {
		t.Errorf("summary table:\n%s", tbl.String())
	}
}
