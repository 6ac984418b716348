package view

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/internal/httpguard"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

// ChromiumEnv names a Chromium or Chrome binary for the browser tests; without it they look
// for chromium, chromium-browser and google-chrome on PATH.
const ChromiumEnv = "CHAINEDSQL_CHROMIUM"

// ScreenshotsEnv names a directory for the browser tests' screenshots (default: a temporary
// directory, named in the test log).
const ScreenshotsEnv = "CHAINEDSQL_SCREENSHOTS"

// browser drives one headless Chromium tab.
type browser struct {
	t    testing.TB
	ctx  context.Context
	base string
	dir  string
}

func findChromium(t testing.TB) string {
	if p := os.Getenv(ChromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("no Chromium on PATH (install Debian's chromium, or set %s): browser tests skipped", ChromiumEnv)
	return ""
}

// serveGuarded serves s on a loopback port behind its guard, as curate view does.
func serveGuarded(t testing.TB, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(nil)
	g, err := httpguard.New(ts.Listener.Addr(), httpguard.Options{Name: "curate view"})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = g.Handler(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// newBrowser starts headless Chromium with the flags that work on the project's machines and
// a fresh profile, pointed at the server s.
func newBrowser(t testing.TB, s *Server) *browser {
	t.Helper()
	exe := findChromium(t)
	ts := serveGuarded(t, s)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	dir := os.Getenv(ScreenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, ctx: ctx, base: ts.URL, dir: dir}
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	return b
}

// do runs steps with a time limit.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.shot("failure")
		b.t.Fatalf("browser: %v", err)
	}
}

// open loads the page at hash and waits until the app has rendered it.
func (b *browser) open(hash string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base + "/" + hash))
	b.ready(hash)
}

// ready waits until the app has rendered the route hash.
func (b *browser) ready(hash string) {
	b.t.Helper()
	b.wait(fmt.Sprintf("document.body.dataset.ready === %q", hash))
}

// wait polls a JavaScript condition until it holds. Errors while a page is replaced (its
// JavaScript context is gone for a moment) are retried.
func (b *browser) wait(cond string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	b.shot("failure")
	b.t.Fatalf("waiting for %s: %v", cond, last)
}

// eval evaluates a JavaScript expression and returns its value.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

// shot saves a full-page screenshot as NAME.png in the screenshot directory.
func (b *browser) shot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, strings.ReplaceAll(b.t.Name(), "/", "_")+"-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot: %v", err)
	}
	b.t.Logf("screenshot %s", p)
}

// noErrors fails when the page shows an error box.
func (b *browser) noErrors() {
	b.t.Helper()
	if msg := eval[string](b, `[...document.querySelectorAll("#main .error")].map(e => e.textContent).join("; ")`); msg != "" {
		b.t.Errorf("page shows an error: %s", msg)
	}
}

