package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/inference/student/studenttest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/rollout"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestRolloutServeReloads drives the built `student rollout --serve` on the tiny model, decoding
// one sequence at a time without prefix reuse so that a rollout repeats bit for bit: a rollout,
// a reload of a changed checkpoint, the same rollout again (other tokens: the new weights), a
// reload of the first checkpoint and the rollout once more (the first one's tokens). A rollout
// running while the weights flip finishes, whole, on the weights it started with, and chat
// requests sent meanwhile are all answered.
func TestRolloutServeReloads(t *testing.T) {
	bin := testbin.Build(t, ".")
	base := shared.Path(t, "models/tiny-qwen2-f32")
	other := studenttest.Perturbed(t, base, "model.norm.weight", nil)
	dir := t.TempDir()
	cmd, url, sc := startListening(t, bin, "rollout", "--serve", "127.0.0.1:0", "--api-key", "sk-rl", "--out-dir", dir, "--weights-root", "/",
		"--tasks", "sample", "--db-root", t.TempDir(), "--limit", "2", "--group", "2", "--max-turns", "2", "--max-tokens", "6",
		"--seed", "9", "--batch", "1", "--cache-tokens", "-1")
	logged := collect(sc)
	post := func(route, key string, body any) (int, map[string]any) {
		t.Helper()
		return postJSON(t, url+route, key, body)
	}
	// play runs a rollout to name and returns the weights version it ran on and its token ids.
	play := func(name string) (float64, [][]int32) {
		t.Helper()
		file := filepath.Join(dir, name)
		code, out := post("/v1/rollouts", "sk-rl", map[string]any{"out": file})
		if code != 200 || out["episodes"] != 4.0 || out["out"] != file {
			t.Fatalf("rollout %s: %d %v", name, code, out)
		}
		rows, err := rollout.Read(file)
		if err != nil || len(rows) != 4 {
			t.Fatalf("%s: %d rows, %v", name, len(rows), err)
		}
		var ids [][]int32
		for _, r := range rows {
			ids = append(ids, r.TokenIDs)
		}
		return out["weights"].(map[string]any)["version"].(float64), ids
	}
	reload := func(path string, version float64) {
		t.Helper()
		if code, out := post("/v1/weights", "sk-rl", map[string]string{"path": path}); code != 200 || out["version"] != version {
			t.Fatalf("reload of %s: %d %v", path, code, out)
		}
	}
	if code, _ := post("/v1/rollouts", "", map[string]any{"out": filepath.Join(dir, "x.parquet")}); code != 401 {
		t.Fatalf("a rollout without the key: %d", code)
	}
	if code, out := post("/v1/rollouts", "sk-rl", map[string]any{"seed": 1}); code != 400 {
		t.Fatalf("a rollout without out: %d %v", code, out)
	}
	v, first := play("a.parquet")
	if v != 1 {
		t.Fatalf("first rollout on weights %v", v)
	}
	reload(other, 2)
	v, second := play("b.parquet")
	if v != 2 || slices.EqualFunc(first, second, slices.Equal) {
		t.Fatalf("after the reload: version %v, the same tokens %v", v, slices.EqualFunc(first, second, slices.Equal))
	}
	reload(base, 3)
	if v, again := play("c.parquet"); v != 3 || !slices.EqualFunc(first, again, slices.Equal) {
		t.Fatalf("back on the first weights (version %v): other tokens", v)
	}
	// A rollout and chat requests while the weights flip twice: none is lost, and the rollout's
	// tokens are those of the weights it names.
	var wg sync.WaitGroup
	var during [][]int32
	var dv float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		dv, during = play("d.parquet")
	}()
	chats := make([]int, 4)
	for i := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chats[i], _ = post("/v1/chat/completions", "sk-rl", map[string]any{"model": "tiny-qwen2-f32", "max_tokens": 4,
				"messages": []map[string]string{{"role": "user", "content": "How many singers?"}}})
		}()
	}
	time.Sleep(50 * time.Millisecond)
	reload(other, 4)
	reload(base, 5)
	wg.Wait()
	want := first // versions 3 and 5 are the first checkpoint, 4 the other
	if dv == 4 {
		want = second
	}
	if !slices.EqualFunc(during, want, slices.Equal) {
		t.Errorf("the rollout during the reloads names weights %v but has other tokens", dv)
	}
	if slices.ContainsFunc(chats, func(c int) bool { return c != 200 }) {
		t.Errorf("chat requests during the reloads: %v", chats)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case log := <-logged:
		if !strings.Contains(log, "rollouts: seed 9 to "+filepath.Join(dir, "b.parquet")+" on weights version 2") {
			t.Errorf("no rollout in the log:\n%s", log)
		}
	case <-time.After(time.Minute):
		t.Fatal("no exit a minute after SIGINT")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGINT: %v", err)
	}
}

