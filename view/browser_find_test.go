package view

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chainedsql/chainedsql/curate"
)

// evalAsync evaluates a JavaScript expression whose value is a promise and returns what it
// resolves to.
func evalAsync[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

// tableIDs is the row ids of the table on screen, in order.
func tableIDs(b *browser) []int {
	var ids []int
	for _, s := range eval[[]string](b, `[...document.querySelectorAll("#rows tbody tr[data-id]")].map(r => r.dataset.id)`) {
		ids = append(ids, atoi(b.t, s))
	}
	return ids
}

// TestBrowserFullText: "/" goes to the full-text box; a search over every message and then
// over observations only lists the rows the regular-expression reference finds; the row
// opened from the table has each match highlighted, its think block opened when it holds one.
func TestBrowserFullText(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	if err := s.WaitSearch(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s)
	b.open("#/")
	b.do(chromedp.KeyEvent("/"))
	if id := eval[string](b, `document.activeElement.id`); id != "f-text" {
		t.Fatalf("after /, focus is on %q, want the full-text box", id)
	}
	b.do(chromedp.KeyEvent("column"))
	t.Logf("box %q", eval[string](b, `document.querySelector("#f-text").value`))
	b.do(chromedp.KeyEvent("\r"))
	b.ready("#/?text=column")
	count := func(in ...string) (n int, first int) {
		first = -1
		for i := range rows {
			ft := fieldTexts(&rows[i])
			text := ""
			for _, f := range in {
				text += ft[f]
			}
			if holdsWords(text, "column") {
				n++
				if first < 0 {
					first = i
				}
			}
		}
		return n, first
	}
	want, _ := count(fieldNames[:]...)
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d rows match", want, len(rows)) || want == 0 {
		t.Errorf("full text over all messages: %q, want %d rows (> 0)", got, want)
	}
	b.do(chromedp.SetValue(chromedp.CSS("#f-in"), "reasoning"))
	eval[bool](b, `document.querySelector("#f-in").dispatchEvent(new Event("change")), true`)
	b.ready("#/?text=column&in=reasoning")
	want, first := count("reasoning")
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != fmt.Sprintf("%d of %d rows match", want, len(rows)) || want == 0 {
		t.Errorf("full text over reasoning: %q, want %d rows (> 0)", got, want)
	}
	b.shot("fulltext")

	b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#rows tbody tr[data-id="%d"] a`, first))))
	b.ready(fmt.Sprintf("#/row/%d?hl=column", first))
	b.noErrors()
	marks := eval[[]string](b, `[...document.querySelectorAll("mark.hit")].map(m => m.textContent)`)
	for _, m := range marks {
		if !strings.EqualFold(m, "column") {
			t.Errorf("highlighted %q for the word column", m)
		}
	}
	// The reference: word-initial "column" in the text of the turns and the outcome.
	text := eval[string](b, `document.querySelector(".turns").textContent + "\n" + document.querySelector("#outcome").textContent`)
	if n := len(regexp.MustCompile(`(?i)(^|[^\p{L}\p{N}_])column`).FindAllString(text, -1)); n != len(marks) || n == 0 {
		t.Errorf("%d matches highlighted, the page's text has %d", len(marks), n)
	}
	if got := eval[string](b, `document.querySelector("#hl-count").textContent`); !strings.HasPrefix(got, fmt.Sprintf("%d match", len(marks))) {
		t.Errorf("match count line %q", got)
	}
	if n := eval[int](b, `[...document.querySelectorAll("details.think")].filter(d => d.querySelector("mark.hit") && !d.open).length`); n != 0 {
		t.Errorf("%d think blocks with a match stay closed", n)
	}
	if eval[int](b, `document.querySelectorAll("pre.think-text mark.hit").length`) == 0 {
		t.Error("no match highlighted in the reasoning")
	}
	b.shot("highlight")
}

