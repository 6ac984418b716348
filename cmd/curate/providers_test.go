package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/teachers"
)

// providerTasks is how many sample tasks each provider run distils.
const providerTasks = 3

// thinkOf is the scripted teacher's reasoning for a question and turn: non-ASCII, several lines,
// the model id in it, so a reasoning text that reached the wrong turn or teacher shows.
func thinkOf(model, question string, turn int) string {
	return fmt.Sprintf("%s thinks about %q, turn %d:\nünïcödé — COUNT(*) or count(1)? 🤔\n\tlast line", model, question, turn)
}

// providerScript answers every sample question with its gold SQL after thinking; the first
// task's first turn is cut by the token limit inside the reasoning (content null), so its
// episode has one truncated turn and three turns in all.
func providerScript(gold map[string]string, cutQuestion string) oaitest.Script {
	return func(r oaitest.Request) oaitest.Response {
		q := strings.TrimPrefix(strings.SplitN(r.FirstUser(), "\n", 2)[0], "Question: ")
		turn := r.Turn()
		think := thinkOf(r.Model, q, turn)
		if q == cutQuestion && turn == 0 {
			return oaitest.Response{Think: think, FinishReason: "length"}
		}
		return oaitest.Response{Think: think, Content: "<sql>" + gold[q] + "</sql>"}
	}
}

type providerFixture struct {
	distill, curate, tok string
	tasks                []datasets.Task
	gold                 map[string]string
}

func newProviderFixture(t *testing.T) *providerFixture {
	t.Helper()
	tok := shared.Path(t, "tokenizer/qwen2.5/tokenizer.json")
	tasks, err := datasets.LoadTasks("sample", "")
	if err != nil {
		t.Skipf("the sample benchmark does not load: %v", err)
	}
	tasks = tasks[:providerTasks]
	gold := map[string]string{}
	for _, tk := range tasks {
		g, _ := tk.GoldFor(datasets.SQLite)
		gold[strings.TrimSpace(tk.Question)] = strings.TrimSpace(g)
	}
	return &providerFixture{distill: sharedBinary(t, "../distill"), curate: sharedBinary(t, "."), tok: tok, tasks: tasks, gold: gold}
}