// TestBrowserDataset opens the app on the fixture dataset in Chromium: the table, a filter
// through the controls, a search, a trajectory (think, SQL, observation, gold, outcome checked
// against the Parquet row), its loss mask token by token, the stats page's charts.
func TestBrowserDataset(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	b := newBrowser(t, s)

	b.open("#/")
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d rows match", len(rows), len(rows)) {
		t.Errorf("summary %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#rows tbody tr").length`); n != min(50, len(rows)) {
		t.Errorf("%d table rows on the first page", n)
	}
	b.shot("rows")

	// Filter with the controls: teacher alpha, then rows with format violations.
	b.do(chromedp.Click(chromedp.CSS(`input[data-facet="teacher"][value="alpha"]`)))
	b.ready("#/?teacher=alpha")
	b.do(chromedp.SetValue(chromedp.CSS("#f-violations"), "some"))
	eval[bool](b, `document.querySelector("#f-violations").dispatchEvent(new Event("change")), true`)
	b.ready("#/?teacher=alpha&violations=some")
	want := 0
	var target *curate.Row
	var targetID int
	for i := range rows {
		r := &rows[i]
		if r.Teacher == "alpha" && r.FormatViolations > 0 {
			want++
			if target == nil {
				target, targetID = r, i
			}
		}
	}
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d rows match", want, len(rows)) {
		t.Errorf("after filters: %q, want %d rows", got, want)
	}
	for _, id := range eval[[]string](b, `[...document.querySelectorAll("#rows tbody tr")].map(r => r.dataset.id)`) {
		r := rows[atoi(t, id)]
		if r.Teacher != "alpha" || r.FormatViolations == 0 {
			t.Errorf("row %s (%s, %d violations) shown under the filters", id, r.Teacher, r.FormatViolations)
		}
	}
	b.shot("filtered")

	// Text search through the search box.
	b.open("#/")
	b.do(chromedp.SendKeys(chromedp.CSS("#f-q"), "poetry\r"))
	b.ready("#/?q=poetry")
	nq := 0
	for _, r := range rows {
		if strings.Contains(strings.ToLower(r.Question+"\x00"+r.FinalSQL+"\x00"+r.GoldSQL+"\x00"+r.DBID+"\x00"+r.Key), "poetry") {
			nq++
		}
	}
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d rows match", nq, len(rows)) {
		t.Errorf("search: %q, want %d", got, nq)
	}

	// Open the trajectory by clicking its row in the filtered table.
	b.open("#/?teacher=alpha&violations=some")
	b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#rows tbody tr[data-id="%d"] a`, targetID))))
	b.ready(fmt.Sprintf("#/row/%d", targetID))
	checkTrajectory(t, b, target)
	b.shot("trajectory")

	// Every other kind of turn: open a row of each scripted kind directly.
	seen := map[int]bool{}
	last := targetID
	for i := range rows {
		k := int(rows[i].TaskIndex % 6)
		if rows[i].Teacher != "alpha" || seen[k] {
			continue
		}
		seen[k] = true
		last = i
		b.open(fmt.Sprintf("#/row/%d", i))
		checkTrajectory(t, b, &rows[i])
		if k == 2 && eval[int](b, `[...document.querySelectorAll(".think summary .tag")].filter(e => e.textContent.includes("reasoning field")).length`) == 0 {
			t.Errorf("row %d: reasoning from the separate field is not marked as outside the training text", i)
		}
		if k == 5 {
			b.shot("unicode")
		}
	}

	// The loss mask, through its tab.
	b.do(chromedp.Click(chromedp.CSS("#tab-mask")))
	b.ready(fmt.Sprintf("#/row/%d?tab=mask", last))
	for i := range rows {
		if rows[i].Teacher == "alpha" && rows[i].TaskIndex%6 == 5 {
			b.open(fmt.Sprintf("#/row/%d?tab=mask", i))
			checkMask(t, b, &rows[i])
			b.shot("mask")
			b.do(chromedp.Click(chromedp.CSS("#mask-system summary")))
			b.shot("mask-system-open")
			break
		}
	}
	b.open(fmt.Sprintf("#/row/%d?tab=mask", targetID))
	checkMask(t, b, target)

	b.open("#/stats")
	b.wait(`[...document.querySelectorAll(".charts img")].every(i => i.complete && i.naturalWidth > 0) && document.querySelectorAll(".charts img").length === 4`)
	if n := eval[int](b, `document.querySelectorAll("table.stats").length`); n < 4 {
		t.Errorf("stats page has %d tables", n)
	}
	b.noErrors()
	b.shot("stats")
}

