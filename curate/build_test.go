package curate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"
	"gopkg.in/yaml.v3"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// handTrajectory is a short trajectory whose token counts the tests recompute a third way.
func handTrajectory(key, teacher string, turns int) *rundir.Trajectory {
	t := &rundir.Trajectory{
		Protocol: protocol.ProtocolVersion, Key: key, TaskID: "sample/1", Source: "sample", DBID: "shop",
		Question: "How many customers?", Difficulty: "simple", Dialect: "sqlite", Teacher: teacher, Model: teacher + "-1",
		GoldSQL: "SELECT COUNT(*) FROM customers;",
	}
	t.System, t.Prompt = "Dialect: SQLite 3.45.\nCREATE TABLE customers (id INTEGER);", "Question: How many customers?"
	for i := 0; i < turns; i++ {
		reply := "<think>Count the rows.</think>\n<sql>SELECT COUNT(*) FROM customers;</sql>"
		t.Turns = append(t.Turns, rundir.Turn{Index: i, Content: reply, SQL: "SELECT COUNT(*) FROM customers;", Reasoning: fmt.Sprintf("r%d", i),
			Observation: "<observation>\nCOUNT(*)\n42\n</observation>"})
	}
	t.FinalSQL = "SELECT COUNT(*) FROM customers;"
	t.Repeated, t.ExecOK, t.Correct = turns > 1, true, true
	return t
}