// TestBrowserTableNavigation: sorting by a column header (ascending, descending), page size,
// page jump, j/k/Enter.
func TestBrowserTableNavigation(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	b := newBrowser(t, openServer(t, fx.tok, fx.dataset))
	b.open("#/")
	sorted := func(col string, key func(r *curate.Row) string, desc bool) {
		t.Helper()
		ids := tableIDs(b)
		if len(ids) != min(50, len(rows)) {
			t.Errorf("sort by %s: %d rows on the page", col, len(ids))
		}
		for k := 1; k < len(ids); k++ {
			a, c := key(&rows[ids[k-1]]), key(&rows[ids[k]])
			if !desc && a > c || desc && a < c || a == c && ids[k-1] > ids[k] {
				t.Fatalf("sort by %s (descending %v): row %d (%q) before row %d (%q)", col, desc, ids[k-1], a, ids[k], c)
			}
		}
	}
	pad := func(n int64) string { return fmt.Sprintf("%012d", n) }
	b.do(chromedp.Click(chromedp.CSS(`th[data-sort="tokens"] a`)))
	b.ready("#/?sort=tokens")
	sorted("tokens", func(r *curate.Row) string { return pad(r.NumTokens) }, false)
	b.do(chromedp.Click(chromedp.CSS(`th[data-sort="tokens"] a`)))
	b.ready("#/?sort=-tokens")
	sorted("tokens", func(r *curate.Row) string { return pad(r.NumTokens) }, true)
	if got := eval[string](b, `document.querySelector("th.sorted").textContent`); got != "tokens ▼" {
		t.Errorf("sorted header %q", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`th[data-sort="question"] a`)))
	b.ready("#/?sort=question")
	sorted("question", func(r *curate.Row) string { return r.Question }, false)
	b.shot("sorted")

	// Page size, then a page jump; the sort stays.
	b.do(chromedp.SetValue(chromedp.CSS("#page-size"), "25"))
	eval[bool](b, `document.querySelector("#page-size").dispatchEvent(new Event("change")), true`)
	b.ready("#/?sort=question&offset=0&limit=25")
	if n := len(tableIDs(b)); n != 25 {
		t.Errorf("%d rows at page size 25", n)
	}
	b.do(chromedp.SetValue(chromedp.CSS("#page-jump"), "3"))
	eval[bool](b, `document.querySelector("#page-jump").dispatchEvent(new Event("change")), true`)
	b.ready("#/?sort=question&offset=50&limit=25")
	if got := eval[string](b, `document.querySelector("#range").textContent`); got != fmt.Sprintf("51–75 of %d", len(rows)) {
		t.Errorf("page 3 of 25 rows: range %q", got)
	}
	all := make([]int, len(rows))
	for i := range all {
		all[i] = i
	}
	slices.SortStableFunc(all, func(a, c int) int { return strings.Compare(rows[a].Question, rows[c].Question) })
	ids := tableIDs(b)
	if !slices.Equal(ids, all[50:75]) {
		t.Errorf("page 3 shows rows %v, want %v", ids, all[50:75])
	}

	// Keyboard: j j k selects the first row, Enter opens it.
	b.do(chromedp.KeyEvent("j"), chromedp.KeyEvent("j"))
	if got := eval[string](b, `document.querySelector("#rows tr.sel").dataset.id`); got != fmt.Sprint(ids[1]) {
		t.Errorf("after j j the selected row is %s, want %d", got, ids[1])
	}
	b.do(chromedp.KeyEvent("k"))
	if got := eval[string](b, `document.querySelector("#rows tr.sel").dataset.id`); got != fmt.Sprint(ids[0]) {
		t.Errorf("after j j k the selected row is %s, want %d", got, ids[0])
	}
	b.shot("keyboard")
	b.do(chromedp.KeyEvent("\r"))
	b.ready(fmt.Sprintf("#/row/%d", ids[0]))
	b.noErrors()
}

// TestBrowserExport downloads the page's Parquet and JSONL exports of a filter and checks them
// against the dataset's rows; the export leaves out the table's sort and paging.
func TestBrowserExport(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	b := newBrowser(t, openServer(t, fx.tok, fx.dataset))
	b.open("#/?teacher=alpha&correct=0&sort=-tokens&limit=25")
	var want []curate.Row
	for _, r := range rows {
		if r.Teacher == "alpha" && !r.Correct {
			want = append(want, r)
		}
	}
	href := eval[string](b, `document.querySelector("#export-jsonl").getAttribute("href")`)
	if href != "/api/export?format=jsonl&teacher=alpha&correct=0" {
		t.Errorf("JSONL export link %q", href)
	}
	lines := evalAsync[int](b, `fetch(document.querySelector("#export-jsonl").href).then(r => r.text()).then(t => t.trim().split("\n").length)`)
	if lines != len(want) {
		t.Errorf("JSONL export: %d lines, want %d", lines, len(want))
	}
	b64 := evalAsync[string](b, `fetch(document.querySelector("#export-parquet").href).then(r => r.arrayBuffer()).then(buf => {
		const u = new Uint8Array(buf); let s = "";
		for (let i = 0; i < u.length; i += 8192) s += String.fromCharCode(...u.subarray(i, i + 8192));
		return btoa(s);
	})`)
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	got := readParquet(t, data)
	if len(got) != len(want) {
		t.Fatalf("Parquet export: %d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Key != want[i].Key || len(got[i].Messages) != len(want[i].Messages) {
			t.Errorf("Parquet export row %d: %s, want %s", i, got[i].Key, want[i].Key)
		}
	}
	b.shot("export")
}
