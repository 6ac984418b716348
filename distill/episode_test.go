package distill_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

func scripted(replies ...chat.Reply) chat.Policy {
	return chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		n := 0
		for _, m := range msgs {
			if m.Role == chat.RoleAssistant {
				n++
			}
		}
		r := replies[min(n, len(replies)-1)]
		r.Usage = chat.Usage{PromptTokens: 10, CompletionTokens: 5}
		return r, nil
	})
}

func checkAlternation(t *testing.T, tr *rundir.Trajectory) {
	t.Helper()
	if len(tr.Conversation()) < 3 || tr.Conversation()[0].Role != chat.RoleSystem || tr.Conversation()[1].Role != chat.RoleUser {
		t.Fatalf("conversation does not start system, user: %+v", tr.Conversation())
	}
	for i, m := range tr.Conversation()[2:] {
		want := chat.RoleAssistant
		if i%2 == 1 {
			want = chat.RoleUser
		}
		if m.Role != want {
			t.Fatalf("message %d is %s, want %s", i+2, m.Role, want)
		}
	}
	if last := tr.Conversation()[len(tr.Conversation())-1]; last.Role != chat.RoleAssistant {
		t.Fatalf("conversation ends with %s, want the assistant's last turn", last.Role)
	}
	if got, want := len(tr.Conversation()), 2+2*len(tr.Turns)-1; got != want {
		t.Fatalf("%d messages for %d turns, want %d", got, len(tr.Turns), want)
	}
	for i, tu := range tr.Turns[:len(tr.Turns)-1] {
		if tr.Conversation()[3+2*i].Content != tu.Observation {
			t.Fatalf("turn %d observation not in the conversation", i+1)
		}
	}
}

func TestEpisodeOracle(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	schemas := testSchemas()
	for _, task := range tasks {
		tr, err := episode.Episode(context.Background(), episode.Oracle{}, task, db, episode.EpisodeOptions{Teacher: "oracle", Schemas: schemas})
		if err != nil {
			t.Fatal(err)
		}
		checkAlternation(t, tr)
		if !tr.Repeated || len(tr.Turns) != 2 || !tr.ExecOK || tr.FinalSQL != task.Gold[datasets.SQLite] || tr.FormatViolations != 0 {
			t.Fatalf("%s: converged=%v turns=%d exec_ok=%v final=%q", task.ID, tr.Repeated, len(tr.Turns), tr.ExecOK, tr.FinalSQL)
		}
		if matchReady() && !tr.Correct {
			t.Fatalf("%s: oracle not correct (gold error %q)", task.ID, tr.GoldError)
		}
		if !strings.Contains(tr.Conversation()[0].Content, "CREATE TABLE") || !strings.Contains(tr.Conversation()[0].Content, "SQLite 3.") {
			t.Fatalf("system prompt lacks schema or version:\n%s", tr.Conversation()[0].Content)
		}
		if tr.Key != task.ID+"|oracle|sqlite|0" {
			t.Fatalf("key %q", tr.Key)
		}
	}
}