// mustRender renders tr in the default mode.
func mustRender(tb testing.TB, tr *rundir.Trajectory) *Rendered {
	tb.Helper()
	r, err := Render(tr, ThinkAuto)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func synthRun(tb testing.TB, dir string, n int, seed uint64, perShard int) []*rundir.Trajectory {
	s := newSynth(seed)
	trajs := make([]*rundir.Trajectory, n)
	for i := range trajs {
		trajs[i] = s.trajectory(i)
	}
	writeRun(tb, dir, trajs, perShard)
	return trajs
}

// expectedOrder is the order Build reads: run dirs as given, shard files by name, lines in order.
func expectedOrder(tb testing.TB, dirs []string) []string {
	var keys []string
	for _, d := range dirs {
		if err := readRun(context.Background(), d, nil, func(t *rundir.Trajectory, _ string) error {
			keys = append(keys, t.Key)
			return nil
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return keys
}

func TestBuildRoundTrip(t *testing.T) {
	old := syscall.Umask(0o022) // for the file modes checked below
	t.Cleanup(func() { syscall.Umask(old) })
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	runA, runB := filepath.Join(tmp, "runA"), filepath.Join(tmp, "runB")
	trajs := synthRun(t, runA, 40, 1, 7)
	hand := []*rundir.Trajectory{handTrajectory("hand/1", "alpha", 1), handTrajectory("hand/2", "alpha", 2), handTrajectory("hand/3", "beta", 3)}
	// Text that NFC rewrites (decomposed accents, Hangul jamo) and non-ASCII in every role.
	hand[2].Prompt = "Question: combien de cafe\u0301s à Zürich? \u1100\u1161 日本"
	hand[2].Turns[0].Content = "<think>e\u0301 vs \u00e9 — naïve 🤔 a\u0308\u0308</think>\n<sql>SELECT \"cafe\u0301\" FROM t;</sql>"
	hand[2].Turns[0].Reasoning = ""
	hand[2].Turns[0].Observation = "<observation>\nname\nZu\u0308rich\n</observation>"
	writeRun(t, runB, hand, 2)
	byKey := map[string]*rundir.Trajectory{}
	for _, tr := range append(trajs, hand...) {
		byKey[tr.Key] = tr
	}
	out := filepath.Join(tmp, "ds")
	rep, err := Build(context.Background(), []string{runA, runB}, BuildOptions{Tokenizer: tok, TokenizerName: "Qwen2.5", Out: out, RowsPerShard: 16, RowGroupRows: 5, Epochs: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 43 || rep.Trajectories != 43 || rep.ExcludedCount != 0 {
		t.Fatalf("report rows=%d trajectories=%d excluded=%d", rep.Rows, rep.Trajectories, rep.ExcludedCount)
	}
	wantShards := []string{"data/train-00000-of-00003.parquet", "data/train-00001-of-00003.parquet", "data/train-00002-of-00003.parquet"}
	if fmt.Sprint(rep.Shards) != fmt.Sprint(wantShards) {
		t.Fatalf("shards = %v, want %v", rep.Shards, wantShards)
	}
	// Every output is 0644 (less the umask), not CreateTemp's 0600.
	for _, s := range append(wantShards, CardFile, StatsFile) {
		st, err := os.Stat(filepath.Join(out, s))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644", s, st.Mode().Perm())
		}
	}
	// created_by names the toolkit build, never an empty "(build )".
	f, err := os.Open(filepath.Join(out, wantShards[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fst, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, fst.Size())
	if err != nil {
		t.Fatal(err)
	}
	if cb, want := pf.Metadata().CreatedBy, "chainedsql curate version "+FormatVersion+"(build "+buildinfo.Version()+")"; cb != want || strings.Contains(cb, "(build )") {
		t.Errorf("created_by %q, want %q", cb, want)
	}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".curate-") {
			t.Errorf("temporary directory %s left behind", e.Name())
		}
	}

	order := expectedOrder(t, []string{runA, runB})
	var rows []*Row
	if err := ReadRows(context.Background(), out, func(r *Row) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(order) {
		t.Fatalf("read %d rows, want %d", len(rows), len(order))
	}
	var sumTokens, sumTrainable int64
	for i, r := range rows {
		if r.Key != order[i] {
			t.Fatalf("row %d key %q, want %q (order)", i, r.Key, order[i])
		}
		tr := byKey[r.Key]
		msgs := mustRender(t, tr).Messages
		if len(r.Messages) != len(msgs) || r.Messages[len(r.Messages)-1].Role != chat.RoleAssistant {
			t.Fatalf("row %s: %d messages (last %q), want %d ending with the assistant", r.Key, len(r.Messages), r.Messages[len(r.Messages)-1].Role, len(msgs))
		}
		for j, m := range msgs {
			if r.Messages[j].Role != m.Role || r.Messages[j].Content != m.Content {
				t.Fatalf("row %s message %d differs", r.Key, j)
			}
		}
		if r.Teacher != tr.Teacher || r.Model != tr.Model || r.Dialect != string(tr.Dialect) || r.DBID != tr.DBID || r.TaskID != tr.TaskID ||
			r.Difficulty != tr.Difficulty || r.Question != tr.Question || r.Evidence != tr.Evidence || r.Turns != int64(len(tr.Turns)) ||
			r.Converged != tr.Outcome().Converged || r.ExecOK != tr.ExecOK || r.Correct != tr.Correct || r.FormatViolations != int64(tr.FormatViolations) ||
			r.MalformedTurns != int64(rundir.MalformedTurns(tr.Turns)) || r.MalformedTurns < r.FormatViolations ||
			r.FinalSQL != tr.FinalSQL || r.GoldSQL != tr.GoldSQL || r.Source != tr.Source || r.Protocol != tr.Protocol ||
			r.PromptTokens != int64(tr.Usage.PromptTokens) || len(r.Reasoning) != len(tr.Turns) {
			t.Fatalf("row %s metadata differs from the trajectory: %+v", r.Key, r)
		}
		for j, turn := range tr.Turns {
			if r.Reasoning[j] != turn.Reasoning {
				t.Fatalf("row %s reasoning %d = %q, want %q", r.Key, j, r.Reasoning[j], turn.Reasoning)
			}
		}
		wantRun := "runA"
		if strings.HasPrefix(r.Key, "hand/") {
			wantRun = "runB"
		}
		if r.SourceRun != wantRun {
			t.Errorf("row %s source_run %q, want %q", r.Key, r.SourceRun, wantRun)
		}
		// A third route to the counts: whole-text encoding for num_tokens; for the loss, every
		// assistant content here starts with a non-space, so its tokens are the header's "\n",
		// those of the content alone, <|im_end|> and the "\n" after it (TRL's training template).
		text, _ := chattmpl.Render(msgs, false)
		if n := int64(len(tok.Encode(text))); r.NumTokens != n {
			t.Errorf("row %s num_tokens %d, whole-text encoding gives %d", r.Key, r.NumTokens, n)
		}
		var want int64
		for _, m := range msgs {
			if m.Role == chat.RoleAssistant {
				want += 1 + int64(len(tok.Encode(m.Content))) + 1 + 1
			}
		}
		if r.NumTrainableTokens != want {
			t.Errorf("row %s num_trainable_tokens %d, want %d", r.Key, r.NumTrainableTokens, want)
		}
		sumTokens += r.NumTokens
		sumTrainable += r.NumTrainableTokens
	}
	if rep.Tokens.Sum != sumTokens || rep.TrainableTokens != sumTrainable {
		t.Errorf("report tokens %d/%d, rows sum to %d/%d", rep.Tokens.Sum, rep.TrainableTokens, sumTokens, sumTrainable)
	}

	// stats.json is the report.
	back, err := ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Rows != 43 || back.Tokens.Sum != sumTokens || len(back.Teachers) != 6 || back.Runs[1].Name != "runB" || back.Runs[1].Trajectories != 3 {
		t.Errorf("stats.json = %+v", back)
	}
	// Card front matter.
	card, err := os.ReadFile(filepath.Join(out, CardFile))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(string(card), "---\n", 3)
	if len(parts) != 3 || parts[0] != "" {
		t.Fatalf("card does not start with YAML front matter:\n%s", card[:min(200, len(card))])
	}
	var front struct {
		Configs []struct {
			ConfigName string                         `yaml:"config_name"`
			DataFiles  []struct{ Split, Path string } `yaml:"data_files"`
		} `yaml:"configs"`
		DatasetInfo struct {
			Features []struct {
				Name     string
				Dtype    string
				Sequence string
				List     []struct{ Name, Dtype string }
			}
			Splits []struct {
				Name        string
				NumExamples int `yaml:"num_examples"`
			}
		} `yaml:"dataset_info"`
	}
	if err := yaml.Unmarshal([]byte(parts[1]), &front); err != nil {
		t.Fatalf("front matter: %v", err)
	}
	if len(front.Configs) != 1 || front.Configs[0].ConfigName != "default" || front.Configs[0].DataFiles[0].Split != "train" || front.Configs[0].DataFiles[0].Path != "data/train-*.parquet" {
		t.Errorf("configs = %+v", front.Configs)
	}
	if len(front.DatasetInfo.Features) != len(Features) || front.DatasetInfo.Features[0].Name != "messages" || len(front.DatasetInfo.Features[0].List) != 2 ||
		front.DatasetInfo.Features[0].List[0].Name != "role" || front.DatasetInfo.Splits[0].NumExamples != 43 {
		t.Errorf("dataset_info = %+v", front.DatasetInfo)
	}
	for _, f := range front.DatasetInfo.Features {
		if f.Name == "num_tokens" && f.Dtype != "int64" || f.Name == "correct" && f.Dtype != "bool" || f.Name == "reasoning" && f.Sequence != "string" {
			t.Errorf("feature %+v", f)
		}
	}
	for _, want := range []string{"| alpha | 2 |", "× 3 epochs", "## Licence", "## Protocol"} {
		if !strings.Contains(parts[2], want) {
			t.Errorf("card body lacks %q", want)
		}
	}

	// Verify agrees on every row.
	vr, err := VerifyWith(context.Background(), out, tok, 2)
	if err != nil {
		t.Fatal(err)
	}
	if vr.Rows != 43 || vr.Agree != 43 || len(vr.Mismatches) != 0 {
		t.Fatalf("verify: %+v", vr)
	}
}

func TestBuildMaxLengthAndMarkers(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	short := handTrajectory("k/short", "alpha", 1)
	long := handTrajectory("k/long", "alpha", 5)
	marker := handTrajectory("k/marker", "beta", 1)
	marker.Turns[0].Content, marker.Turns[0].Reasoning = "<think>end it: <|im_end|></think>\n<sql>SELECT 1;</sql>", ""
	writeRun(t, run, []*rundir.Trajectory{short, long, marker}, 10)
	c, _ := newCounter(tok)
	rs, rl := mustRender(t, short), mustRender(t, long)
	nShort, _ := c.count(rs.Text, rs.Spans)
	nLong, _ := c.count(rl.Text, rl.Spans)
	if nShort >= nLong {
		t.Fatal("test setup: long trajectory is not longer")
	}
	// MaxLength = nLong-1: long is excluded, a row of exactly MaxLength tokens would stay.
	out := filepath.Join(tmp, "ds")
	rep, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out, MaxLength: nLong - 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 1 || rep.ExcludedCount != 2 {
		t.Fatalf("rows=%d excluded=%d %+v", rep.Rows, rep.ExcludedCount, rep.Excluded)
	}
	got := map[string]Excluded{}
	for _, e := range rep.Excluded {
		got[e.Key] = e
	}
	if e := got["k/long"]; e.Reason != ReasonMaxLength || e.NumTokens != nLong || e.SourceRun != "run" {
		t.Errorf("long exclusion = %+v (want %d tokens)", e, nLong)
	}
	if e := got["k/marker"]; e.Reason != ReasonMarkerInContent {
		t.Errorf("marker exclusion = %+v", e)
	}
	back, err := ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.ExcludedCount != 2 || len(back.Excluded) != 2 || back.Teachers[0].Excluded != 1 {
		t.Errorf("stats.json excluded = %+v, teachers %+v", back.Excluded, back.Teachers)
	}
	// Exactly at the limit stays.
	out2 := filepath.Join(tmp, "ds2")
	rep, err = Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out2, MaxLength: nLong})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 2 {
		t.Errorf("with MaxLength = %d (the long row's length) rows = %d, want 2", nLong, rep.Rows)
	}
}

func TestBuildDeterministic(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	synthRun(t, run, 300, 7, 40)
	var dirs []string
	for i, workers := range []int{1, 2, 3} {
		out := filepath.Join(tmp, fmt.Sprintf("ds%d", i))
		if _, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out, RowsPerShard: 128, RowGroupRows: 50, Workers: workers}); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, out)
	}
	files := listFiles(t, dirs[0])
	if len(files) != 5 { // 3 shards, README.md, stats.json
		t.Fatalf("files = %v", files)
	}
	for _, d := range dirs[1:] {
		if other := listFiles(t, d); fmt.Sprint(other) != fmt.Sprint(files) {
			t.Fatalf("file lists differ: %v vs %v", files, other)
		}
		for _, f := range files {
			a, _ := os.ReadFile(filepath.Join(dirs[0], f))
			b, _ := os.ReadFile(filepath.Join(d, f))
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs between builds (%d vs %d bytes)", f, len(a), len(b))
			}
		}
	}
}

func listFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestBuildDuplicateKey(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "part1"), filepath.Join(tmp, "part2")
	writeRun(t, a, []*rundir.Trajectory{handTrajectory("k/1", "alpha", 1), handTrajectory("k/2", "alpha", 1)}, 10)
	writeRun(t, b, []*rundir.Trajectory{handTrajectory("k/3", "alpha", 1), handTrajectory("k/2", "alpha", 2)}, 10)
	out := filepath.Join(tmp, "ds")
	_, err := Build(context.Background(), []string{a, b}, BuildOptions{Tokenizer: tok, Out: out})
	if err == nil {
		t.Fatal("duplicate key accepted")
	}
	for _, want := range []string{`"k/2"`, a, b} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("output exists after a failed build: %v", serr)
	}
	assertNoTemp(t, tmp)
	// The same run twice is the same mistake.
	if _, err := Build(context.Background(), []string{a, a}, BuildOptions{Tokenizer: tok, Out: out}); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("same run twice: %v", err)
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".curate-") {
			t.Errorf("temporary directory %s left behind", e.Name())
		}
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	writeRun(t, run, []*rundir.Trajectory{handTrajectory("k/1", "alpha", 1)}, 10)

	// Output exists and is not empty.
	full := filepath.Join(tmp, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	if _, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: full}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty output: %v", err)
	}
	// An empty directory is fine.
	empty := filepath.Join(tmp, "empty")
	os.MkdirAll(empty, 0o755)
	if _, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: empty}); err != nil {
		t.Errorf("empty output dir: %v", err)
	}
	// Not a run dir.
	if _, err := Build(context.Background(), []string{tmp}, BuildOptions{Tokenizer: tok, Out: filepath.Join(tmp, "o1")}); err == nil || !strings.Contains(err.Error(), "manifest.json") {
		t.Errorf("no shards: %v", err)
	}
	// A torn, unjournaled last line (a run still being written): only committed lines count.
	torn := filepath.Join(tmp, "torn")
	writeRun(t, torn, []*rundir.Trajectory{handTrajectory("k/1", "alpha", 1)}, 10)
	f, _ := os.OpenFile(filepath.Join(torn, "shards", "alpha.sqlite.0000.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"key":"k/2","messa`)
	f.Close()
	rep, err := Build(context.Background(), []string{torn}, BuildOptions{Tokenizer: tok, Out: filepath.Join(tmp, "o2")})
	if err != nil || rep.Rows != 1 {
		t.Errorf("torn line: rows %v, err %v", rep, err)
	}
	assertNoTemp(t, tmp)
}

func TestBuildCancelLeavesNothing(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	synthRun(t, run, 400, 3, 100)
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(tmp, "ds")
	_, err := Build(ctx, []string{run}, BuildOptions{Tokenizer: tok, Out: out, RowsPerShard: 50, Progress: func(p BuildProgress) {
		if p.Rows >= 100 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("output exists after cancel: %v", serr)
	}
	assertNoTemp(t, tmp)
}

func TestVerifyFindsWrongCounts(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	writeRun(t, run, []*rundir.Trajectory{handTrajectory("k/1", "alpha", 1), handTrajectory("k/2", "alpha", 2)}, 10)
	out := filepath.Join(tmp, "ds")
	if _, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out}); err != nil {
		t.Fatal(err)
	}
	var rows []Row
	ReadRows(context.Background(), out, func(r *Row) error { rows = append(rows, *r); return nil })
	rows[1].NumTrainableTokens++
	rewrite(t, filepath.Join(out, "data", "train-00000-of-00001.parquet"), rows)
	vr, err := VerifyWith(context.Background(), out, tok, 1)
	if err != nil {
		t.Fatal(err)
	}
	if vr.Rows != 2 || vr.Agree != 1 || len(vr.Mismatches) != 1 || vr.Mismatches[0].Key != "k/2" || vr.Mismatches[0].Index != 1 ||
		vr.Mismatches[0].RecomputedTrainable != rows[1].NumTrainableTokens-1 || !strings.Contains(vr.Mismatches[0].Problem, "num_trainable_tokens") {
		b, _ := json.Marshal(vr)
		t.Fatalf("verify = %s", b)
	}
	if a := vr.Agreement(); a != 0.5 {
		t.Errorf("agreement = %v", a)
	}
}

func TestCountJoinedHeaderNewline(t *testing.T) {
	tok := loadTokenizer(t)
	c, err := newCounter(tok)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := newScanner(tok)
	// Content starting with newlines: the pre-tokenizer joins the header's "\n" with them into
	// one token, which lies inside the span (it starts at that "\n"); both routes count it, and
	// no token straddles a span edge.
	msgs := []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "\n\nSELECT 1"}, {Role: "user", Content: "o"}, {Role: "assistant", Content: ""}}
	text, spans := chattmpl.Render(msgs, false)
	n, trainable := c.count(text, spans)
	ids := tok.Encode(text)
	if n != len(ids) {
		t.Fatalf("count %d tokens, whole encoding %d", n, len(ids))
	}
	st, blocks, problem := sc.trainable(ids)
	if problem != "" || blocks != 2 || st != trainable {
		t.Fatalf("scanner %d (%d blocks, %q), offsets %d", st, blocks, problem, trainable)
	}
	_, offs := tok.EncodeOffsets(text)
	for _, o := range offs {
		for _, s := range spans {
			if o.Start < s.Start && o.End > s.Start || o.Start < s.End && o.End > s.End {
				t.Errorf("token [%d,%d) straddles span [%d,%d)", o.Start, o.End, s.Start, s.End)
			}
		}
	}
	// The first message: the joined "\n\n\n", the content, <|im_end|>, "\n"; the second (empty)
	// trains on "\n", <|im_end|>, "\n".
	if want := len(tok.Encode("\n\n\n")) + len(tok.Encode("SELECT 1")) + 2 + 3; trainable != want {
		t.Errorf("trainable = %d, want %d (joined newline token, content, <|im_end|> and \"\\n\" twice, one \"\\n\" header)", trainable, want)
	}
}