// sharedBinary builds pkg once for all the tests of this file (each build takes seconds); the
// binaries live in binDir, removed by TestMain.
func sharedBinary(t *testing.T, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if b, ok := binaries[pkg]; ok {
		return b
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the binaries with")
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "chainedsql-providers-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = d
	}
	abs, _ := filepath.Abs(pkg)
	b := filepath.Join(binDir, filepath.Base(abs))
	if out, err := exec.Command("go", "build", "-o", b, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	binaries[pkg] = b
	return b
}

var (
	binMu    sync.Mutex
	binaries = map[string]string{}
	binDir   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// run runs bin with a clean environment (no CHAINEDSQL_* of the developer's) and fails on a
// non-zero exit.
func (f *providerFixture) run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	code, stdout, stderr := testbin.Run(t, cmd)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s\n%s", filepath.Base(bin), strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// distillRun writes a teachers config for provider at srv and distils the fixture's tasks with
// every preset the provider's profile has.
func (f *providerFixture) distillRun(t *testing.T, srv *oaitest.Server, provider string, presets []string, extra string, out string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "teachers.yaml")
	text := fmt.Sprintf("defaults:\n  provider: %s\n  base_url: %s\n  api_key_env: \"\"\n  max_retries: 2\n  backoff_base: 1ms\n  backoff_max: 2ms\n  max_concurrency: 4\n%s",
		provider, srv.BaseURL(), extra)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f.run(t, f.distill, "--config", cfg, "--teachers", strings.Join(presets, ","), "--tasks", "sample",
		"--limit", fmt.Sprint(providerTasks), "--out", out, "--progress", "off")
}

// serveAll starts a scripted teacher server (providerScript, cutting the question cut) with
// personality p that serves every preset model of p's provider. It returns those models by
// preset and the presets, sorted.
func (f *providerFixture) serveAll(t *testing.T, p oaitest.Personality, cut string) (map[string]string, []string, *oaitest.Server) {
	t.Helper()
	models := presetModels(t, p.Name)
	var presets, ids []string
	for preset, id := range models {
		presets, ids = append(presets, preset), append(ids, id)
	}
	sort.Strings(presets)
	return models, presets, oaitest.NewServer(t, providerScript(f.gold, cut), oaitest.WithPersonality(p), oaitest.WithModels(ids...))
}

// presetModels are the provider's preset model ids, by preset.
func presetModels(t *testing.T, provider string) map[string]string {
	t.Helper()
	prof, err := teachers.ProfileOf(provider)
	if err != nil {
		t.Fatal(err)
	}
	return prof.Models
}

// TestProvidersThinkEndToEnd: every preset against every provider shape it can be configured
// for, through the built distill and curate binaries. The Parquet rows' assistant messages must
// begin with <think> holding exactly the scripted teacher's reasoning (byte for byte), the
// DashScope teacher must complete (it has to stream), a length-truncated turn must be counted
// as truncated and not as a format violation (also where the template opened <think> in the
// prompt and the cut reply has no tag at all), and curate verify must agree on every row.
func TestProvidersThinkEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs both binaries per provider")
	}
	f := newProviderFixture(t)
	cut := strings.TrimSpace(f.tasks[0].Question)
	shapes := []string{"vllm", "vllm-legacy", "vllm-transition", "vllm-inline", "vllm-opened", "sglang", "deepseek", "zai", "dashscope",
		"openrouter", "together", "fireworks", "ollama"}
	for _, shape := range shapes {
		t.Run(shape, func(t *testing.T) {
			p := oaitest.Personalities[shape]
			models, presets, srv := f.serveAll(t, p, cut)
			tmp := t.TempDir()
			run, ds := filepath.Join(tmp, "run"), filepath.Join(tmp, "ds")
			extra := ""
			if p.ReasoningField == oaitest.FieldOpened {
				extra = "  template_opens_think: true\n" // every preset served by a template that opens <think>
			}
			f.distillRun(t, srv, p.Name, presets, extra, run)
			f.run(t, f.curate, "build", "--tokenizer", f.tok, "--out", ds, "--quiet", run)
			if out := f.run(t, f.curate, "verify", "--tokenizer", f.tok, ds); !strings.Contains(out, "(100.00%)") {
				t.Errorf("verify: %s", out)
			}
			wantSource := curate.ThinkFromField
			if p.ReasoningField == oaitest.FieldInline || p.ReasoningField == oaitest.FieldOpened {
				wantSource = curate.ThinkFromInline
			}
			rows := 0
			err := curate.ReadRows(context.Background(), ds, func(r *curate.Row) error {
				rows++
				q := strings.TrimSpace(r.Question)
				model := models[r.Teacher]
				if r.Model != model {
					t.Errorf("%s: model %q, want the profile's %q", r.Key, r.Model, model)
				}
				turn := 0
				for _, m := range r.Messages {
					if m.Role != "assistant" {
						continue
					}
					think := thinkOf(model, q, turn)
					want := "<think>" + think + "</think>\n<sql>" + f.gold[q] + "</sql>"
					if q == cut && turn == 0 {
						want = "<think>" + think // cut inside the reasoning: the block stays open
					}
					if m.Content != want {
						t.Errorf("%s turn %d:\n got %q\nwant %q", r.Key, turn, m.Content, want)
					}
					turn++
				}
				wantTurns, wantTrunc := int64(2), int64(0)
				if q == cut {
					wantTurns, wantTrunc = 3, 1
				}
				if r.Turns != wantTurns || r.TruncatedTurns != wantTrunc || r.FormatViolations != 0 || !r.Converged || !r.Correct {
					t.Errorf("%s: turns %d truncated %d violations %d converged %v correct %v", r.Key, r.Turns, r.TruncatedTurns, r.FormatViolations, r.Converged, r.Correct)
				}
				for i, s := range r.ThinkSources {
					if s != wantSource {
						t.Errorf("%s turn %d: think source %q, want %q", r.Key, i, s, wantSource)
					}
				}
				if r.ThinkMode != "auto" || r.ReasoningTokens <= 0 {
					t.Errorf("%s: think mode %q reasoning tokens %d", r.Key, r.ThinkMode, r.ReasoningTokens)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if rows != providerTasks*len(presets) {
				t.Errorf("%d rows, want %d", rows, providerTasks*len(presets))
			}
			var st struct {
				ThinkMode string `json:"think_mode"`
				Overall   struct {
					Think curate.ThinkCounts `json:"think"`
				} `json:"overall"`
			}
			if err := json.Unmarshal([]byte(f.run(t, f.curate, "stats", "--json", ds)), &st); err != nil {
				t.Fatal(err)
			}
			turns := (2*providerTasks + 1) * len(presets)
			got := st.Overall.Think
			if st.ThinkMode != "auto" || got.TruncatedTurns != len(presets) || got.Field+got.Inline != turns {
				t.Errorf("stats: mode %q think %+v, want %d turns with a think block", st.ThinkMode, got, turns)
			}
		})
	}
}

// TestStreamedAndPlainRunsAgree: the same scripted teacher, once streamed and once not, gives
// identical trajectories (times aside), through the built distill binary.
func TestStreamedAndPlainRunsAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	f := newProviderFixture(t)
	cut := strings.TrimSpace(f.tasks[0].Question)
	for _, shape := range []string{"deepseek", "openrouter", "vllm"} {
		t.Run(shape, func(t *testing.T) {
			p := oaitest.Personalities[shape]
			_, presets, srv := f.serveAll(t, p, cut)
			tmp := t.TempDir()
			plain, streamed := filepath.Join(tmp, "plain"), filepath.Join(tmp, "streamed")
			f.distillRun(t, srv, p.Name, presets, "  stream: false\n", plain)
			f.distillRun(t, srv, p.Name, presets, "  stream: true\n", streamed)
			a, b := trajectories(t, plain), trajectories(t, streamed)
			if len(a) != providerTasks*len(presets) || len(a) != len(b) {
				t.Fatalf("%d plain, %d streamed trajectories", len(a), len(b))
			}
			for k, ta := range a {
				if tb, ok := b[k]; !ok || ta != tb {
					t.Errorf("%s differs:\nplain    %s\nstreamed %s", k, ta, tb)
				}
			}
			var streams int
			for _, r := range srv.Requests() {
				if r.Stream {
					streams++
				}
			}
			if streams == 0 || streams == len(srv.Requests()) {
				t.Errorf("%d of %d requests streamed", streams, len(srv.Requests()))
			}
		})
	}
}

// trajectories reads a run dir's trajectories as JSON by key, with the fields that measure time
// zeroed.
func trajectories(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := rundir.ReadRun(dir, func(tr *rundir.Trajectory) error {
		tr.Started, tr.Duration = time.Time{}, 0
		for i := range tr.Turns {
			tr.Turns[i].Latency = 0
			if e := tr.Turns[i].Exec; e != nil {
				e.Duration = 0
			}
		}
		b, err := json.Marshal(tr)
		if err != nil {
			return err
		}
		out[tr.Key] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunDirFormatV1: run dirs written by the distill before the format change (testdata/v1,
// made by that binary: the oracle, and a DeepSeek-shaped teacher whose reasoning came in
// reasoning_content) still curate, each turn's think from the right source; the new distill
// refuses to add to one, naming both versions.
func TestRunDirFormatV1(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	f := newProviderFixture(t)
	tmp := t.TempDir()
	ds := filepath.Join(tmp, "ds")
	f.run(t, f.curate, "build", "--tokenizer", f.tok, "--out", ds, "--quiet", filepath.Join("testdata", "v1", "oracle"), filepath.Join("testdata", "v1", "deepseek"))
	if out := f.run(t, f.curate, "verify", "--tokenizer", f.tok, ds); !strings.Contains(out, "5 of 5 rows agree (100.00%)") {
		t.Errorf("verify: %s", out)
	}
	err := curate.ReadRows(context.Background(), ds, func(r *curate.Row) error {
		for i, m := range r.Messages {
			if m.Role != "assistant" {
				continue
			}
			want, src := "<think>Field reasoning, ünï 🤔.</think>\n<sql>SELECT 1</sql>", curate.ThinkFromField
			if r.Teacher == episode.OracleName {
				want, src = "<think>The reference query answers the question.</think>\n<sql>"+strings.TrimSpace(r.GoldSQL)+"</sql>", curate.ThinkFromInline
			}
			if m.Content != want || r.ThinkSources[(i-2)/2] != src {
				t.Errorf("%s message %d: %q from %v, want %q from %s", r.Key, i, m.Content, r.ThinkSources, want, src)
			}
		}
		if len(r.Messages) != 5 || r.Messages[0].Role != "system" || !strings.HasPrefix(r.Messages[1].Content, "Question: ") {
			t.Errorf("%s: conversation %+v", r.Key, r.Messages)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Resuming a v1 run dir with this distill is refused with both versions named.
	run := filepath.Join(tmp, "v1")
	if err := os.CopyFS(run, os.DirFS(filepath.Join("testdata", "v1", "oracle"))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.distill, "--tasks", "sample", "--limit", "3", "--teachers", "oracle", "--out", run, "--progress", "off")
	code, _, stderr := testbin.Run(t, cmd)
	if code != 1 || !strings.Contains(stderr, rundir.RunFormatV1) || !strings.Contains(stderr, rundir.RunFormat) || !strings.Contains(stderr, "another --out") {
		t.Errorf("resume of a v1 run dir: exit %d, %s", code, stderr)
	}
}