// postJSON posts body as JSON to url, with the key when not empty, and returns the status and
// the decoded reply (0 and nil, and the test's error, when there is none).
func postJSON(t *testing.T, url, key string, body any) (int, map[string]any) {
	t.Helper()
	data, _ := json.Marshal(body)
	r, _ := http.NewRequest("POST", url, bytes.NewReader(data))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestRolloutServeConfinesOut drives the built `student rollout --serve --out-dir DIR`: a
// request's out is a file in DIR. An absolute path elsewhere, a name climbing out with "..", a
// subdirectory that is a symbolic link out of DIR, a link at the name, a text file in DIR and
// another tool's Parquet file are refused (403 in OpenAI's error shape, param out) and left as
// they were, a missing directory is 400; a fresh name (relative, or absolute inside DIR) is
// written, and a rollout table written before is replaced.
func TestRolloutServeConfinesOut(t *testing.T) {
	bin := testbin.Build(t, ".")
	base := t.TempDir()
	dir, outside := filepath.Join(base, "runs"), filepath.Join(base, "walk")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim, notes := filepath.Join(outside, "victim.txt"), filepath.Join(dir, "notes.txt")
	for _, p := range []string{victim, notes} {
		if err := os.WriteFile(p, []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	foreign := filepath.Join(dir, "prompts.parquet")
	if err := os.WriteFile(foreign, []byte("PAR1 not a rollout table PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link.parquet")); err != nil {
		t.Fatal(err)
	}
	_, url, _ := startListening(t, bin, "rollout", "--serve", "127.0.0.1:0", "--out-dir", dir,
		"--tasks", "sample", "--db-root", t.TempDir(), "--limit", "1", "--group", "2", "--max-turns", "1", "--max-tokens", "2")
	for _, c := range []struct {
		out  string
		code int
	}{
		{filepath.Join(outside, "evil.parquet"), 403},
		{victim, 403},
		{"../walk/victim.txt", 403},
		{"escape/victim.txt", 403},
		{"escape/new.parquet", 403},
		{"link.parquet", 403},
		{"notes.txt", 403},
		{notes, 403},
		{"prompts.parquet", 403},
		{"missing/x.parquet", 400},
	} {
		code, out := postJSON(t, url+"/v1/rollouts", "", map[string]any{"out": c.out})
		e, _ := out["error"].(map[string]any)
		if code != c.code || e == nil || e["param"] != "out" || e["type"] != "invalid_request_error" || e["message"] == "" {
			t.Errorf("out %q: %d %v, want %d in OpenAI's error shape with param out", c.out, code, out, c.code)
		}
	}
	for _, p := range []string{victim, notes} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "keep me\n" {
			t.Errorf("%s: %q, %v after the refusals", p, b, err)
		}
	}
	if b, err := os.ReadFile(foreign); err != nil || string(b) != "PAR1 not a rollout table PAR1" {
		t.Errorf("%s changed: %q, %v", foreign, b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link.parquet")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.parquet is no longer the link: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("%s holds %d files, want only victim.txt", outside, len(ents))
	}
	for _, name := range []string{"fresh.parquet", filepath.Join(dir, "abs.parquet"), "fresh.parquet"} {
		code, out := postJSON(t, url+"/v1/rollouts", "", map[string]any{"out": name})
		want := filepath.Join(dir, filepath.Base(name))
		if code != 200 || out["out"] != want || out["episodes"] != 2.0 {
			t.Fatalf("out %q: %d %v, want %s written", name, code, out, want)
		}
		if rows, err := rollout.Read(want); err != nil || len(rows) != 2 {
			t.Fatalf("%s: %d rows, %v", want, len(rows), err)
		}
	}
}

// TestRolloutServeSelectsTasks drives the built `student rollout --serve` on six sample tasks
// with G = 2: task_ids plays exactly those tasks, in the order given, G rows each with their
// places among the tasks served; an unknown id is 400 naming it; subset plays the tasks of one
// subset under --val-fraction and --subset-seed (datasets.Subsets, env's assignment), the
// server's --subset being the default, and an id outside the subset is 400.
func TestRolloutServeSelectsTasks(t *testing.T) {
	bin := testbin.Build(t, ".")
	dir, dbRoot := t.TempDir(), t.TempDir()
	tasks, err := datasets.LoadTasks(datasets.SpecSample, dbRoot)
	if err != nil {
		t.Fatal(err)
	}
	tasks = tasks[:6]
	sub := datasets.Subsets{ValFraction: 0.5, Seed: 3}
	want := map[string][]int{}
	for i, task := range tasks {
		want[sub.Of(task.ID)] = append(want[sub.Of(task.ID)], i)
	}
	if len(want[datasets.SubsetTrain]) == 0 || len(want[datasets.SubsetVal]) == 0 {
		t.Fatalf("the six tasks split %v: want both subsets", want)
	}
	_, url, _, before := startLogged(t, bin, append(append([]string{"rollout"}, tinyArgs(t)...), "--serve", "127.0.0.1:0", "--out-dir", dir,
		"--tasks", "sample", "--db-root", dbRoot, "--limit", "6", "--group", "2", "--max-turns", "1", "--max-tokens", "2",
		"--val-fraction", "0.5", "--subset-seed", "3", "--subset", "train", "--max-n", "2")...)
	// The chat API beside it takes --max-n and the sampling defaults as student serve does (the
	// tiny checkpoint sets none: temperature 1).
	code, out := postJSON(t, url+"/v1/chat/completions", "", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 1, "n": 3})
	if e, _ := out["error"].(map[string]any); code != 400 || e["param"] != "n" || !strings.Contains(fmt.Sprint(e["message"]), "maximum of 2") {
		t.Errorf("n 3 under --max-n 2: %d %v", code, out)
	}
	if log := strings.Join(before, "\n"); !strings.Contains(log, "chat completions' sampling defaults of a request that leaves them out: temperature 1, top_p 1, top_k off, max_tokens 2048") {
		t.Errorf("start-up log without the chat completions' defaults:\n%s", log)
	}
	code, out = postJSON(t, url+"/v1/chat/completions", "", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 6, "n": 2})
	if cs, _ := out["choices"].([]any); code != 200 || len(cs) != 2 || fmt.Sprint(cs[0].(map[string]any)["message"]) == fmt.Sprint(cs[1].(map[string]any)["message"]) {
		t.Errorf("n 2 without a temperature: %d %v, want two draws", code, out)
	}
	// play posts body and checks the rows: G per task index of places, in that order.
	play := func(body map[string]any, places []int) {
		t.Helper()
		code, out := postJSON(t, url+"/v1/rollouts", "", body)
		if code != 200 || out["episodes"] != float64(2*len(places)) || out["tasks"] != float64(len(places)) {
			t.Fatalf("%v: %d %v", body, code, out)
		}
		rows, err := rollout.Read(filepath.Join(dir, body["out"].(string)))
		if err != nil || len(rows) != 2*len(places) {
			t.Fatalf("%v: %d rows, %v", body, len(rows), err)
		}
		for i, r := range rows {
			p := places[i/2]
			if r.TaskID != tasks[p].ID || r.TaskIndex != int64(p) || r.Group != int64(i/2) || r.Sample != int64(i%2) {
				t.Fatalf("%v: row %d is task %s (index %d) group %d sample %d, want %s (index %d) group %d sample %d",
					body, i, r.TaskID, r.TaskIndex, r.Group, r.Sample, tasks[p].ID, p, i/2, i%2)
			}
		}
	}
	val, train := want[datasets.SubsetVal], want[datasets.SubsetTrain]
	if len(train) < 2 {
		t.Fatalf("train holds %v: want two tasks", train)
	}
	last, first := train[len(train)-1], train[0]
	play(map[string]any{"out": "ids.parquet", "task_ids": []string{tasks[last].ID, tasks[first].ID}}, []int{last, first})
	play(map[string]any{"out": "twice.parquet", "task_ids": []string{tasks[val[0]].ID, tasks[val[0]].ID}, "subset": "val"}, []int{val[0], val[0]})
	play(map[string]any{"out": "val.parquet", "subset": "val"}, val)
	play(map[string]any{"out": "train.parquet"}, train)
	for _, c := range []struct {
		body        map[string]any
		param, name string
	}{
		{map[string]any{"out": "x.parquet", "task_ids": []string{tasks[first].ID, "sample/nope"}}, "task_ids", `"sample/nope"`},
		{map[string]any{"out": "x.parquet", "task_ids": []string{tasks[val[0]].ID}}, "task_ids", "not in subset train"},
		{map[string]any{"out": "x.parquet", "task_ids": []string{}}, "task_ids", "empty"},
		{map[string]any{"out": "x.parquet", "subset": "test"}, "subset", "want train or val"},
	} {
		code, out := postJSON(t, url+"/v1/rollouts", "", c.body)
		e, _ := out["error"].(map[string]any)
		if msg, _ := e["message"].(string); code != 400 || e["param"] != c.param || !strings.Contains(msg, c.name) {
			t.Errorf("%v: %d %v, want 400 on %s naming %s", c.body, code, out, c.param, c.name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.parquet")); err == nil {
		t.Error("a refused selection wrote its file")
	}
}

// TestRolloutServeRecordsWeights drives the built `student rollout --serve --log-dir` across a
// reload (two tiny checkpoints: the shared one and a copy with its final norm negated): every
// row of each table, every trajectory in the log, the reply and the request log name the
// checkpoint that decoded the rollout, its directory and version (1, then 2), not only the
// model id, which the reload keeps.
func TestRolloutServeRecordsWeights(t *testing.T) {
	bin := testbin.Build(t, ".")
	base := shared.Path(t, "models/tiny-qwen2-f32")
	other := studenttest.Perturbed(t, base, "model.norm.weight", nil)
	dir := t.TempDir()
	logDir := filepath.Join(t.TempDir(), "log")
	cmd, url, sc := startListening(t, bin, "rollout", "--serve", "127.0.0.1:0", "--out-dir", dir, "--log-dir", logDir, "--weights-root", "/",
		"--tasks", "sample", "--db-root", t.TempDir(), "--limit", "2", "--group", "2", "--max-turns", "1", "--max-tokens", "2")
	logged := collect(sc)
	want := map[int64]string{1: base, 2: other}
	models := map[string]bool{}
	for _, step := range []struct {
		seed    int64
		version int64
	}{{1, 1}, {2, 2}} {
		if step.version == 2 {
			if code, out := postJSON(t, url+"/v1/weights", "", map[string]string{"path": other}); code != 200 || out["version"] != 2.0 {
				t.Fatalf("reload: %d %v", code, out)
			}
		}
		name := fmt.Sprintf("step-%d.parquet", step.seed)
		code, out := postJSON(t, url+"/v1/rollouts", "", map[string]any{"out": name, "seed": step.seed})
		w, _ := out["weights"].(map[string]any)
		if code != 200 || w["version"] != float64(step.version) || w["path"] != want[step.version] {
			t.Fatalf("rollout of seed %d: %d %v, want weights version %d from %s", step.seed, code, out, step.version, want[step.version])
		}
		rows, err := rollout.Read(filepath.Join(dir, name))
		if err != nil || len(rows) != 4 {
			t.Fatalf("%s: %d rows, %v", name, len(rows), err)
		}
		for _, r := range rows {
			if r.WeightsVersion != step.version || r.WeightsPath != want[step.version] {
				t.Errorf("%s: row %d/%d names weights version %d from %q, want %d from %s", name, r.Group, r.Sample, r.WeightsVersion, r.WeightsPath, step.version, want[step.version])
			}
			models[r.Model] = true
		}
	}
	if len(models) != 1 {
		t.Errorf("model ids %v: a reload keeps the server's", models)
	}
	n := 0
	err := rundir.ReadRun(logDir, func(tr *rundir.Trajectory) error {
		n++
		v := int64(1)
		if strings.Contains(tr.Key, "/seed2/") {
			v = 2
		}
		if tr.WeightsVersion != v || tr.WeightsPath != want[v] {
			return fmt.Errorf("trajectory %s names weights version %d from %q, want %d from %s", tr.Key, tr.WeightsVersion, tr.WeightsPath, v, want[v])
		}
		return nil
	})
	if err != nil || n != 8 {
		t.Fatalf("log: %d trajectories, %v", n, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case log := <-logged:
		if !strings.Contains(log, "on weights version 2 ("+other+")") {
			t.Errorf("the request log does not name the second checkpoint:\n%s", log)
		}
	case <-time.After(time.Minute):
		t.Fatal("no exit a minute after SIGINT")
	}
	cmd.Wait()
}