// checkTrajectory compares the trajectory page on screen with the Parquet row.
func checkTrajectory(t *testing.T, b *browser, r *curate.Row) {
	t.Helper()
	b.noErrors()
	if got := eval[string](b, `document.querySelector("h2.question").textContent`); got != r.Question {
		t.Errorf("%s: question %q", r.Key, got)
	}
	if n := eval[int](b, `document.querySelectorAll("article.turn").length`); n != int(r.Turns) {
		t.Fatalf("%s: %d turns on the page, row has %d", r.Key, n, r.Turns)
	}
	k := 0
	for i, m := range r.Messages {
		if m.Role != chat.RoleAssistant {
			continue
		}
		k++
		p := protocol.ParseReply(m.Content)
		think, sql, ok := p.Think, p.SQL, p.OK
		sel := fmt.Sprintf(`article.turn[data-turn="%d"]`, k)
		if ok {
			if got := eval[string](b, `document.querySelector('`+sel+` pre.turn-sql').textContent`); got != sql {
				t.Errorf("%s turn %d: SQL %q, want %q", r.Key, k, got, sql)
			}
		} else if eval[int](b, `document.querySelectorAll('`+sel+` .tag.bad').length`) == 0 {
			t.Errorf("%s turn %d: format violation not marked", r.Key, k)
		}
		// The row's message is the rendered training text: its think block is the page's.
		wantThink := think
		if wantThink != "" {
			if got := eval[string](b, `document.querySelector('`+sel+` pre.think-text').textContent`); got != wantThink {
				t.Errorf("%s turn %d: think %q, want %q", r.Key, k, got, wantThink)
			}
			if eval[bool](b, `document.querySelector('`+sel+` details.think').open`) {
				t.Errorf("%s turn %d: think is not collapsed", r.Key, k)
			}
		}
		if i+1 < len(r.Messages) {
			o := parseObservation(r.Messages[i+1].Content)
			if o.Kind == "table" {
				cells := eval[[]string](b, `[...document.querySelectorAll('`+sel+` table.obs-table td')].map(td => td.textContent)`)
				var want []string
				for _, row := range o.Rows {
					want = append(want, row...)
				}
				if strings.Join(cells, "\x00") != strings.Join(want, "\x00") {
					t.Errorf("%s turn %d: observation cells %q, want %q", r.Key, k, cells, want)
				}
			} else if got := eval[string](b, `document.querySelector('`+sel+` .obs pre').textContent`); got != o.Text {
				t.Errorf("%s turn %d: observation %q, want %q", r.Key, k, got, o.Text)
			}
		}
	}
	// Formatted by default (TestBrowserSQLFormat checks the toggle to the SQL as written).
	if got := eval[string](b, `document.querySelector("pre.gold-sql").textContent`); got != formatSQL(r.GoldSQL) {
		t.Errorf("%s: gold SQL %q", r.Key, got)
	}
	outcome := eval[string](b, `document.querySelector("#outcome").textContent`)
	for _, want := range []string{fmt.Sprintf("correct: %s", yes(r.Correct)), fmt.Sprintf("converged: %s", yes(r.Converged)),
		fmt.Sprintf("format violations: %d", r.FormatViolations), fmt.Sprintf("%s tokens, %s trainable", commas(r.NumTokens), commas(r.NumTrainableTokens))} {
		if !strings.Contains(outcome, want) {
			t.Errorf("%s: outcome %q lacks %q", r.Key, outcome, want)
		}
	}
}

// checkMask compares the mask on screen, token by token, with the rendering and the row's
// counts.
func checkMask(t *testing.T, b *browser, r *curate.Row) {
	t.Helper()
	b.noErrors()
	text, spans := chattmpl.Render(r.Messages, false)
	if n := eval[int](b, `document.querySelectorAll("#mask span.tok").length`); n != int(r.NumTokens) {
		t.Errorf("%s: %d token elements, num_tokens %d", r.Key, n, r.NumTokens)
	}
	if n := eval[int](b, `document.querySelectorAll("#mask span.tok.on").length`); n != int(r.NumTrainableTokens) {
		t.Errorf("%s: %d marked tokens, num_trainable_tokens %d", r.Key, n, r.NumTrainableTokens)
	}
	if got := eval[string](b, `[...document.querySelectorAll("#mask span.tok")].map(s => s.textContent).join("")`); got != text {
		t.Errorf("%s: the tokens do not spell the rendered template", r.Key)
	}
	// Each assistant span, and nothing of a system, user or observation turn, is marked.
	marked := eval[string](b, `[...document.querySelectorAll("#mask span.tok.on")].map(s => s.textContent).join("")`)
	for _, sp := range spans {
		if !strings.Contains(marked, text[sp.Start:sp.End]) {
			t.Errorf("%s: span %q not marked", r.Key, text[sp.Start:sp.End])
		}
	}
	for _, m := range r.Messages {
		if m.Role != chat.RoleAssistant && len(m.Content) > 20 && strings.Contains(marked, m.Content) {
			t.Errorf("%s: a %s message is marked trainable", r.Key, m.Role)
		}
	}
	if got := eval[string](b, `document.querySelector("#mask-counts").textContent`); !strings.Contains(got, "matches the row's num_tokens") {
		t.Errorf("%s: counts line %q", r.Key, got)
	}
}