func TestEpisodeScripted(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	pol := scripted(
		chat.Reply{Content: "I think it's SELECT count(*) FROM customer", FinishReason: "stop"},                           // no tags
		chat.Reply{Content: "<sql>SELECT count(nme) FROM customer</sql>", Reasoning: "count names", FinishReason: "stop"}, // error, reasoning field
		chat.Reply{Content: "<think>fix the column</think>\n<sql>SELECT count(*) FROM customer</sql>", FinishReason: "stop"},
		chat.Reply{Content: "<think>done</think>\n<sql> SELECT count(*) FROM customer \n</sql>", FinishReason: "stop"},
	)
	tr, err := episode.Episode(context.Background(), pol, tasks[0], db, episode.EpisodeOptions{Teacher: "fake", Sample: 2, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	checkAlternation(t, tr)
	if len(tr.Turns) != 4 || !tr.Repeated || tr.FormatViolations != 1 || !tr.ExecOK || tr.FinalSQL != "SELECT count(*) FROM customer" {
		t.Fatalf("turns=%d converged=%v violations=%d exec_ok=%v final=%q", len(tr.Turns), tr.Repeated, tr.FormatViolations, tr.ExecOK, tr.FinalSQL)
	}
	t1, t2, t3, t4 := tr.Turns[0], tr.Turns[1], tr.Turns[2], tr.Turns[3]
	if !t1.FormatViolation || t1.Exec != nil || t1.Observation != protocol.FormatViolationObservation() {
		t.Errorf("turn 1: %+v", t1)
	}
	if t2.Exec == nil || t2.Exec.Outcome != sandbox.OutcomeError || !strings.HasPrefix(t2.Observation, "<observation>\nError: ") || !strings.Contains(t2.Observation, "nme") || t2.Reasoning != "count names" {
		t.Errorf("turn 2: %+v", t2)
	}
	if t3.Exec == nil || !(t3.Exec.Outcome == sandbox.OutcomeOK) || t3.Observation != "<observation>\ncount(*)\n40\n(1 row)\n</observation>" || protocol.ParseReply(t3.Content).Think != "fix the column" || t3.Reasoning != "" {
		t.Errorf("turn 3: %+v", t3)
	}
	if t4.SQL != t3.SQL {
		t.Errorf("turn 4 SQL %q", t4.SQL)
	}
	if tr.Usage.PromptTokens != 40 || tr.Usage.CompletionTokens != 20 || tr.Sample != 2 || tr.Key != "shop/0|fake|sqlite|2" {
		t.Errorf("usage %+v sample %d key %s", tr.Usage, tr.Sample, tr.Key)
	}
	if matchReady() && !tr.Correct {
		t.Errorf("not correct")
	}
}

func TestEpisodeBudgetAndTruncation(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	var n atomic.Int64
	pol := chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		i := n.Add(1)
		switch i {
		case 2: // cut inside <sql>
			return chat.Reply{Content: "<think>long</think>\n<sql>SELECT id FROM cust", FinishReason: chat.FinishLength}, nil
		case 3: // the reasoning used the whole budget: content null
			return chat.Reply{Reasoning: "thinking and thinking", ReasoningSource: chat.SourceReasoningContent, FinishReason: chat.FinishLength}, nil
		case 4: // a complete reply without SQL: a format violation
			return chat.Reply{Content: "I give up", FinishReason: chat.FinishStop}, nil
		}
		return chat.Reply{Content: "<sql>SELECT " + strings.Repeat("1+", int(i)) + "0</sql>", FinishReason: "stop"}, nil
	})
	tr, err := episode.Episode(context.Background(), pol, tasks[0], db, episode.EpisodeOptions{Teacher: "t", MaxTurns: 5, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	checkAlternation(t, tr)
	if len(tr.Turns) != 5 || tr.Repeated || tr.FormatViolations != 1 || tr.TruncatedTurns != 2 {
		t.Fatalf("turns=%d converged=%v violations=%d truncated=%d", len(tr.Turns), tr.Repeated, tr.FormatViolations, tr.TruncatedTurns)
	}
	for _, i := range []int{1, 2} {
		tu := tr.Turns[i]
		if !tu.Truncated || tu.FormatViolation || tu.Exec != nil || tu.Observation != protocol.TruncatedObservation() {
			t.Errorf("turn %d: %+v", i+1, tu)
		}
	}
	if tu := tr.Turns[2]; tu.Reasoning != "thinking and thinking" || tu.ReasoningSource != chat.SourceReasoningContent || tu.Content != "" {
		t.Errorf("turn 3 not kept as received: %+v", tu)
	}
	if tu := tr.Turns[3]; !tu.FormatViolation || tu.Truncated || tu.Observation != protocol.FormatViolationObservation() {
		t.Errorf("turn 4: %+v", tu)
	}
	if tr.FinalSQL != "SELECT 1+1+1+1+1+0" || !tr.ExecOK || tr.Correct {
		t.Fatalf("final %q exec_ok %v correct %v", tr.FinalSQL, tr.ExecOK, tr.Correct)
	}
}

func TestEpisodeRowsBeyondCapJudgedInFull(t *testing.T) {
	if !matchReady() {
		t.Skip("judge.Match is not built yet")
	}
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	task := tasks[0]
	task.Gold = map[datasets.Dialect]string{datasets.SQLite: "SELECT id FROM orders"}
	tr, err := episode.Episode(context.Background(), episode.Oracle{}, task, db, episode.EpisodeOptions{Teacher: "oracle", Schemas: testSchemas(), Caps: protocol.ObsCaps{MaxRows: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Correct || !strings.Contains(tr.Turns[0].Observation, "more rows (80 total)") {
		t.Fatalf("correct=%v obs=%s", tr.Correct, tr.Turns[0].Observation)
	}
}

func TestEpisodePolicyError(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	boom := errors.New("boom")
	var calls atomic.Int64
	pol := chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		if calls.Add(1) == 2 {
			return chat.Reply{}, boom
		}
		return chat.Reply{Content: "<sql>SELECT 1</sql>"}, nil
	})
	tr, err := episode.Episode(context.Background(), pol, tasks[0], db, episode.EpisodeOptions{Schemas: testSchemas()})
	var pe *episode.PolicyError
	if !errors.As(err, &pe) || pe.Turn != 2 || !errors.Is(err, boom) || tr == nil || len(tr.Turns) != 1 {
		t.Fatalf("err=%v trajectory=%+v", err, tr)
	}
	if _, err := (episode.Oracle{}).Chat(context.Background(), nil, chat.Options{}); err == nil {
		t.Fatal("oracle without a task must fail")
	}
}

func TestSchemaCacheOncePerDB(t *testing.T) {
	path, tasks := makeShopDB(t)
	db := openTestDB(t, path)
	var renders atomic.Int64
	c := &episode.SchemaCache{Render: func(ctx context.Context, db sandbox.DB, samples int) (string, error) {
		renders.Add(1)
		return testRender(ctx, db, samples)
	}}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.DDL(context.Background(), tasks[i%len(tasks)], db); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if renders.Load() != 1 {
		t.Fatalf("%d renders for one database", renders.Load())
	}
	fails := 0
	bad := &episode.SchemaCache{Render: func(context.Context, sandbox.DB, int) (string, error) {
		fails++
		return "", errors.New("broken")
	}}
	bad.DDL(context.Background(), tasks[0], db)
	bad.DDL(context.Background(), tasks[0], db)
	if fails != 2 {
		t.Fatalf("failures must not be cached: %d renders", fails)
	}
}

func TestResolvePolicy(t *testing.T) {
	h, err := episode.ResolvePolicy("oracle", nil, nil)
	if err != nil || h.Name != "oracle" {
		t.Fatalf("%v %+v", err, h)
	}
	if _, err := episode.ResolvePolicy("gpt-oss", nil, nil); err == nil || !strings.Contains(err.Error(), "no teachers") {
		t.Fatalf("bare name without teachers: %v", err)
	}
	prefixes := map[string]episode.PolicyFactory{
		"testpol": func(arg string) (chat.Policy, string, error) {
			return scripted(chat.Reply{Content: "<sql>SELECT 1</sql>"}), "m-" + arg, nil
		},
		episode.OracleName: func(string) (chat.Policy, string, error) { return nil, "", errors.New("reserved") },
	}
	for _, spec := range []string{"nosuch:x", "oracle:x"} {
		_, err := episode.ResolvePolicy(spec, nil, prefixes)
		if err == nil || !strings.Contains(err.Error(), "unknown prefix") || !strings.Contains(err.Error(), "(known: teacher, testpol)") {
			t.Fatalf("%s: %v", spec, err)
		}
	}
	h, err = episode.ResolvePolicy("testpol:/models/My Model", nil, prefixes)
	if err != nil || h.Name != "testpol-My_Model" || h.Model != "m-/models/My Model" || !episode.ValidName(h.Name) {
		t.Fatalf("%v %+v", err, h)
	}
	if _, err := episode.ResolvePolicy("testpol:/models/x", nil, nil); err == nil || !strings.Contains(err.Error(), "unknown prefix") {
		t.Fatalf("a prefix not passed in resolved: %v", err)
	}
	h, err = episode.ResolvePolicy("teacher:glm", func(name string) (*episode.PolicyHandle, error) {
		return &episode.PolicyHandle{Name: name, Model: "glm-x", Policy: episode.Oracle{}}, nil
	}, nil)
	if err != nil || h.Name != "glm" || h.Spec != "teacher:glm" {
		t.Fatalf("%v %+v", err, h)
	}
}
