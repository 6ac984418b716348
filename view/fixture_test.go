package view

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/evaluate/evalrun"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// fixture is what the tests view: a run dir distilled from the bundled sample on SQLite by two
// teachers (a scripted one that makes every kind of turn, and the oracle), the dataset curate
// builds from it with the real Qwen2.5 tokenizer, and two eval dirs (the scripted policy as the
// "student", the oracle as a teacher) for the compare view. It is built once per test binary.
type fixture struct {
	root, run, dataset, evalStudent, evalOracle string
	tasks                                       []datasets.Task
	tok                                         curate.Tokenizer
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
	tokOnce sync.Once
	tokReal curate.Tokenizer
	tokErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fix != nil {
		os.RemoveAll(fix.root)
	}
	os.Exit(code)
}

// loadTokenizer loads the shared Qwen2.5 tokenizer, skipping the test when it is absent.
func loadTokenizer(tb testing.TB) curate.Tokenizer {
	tb.Helper()
	p := shared.Path(tb, "tokenizer/qwen2.5/tokenizer.json")
	tokOnce.Do(func() {
		t, err := tokenizer.Load(p)
		tokReal, tokErr = curate.Adapt(t), err
	})
	if tokErr != nil {
		tb.Fatalf("load tokenizer: %v", tokErr)
	}
	return tokReal
}

func getFixture(tb testing.TB) *fixture {
	tb.Helper()
	tok := loadTokenizer(tb)
	fixOnce.Do(func() { fix, fixErr = buildFixture(tok) })
	if fixErr != nil {
		tb.Fatalf("fixture: %v", fixErr)
	}
	return fix
}

// scripted is a TaskAware policy whose episode depends on the task's index, so that the
// fixture has each kind of turn: a format violation, an SQL error, reasoning in the separate
// field, a converged wrong answer, a reply cut by the length limit, and a think block with
// characters outside the BMP.
type scripted struct{}

func (scripted) Chat(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
	return chat.Reply{}, fmt.Errorf("scripted: needs the task")
}

func (scripted) ForTask(t datasets.Task, d datasets.Dialect) (chat.Policy, error) {
	gold, _ := t.GoldFor(d)
	gold = strings.TrimSpace(gold)
	right := func(think string) chat.Reply {
		return chat.Reply{Content: "<think>" + think + "</think>\n<sql>" + gold + "</sql>", FinishReason: chat.FinishStop,
			Usage: chat.Usage{PromptTokens: 900, CompletionTokens: 60}}
	}
	return chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		turn := 0
		for _, m := range msgs {
			if m.Role == chat.RoleAssistant {
				turn++
			}
		}
		switch t.Index % 6 {
		case 0: // a format violation first
			if turn == 0 {
				return chat.Reply{Content: "I would count the rows.", FinishReason: chat.FinishStop, Usage: chat.Usage{PromptTokens: 800, CompletionTokens: 7}}, nil
			}
			return right("Now in the required format."), nil
		case 1: // an SQL error first
			if turn == 0 {
				return chat.Reply{Content: "<think>Try a column that may not exist.</think>\n<sql>SELECT no_such_column FROM " + t.DBID + "_missing</sql>",
					FinishReason: chat.FinishStop, Usage: chat.Usage{PromptTokens: 800, CompletionTokens: 20}}, nil
			}
			return right("The table name was wrong; use the schema's."), nil
		case 2: // reasoning in the endpoint's field, content without <think>
			r := right("")
			r.Content = "<sql>" + gold + "</sql>"
			r.Reasoning = "Field reasoning: the schema has what is needed."
			return r, nil
		case 3: // converges on a wrong answer
			return chat.Reply{Content: "<think>Guess.</think>\n<sql>SELECT 42</sql>", FinishReason: chat.FinishStop,
				Usage: chat.Usage{PromptTokens: 700, CompletionTokens: 10}}, nil
		case 4: // cut by the length limit mid-<sql> first
			if turn == 0 {
				return chat.Reply{Content: "<think>A long plan.</think>\n<sql>SELECT", FinishReason: chat.FinishLength,
					Usage: chat.Usage{PromptTokens: 800, CompletionTokens: 4096}}, nil
			}
			return right("Shorter this time."), nil
		default: // characters outside the BMP and combining marks in the reasoning
			return right("Thinking 🤔 about café and naïve — then 𝔘𝔫𝔦𝔠𝔬𝔡𝔢."), nil
		}
	}), nil
}

func buildFixture(tok curate.Tokenizer) (*fixture, error) {
	root, err := os.MkdirTemp("", "view-fixture-")
	if err != nil {
		return nil, err
	}
	f := &fixture{root: root, run: filepath.Join(root, "run"), dataset: filepath.Join(root, "dataset"),
		evalStudent: filepath.Join(root, "eval-student"), evalOracle: filepath.Join(root, "eval-oracle"), tok: tok}
	if f.tasks, err = datasets.LoadTasks("sample", filepath.Join(root, "db")); err != nil {
		return nil, err
	}
	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(root, "db")}
	defer conn.Close()
	ctx := context.Background()
	ep := episode.EpisodeOptions{MaxTurns: 5, ExecTimeout: 10 * time.Second}
	_, err = distill.Run(ctx, distill.RunConfig{
		Dir: f.run, Tasks: f.tasks, TaskSpec: "sample", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{{Name: "alpha", Spec: "scripted", Model: "alpha-1", Policy: scripted{}}, {Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}}},
		Episode:  ep, Opener: conn, Toolkit: "test",
	})
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	if _, err := curate.Build(ctx, []string{f.run}, curate.BuildOptions{Tokenizer: tok, TokenizerName: "qwen2.5", Out: f.dataset, RowGroupRows: 16}); err != nil {
		return nil, fmt.Errorf("curate build: %w", err)
	}
	for _, e := range []struct {
		dir string
		p   *episode.PolicyHandle
	}{
		{f.evalStudent, &episode.PolicyHandle{Name: "student", Spec: "scripted", Model: "student-1", Policy: scripted{}}},
		{f.evalOracle, &episode.PolicyHandle{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}}},
	} {
		_, err := evalrun.Run(ctx, evaluate.Config{Dir: e.dir, Tasks: f.tasks, TaskSpec: "sample", Policy: e.p,
			Dialect: datasets.SQLite, Episode: ep, Opener: conn, Toolkit: "test"})
		if err != nil {
			return nil, fmt.Errorf("eval %s: %w", e.dir, err)
		}
	}
	return f, nil
}

// openServer opens a Server over paths for a test.
func openServer(tb testing.TB, tok curate.Tokenizer, paths ...string) *Server {
	tb.Helper()
	s, err := Open(context.Background(), Options{Paths: paths, Tokenizer: tok, TokenizerName: "qwen2.5", Poll: 50 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// readRows reads a dataset's rows through curate's reader, the reference for the tests.
func readRows(tb testing.TB, dir string) []curate.Row {
	tb.Helper()
	var rows []curate.Row
	if err := curate.ReadRows(context.Background(), dir, func(r *curate.Row) error { rows = append(rows, *r); return nil }); err != nil {
		tb.Fatal(err)
	}
	return rows
}
