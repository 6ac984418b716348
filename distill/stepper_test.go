package distill_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// flakyDB fails the execution after the next skip ones with a database error, when armed.
type flakyDB struct {
	sandbox.DB
	armed bool
	skip  int
}

var errConnLost = errors.New("connection lost")

func (f *flakyDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if f.armed {
		if f.skip == 0 {
			f.armed = false
			return nil, errConnLost
		}
		f.skip--
	}
	return f.DB.Exec(ctx, q, opts)
}

// TestStepperEqualsEpisode: replies fed to a Stepper one by one give the trajectory Episode
// gives for the same replies from a policy (timings aside).
func TestStepperEqualsEpisode(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	replies := []chat.Reply{
		{Content: "no tags at all", FinishReason: "stop"},
		{Content: "<think>a</think>\n<sql>SELECT count(nme) FROM customer</sql>"},
		{Content: "<think>b</think>\n<sql>SELECT count(*) FROM customer</sql>", Model: "m1"},
		{Content: "<think>c</think>\n<sql>SELECT count(*) FROM customer</sql>"},
	}
	opts := episode.EpisodeOptions{Teacher: "t", Schemas: testSchemas()}
	want, err := episode.Episode(context.Background(), scripted(replies...), tasks[0], db, opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := episode.NewStepper(context.Background(), tasks[0], db, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range replies {
		if st.Done() {
			t.Fatalf("done before reply %d", i+1)
		}
		if conv := want.Conversation(); !reflect.DeepEqual(st.Messages(), conv[:len(st.Messages())]) {
			t.Fatalf("reply %d: the conversation so far differs from Episode's", i+1)
		}
		r.Usage = chat.Usage{PromptTokens: 10, CompletionTokens: 5} // as scripted sets it
		if _, err := st.Step(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if !st.Done() {
		t.Fatal("not done after convergence")
	}
	if _, err := st.Step(context.Background(), replies[0]); !errors.Is(err, episode.ErrEpisodeDone) {
		t.Fatalf("step after the end: %v", err)
	}
	got := st.Trajectory()
	clearTimes(got)
	clearTimes(want)
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Fatalf("stepper trajectory\n%s\nepisode trajectory\n%s", g, w)
	}
}

func clearTimes(tr *rundir.Trajectory) {
	tr.Started, tr.Duration = time.Time{}, 0
	for i := range tr.Turns {
		tr.Turns[i].Latency = 0
		if e := tr.Turns[i].Exec; e != nil {
			e.Duration = 0
		}
	}
}

// TestStepperDatabaseErrorChangesNothing: a step whose execution (or, at the end, whose judging)
// fails with a database error leaves the episode as it was, and the same reply then succeeds.
func TestStepperDatabaseErrorChangesNothing(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := &flakyDB{DB: openTestDB(t, path)}
	st, err := episode.NewStepper(context.Background(), tasks[0], db, episode.EpisodeOptions{Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	r := chat.Reply{Content: "<think>x</think>\n<sql>SELECT count(*) FROM customer</sql>", Usage: chat.Usage{PromptTokens: 3}}
	for turn := 1; turn <= 2; turn++ {
		before := *st.Trajectory()
		beforeMsgs := append([]chat.Message(nil), st.Messages()...)
		// Turn 1 fails in its execution, turn 2 (which converges) in the gold's, after its own.
		db.armed, db.skip = true, turn-1
		if _, err := st.Step(context.Background(), r); !errors.Is(err, errConnLost) {
			t.Fatalf("turn %d: want the database error, got %v", turn, err)
		}
		after := st.Trajectory()
		if st.Done() || len(after.Turns) != len(before.Turns) || !reflect.DeepEqual(st.Messages(), beforeMsgs) || after.Usage != before.Usage || after.Repeated {
			t.Fatalf("turn %d: a failed step changed the episode: %+v", turn, after)
		}
		tu, err := st.Step(context.Background(), r)
		if err != nil || tu.Index != turn {
			t.Fatalf("turn %d retried: %+v %v", turn, tu, err)
		}
	}
	tr := st.Trajectory()
	if !st.Done() || !tr.Repeated || !tr.ExecOK || tr.Usage.PromptTokens != 6 || len(st.Messages()) != 5 || len(tr.Conversation()) != 5 {
		t.Fatalf("done=%v converged=%v exec_ok=%v usage=%+v messages=%d", st.Done(), tr.Repeated, tr.ExecOK, tr.Usage, len(st.Messages()))
	}
	if matchReady() && !tr.Correct {
		t.Fatalf("not judged correct after the retried judging (gold error %q)", tr.GoldError)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStepperJudgesEarlierResult: the final SQL of an episode that ends on format violations is
// judged in full, though a live episode keeps no rows between turns.
func TestStepperJudgesEarlierResult(t *testing.T) {
	if !matchReady() {
		t.Skip("judge.Match not built")
	}
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	gold := tasks[0].Gold[datasets.SQLite]
	st, err := episode.NewStepper(context.Background(), tasks[0], db, episode.EpisodeOptions{MaxTurns: 3, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"<think>x</think>\n<sql>" + gold + "</sql>", "no tags", "still none"} {
		if _, err := st.Step(context.Background(), chat.Reply{Content: c}); err != nil {
			t.Fatal(err)
		}
	}
	tr := st.Trajectory()
	if !st.Done() || tr.Repeated || !tr.ExecOK || tr.FinalSQL != gold || !tr.Correct || tr.FormatViolations != 2 {
		t.Fatalf("done %v converged %v exec_ok %v final %q correct %v violations %d", st.Done(), tr.Repeated, tr.ExecOK, tr.FinalSQL, tr.Correct, tr.FormatViolations)
	}
}

// TestStepperBoundsTexts: what a Stepper keeps of a reply and of an execution is bounded
// (internal/textcap): the reply's content and reasoning after it was parsed whole, the engine's
// error, a statement over the limit (refused unrun); and a refusal says "Refused" once.
func TestStepperBoundsTexts(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	st, err := episode.NewStepper(context.Background(), tasks[0], db, episode.EpisodeOptions{Teacher: "t", Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("é", 1<<20) // 2 MiB
	missing := `SELECT * FROM "` + strings.Repeat("n", 60000) + `"`
	tu, err := st.Step(context.Background(), chat.Reply{Content: "<think>" + big + "</think>\n<sql>" + missing + "</sql>", Reasoning: big, FinishReason: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	if tu.SQL != missing || tu.Exec == nil || tu.Exec.Outcome != sandbox.OutcomeError {
		t.Fatalf("turn 1 ran %.40q: %+v", tu.SQL, tu.Exec)
	}
	for name, s := range map[string]string{"content": tu.Content, "reasoning": tu.Reasoning} {
		if len(s) > textcap.Reply || !strings.HasSuffix(s, " bytes]") || !utf8.ValidString(s) {
			t.Errorf("%s kept: %d bytes, ends %q", name, len(s), s[max(0, len(s)-30):])
		}
	}
	if n := len(tu.Exec.Error); n > textcap.Error || n < textcap.Error-100 || !strings.HasPrefix(tu.Exec.Error, "no such table: nnn") {
		t.Errorf("error kept: %d bytes: %.60q", n, tu.Exec.Error)
	}
	if msgs := st.Messages(); msgs[2].Content != tu.Content {
		t.Error("the conversation holds another copy of the reply than the turn")
	}

	long := "SELECT 1 -- " + strings.Repeat("x", textcap.SQL)
	tu, err = st.Step(context.Background(), chat.Reply{Content: "<think>a</think>\n<sql>" + long + "</sql>", FinishReason: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	if tu.Exec == nil || tu.Exec.Outcome != sandbox.OutcomeRefused || len(tu.SQL) > textcap.SQL ||
		!strings.Contains(tu.Observation, fmt.Sprintf("Refused: the statement is %d bytes long; at most %d are run", len(long), textcap.SQL)) {
		t.Errorf("a statement over the limit: sql %d bytes, exec %+v, %s", len(tu.SQL), tu.Exec, tu.Observation)
	}

	tu, err = st.Step(context.Background(), chat.Reply{Content: "<think>a</think>\n<sql>DELETE FROM customer</sql>", FinishReason: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tu.Observation, "<observation>\nRefused: ") || strings.Count(strings.ToLower(tu.Observation), "refused") != 1 {
		t.Errorf("refusal observation %q", tu.Observation)
	}
}

// busyOpener opens testOpener's databases with their first busy executions, in all, failing
// with sandbox.ErrBusy, as an engine's do while statements past their deadlines hold its slots.
type busyOpener struct {
	testOpener
	busy atomic.Int64
}

func (o *busyOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.testOpener.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	return busyDB{DB: db, busy: &o.busy}, nil
}

type busyDB struct {
	sandbox.DB
	busy *atomic.Int64
}

func (b busyDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if b.busy.Add(-1) >= 0 {
		return nil, fmt.Errorf("test exec: %w: statements still running past their deadline hold the slots", sandbox.ErrBusy)
	}
	return b.DB.Exec(ctx, q, opts)
}

// TestRunWaitsOutBusyDatabase: distill.Run opens its databases through episode.Patient, so a
// statement that finds the engine's slots held (sandbox.ErrBusy) runs once they are free: every
// episode is written and judged, none failed.
func TestRunWaitsOutBusyDatabase(t *testing.T) {
	_, tasks := makeShopDB(t)
	dir := t.TempDir()
	cfg := baseConfig(t, dir, tasks, &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}})
	o := &busyOpener{testOpener: testOpener{tb: t}}
	o.busy.Store(3)
	cfg.Opener = o
	res, err := distill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != len(tasks) || res.Failed != 0 || o.busy.Load() >= 0 {
		t.Fatalf("result %+v, %d busy executions left; want every episode done after the busy ones", res, o.busy.Load()+1)
	}
	for _, tr := range committed(t, dir) {
		if !tr.Repeated || tr.GoldError != "" || matchReady() && !tr.Correct {
			t.Errorf("%s: converged %v, correct %v, gold error %q", tr.Key, tr.Repeated, tr.Correct, tr.GoldError)
		}
	}
}