// TestBrowserDamagedRow: a row whose Parquet page is damaged shows its error; the table and the
// other rows still work.
func TestBrowserDamagedRow(t *testing.T) {
	fx := getFixture(t)
	dir, first := damagedCopy(t, fx.dataset)
	b := newBrowser(t, openServer(t, fx.tok, dir))
	b.open(fmt.Sprintf("#/row/%d", first))
	if got := eval[string](b, `document.querySelector("#row-error") ? document.querySelector("#row-error").textContent : ""`); !strings.Contains(got, "cannot be read") || !strings.Contains(got, "row group 1") {
		t.Errorf("damaged row page: %q", got)
	}
	b.shot("damaged-row")
	b.open("#/row/0")
	b.noErrors()
	if n := eval[int](b, `document.querySelectorAll("article.turn").length`); n == 0 {
		t.Error("an undamaged row shows no turns")
	}
	b.open("#/")
	b.noErrors()
}

// TestBrowserCompare follows the compare view over two eval dirs: the preset "oracle correct,
// student wrong", a task's trajectories side by side.
func TestBrowserCompare(t *testing.T) {
	fx := getFixture(t)
	s := openServer(t, fx.tok, fx.evalStudent, fx.evalOracle)
	b := newBrowser(t, s)
	results, err := evaluate.ReadResults(fx.evalStudent)
	if err != nil {
		t.Fatal(err)
	}
	wrong := map[string]bool{}
	for _, r := range results {
		if !r.Correct {
			wrong[r.ID] = true
		}
	}
	b.open("#/compare")
	b.do(chromedp.Click(chromedp.CSS(`a[href="#/compare?good=1&bad=0"]`)))
	b.ready("#/compare?good=1&bad=0")
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d tasks match", len(wrong), len(fx.tasks)) {
		t.Errorf("compare summary %q, want %d tasks", got, len(wrong))
	}
	ids := eval[[]string](b, `[...document.querySelectorAll("#compare tbody tr td:first-child")].map(td => td.textContent)`)
	for _, id := range ids {
		if !wrong[id] {
			t.Errorf("task %s listed but the student got it right", id)
		}
	}
	b.shot("compare")
	b.do(chromedp.Click(chromedp.CSS(`#compare tbody tr:first-child td:first-child a`)))
	b.ready("#/task/" + strings.ReplaceAll(ids[0], "/", "%2F"))
	cols := eval[[]string](b, `[...document.querySelectorAll(".policy-col > h3")].map(h => h.textContent)`)
	if len(cols) != 2 || !strings.Contains(cols[0], "student") || !strings.Contains(cols[0], "wrong") || !strings.Contains(cols[1], "oracle") || !strings.Contains(cols[1], "correct") {
		t.Errorf("task columns %q", cols)
	}
	if n := eval[int](b, `document.querySelectorAll(".policy-col article.turn").length`); n < 3 {
		t.Errorf("%d turns side by side", n)
	}
	b.noErrors()
	b.shot("task")
	b.open("#/stats")
	b.wait(`document.querySelectorAll(".charts img").length === 5 && [...document.querySelectorAll(".charts img")].every(i => i.complete && i.naturalWidth > 0)`)
	b.shot("eval-stats")
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func atoi(t testing.TB, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("row id %q: %v", s, err)
	}
	return n
}

// hostile is teacher and dataset text that a page building HTML from strings would run: an
// element with a handler, a script, an attribute break-out and an entity.
const hostile = `<img src=x onerror="document.body.dataset.xss='img'"><script>document.body.dataset.xss='script'</script>` +
	`" onmouseover="document.body.dataset.xss='attr' &amp; </pre></td>`

// TestBrowserHostileText: a teacher whose question, evidence, reasoning (inline and in the
// separate field), SQL, result cells and column names hold HTML is shown as that text on the
// rows, trajectory and loss-mask pages of a dataset and on the pages of its run dir: no element
// of it reaches the page.
func TestBrowserHostileText(t *testing.T) {
	tok := loadTokenizer(t)
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", filepath.Join(root, "db"))
	if err != nil {
		t.Fatal(err)
	}
	tasks = tasks[:2]
	for i := range tasks {
		tasks[i].Question, tasks[i].Evidence = "Q"+hostile, "E"+hostile
	}
	lit := strings.ReplaceAll(hostile, "'", "''")
	alias := strings.ReplaceAll(hostile, `"`, "")
	policy := chat.PolicyFunc(func(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
		return chat.Reply{Content: "<think>T" + hostile + "</think>\n<sql>SELECT '" + lit + `' AS "` + alias + `"</sql>`,
			Reasoning: "R" + hostile, FinishReason: chat.FinishStop}, nil
	})
	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(root, "db")}
	defer conn.Close()
	run, ds := filepath.Join(root, "run"), filepath.Join(root, "dataset")
	_, err = distill.Run(context.Background(), distill.RunConfig{
		Dir: run, Tasks: tasks, TaskSpec: "sample", Dialects: []datasets.Dialect{datasets.SQLite},
		Policies: []*episode.PolicyHandle{{Name: "alpha", Spec: "hostile", Model: "m", Policy: policy}},
		Episode:  episode.EpisodeOptions{MaxTurns: 5, ExecTimeout: 10 * time.Second}, Opener: conn, Toolkit: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := curate.Build(context.Background(), []string{run}, curate.BuildOptions{Tokenizer: tok, TokenizerName: "qwen2.5", Out: ds}); err != nil {
		t.Fatal(err)
	}
	// Nothing of the hostile text became an element, and it shows as text.
	clean := func(b *browser, page string, wantText int) {
		t.Helper()
		if n := eval[int](b, `document.querySelectorAll("#main img, #main script, [onerror], [onmouseover]").length`); n != 0 {
			b.shot("injected")
			t.Errorf("%s: %d elements from the data's HTML", page, n)
		}
		if v := eval[string](b, `document.body.dataset.xss || ""`); v != "" {
			t.Errorf("%s: the data's %s ran", page, v)
		}
		if n := eval[int](b, `document.querySelector("#main").textContent.split(`+strconv.Quote(hostile)+`).length - 1`); n < wantText {
			t.Errorf("%s: the hostile text shows %d times as text, want at least %d", page, n, wantText)
		}
	}
	b := newBrowser(t, openServer(t, tok, ds))
	b.open("#/")
	clean(b, "rows", 2) // both questions
	b.open("#/row/0")
	b.noErrors()
	// question, evidence, think, SQL, observation cell and column, final SQL (the gold is the task's)
	clean(b, "trajectory", 5)
	b.shot("hostile-trajectory")
	b.open("#/row/0?tab=mask")
	b.noErrors()
	clean(b, "mask", 0)
	if got := eval[string](b, `[...document.querySelectorAll("#mask span.tok")].map(s => s.textContent).join("")`); !strings.Contains(got, "R"+hostile) {
		// --think auto: the reasoning field's text is the think block, the inline copy dropped.
		t.Errorf("the mask does not spell the hostile reasoning text")
	}
	b = newBrowser(t, openServer(t, tok, run))
	b.open("#/")
	clean(b, "run rows", 2)
	b.open("#/row/0")
	b.noErrors()
	clean(b, "run trajectory", 5)
}
