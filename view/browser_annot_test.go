package view

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserAnnotations: a label and a note typed on a row page and saved are there after a
// reload; a save from a revision another tab overwrote shows the stored version; the rows
// page's label facet narrows the table to the labelled row, the note filter to the noted row,
// "labelled: no" to the others; the page's export carries the labels and note columns.
func TestBrowserAnnotations(t *testing.T) {
	dir := annotatedCopy(t)
	rows := readRows(t, dir)
	s := openServer(t, nil, dir)
	b := newBrowser(t, s)
	const id = 3
	row := fmt.Sprintf("#/row/%d", id)
	b.open(row)
	b.do(chromedp.SendKeys(chromedp.CSS("#annot-label-input"), "needs review\r"),
		chromedp.SendKeys(chromedp.CSS("#annot-label-input"), "good"), // saved with the note, without Enter
		chromedp.SendKeys(chromedp.CSS("#annot-note"), "the join is right; gold has a typo"),
		chromedp.Click(chromedp.CSS("#annot-save")))
	b.wait(`document.querySelector("#annot-status").textContent.startsWith("saved")`)
	b.shot("annotation")

	b.do(chromedp.Navigate("about:blank"))
	b.open(row)
	labels := eval[[]string](b, `[...document.querySelectorAll("#annot-labels [data-label]")].map(e => e.dataset.label)`)
	if fmt.Sprint(labels) != "[needs review good]" {
		t.Errorf("labels after a reload: %q", labels)
	}
	if got := eval[string](b, `document.querySelector("#annot-note").value`); got != "the join is right; gold has a typo" {
		t.Errorf("note after a reload: %q", got)
	}

	// Another tab saves first: this tab's save is refused and shows the stored version.
	body := fmt.Sprintf(`{"id":%d,"labels":["good"],"note":"from the other tab","rev":1}`, id)
	if code, answer := post(t, b.base, "/api/annotate", "", "application/json", body); code != 200 {
		t.Fatalf("other tab's save: %d %s", code, answer)
	}
	b.do(chromedp.SendKeys(chromedp.CSS("#annot-note"), " (edited)"), chromedp.Click(chromedp.CSS("#annot-save")))
	b.wait(`document.querySelector("#annot-status").textContent.includes("another tab")`)
	if got := eval[string](b, `document.querySelector("#annot-note").value`); got != "from the other tab" {
		t.Errorf("after a conflict the note shows %q, want the stored one", got)
	}
	// The dataset's labels are offered as suggestions.
	b.wait(`[...document.querySelectorAll("#annot-known option")].map(o => o.value).join("|") === "good|needs review"`)
	b.do(chromedp.SendKeys(chromedp.CSS("#annot-label-input"), "checked\r"), chromedp.Click(chromedp.CSS("#annot-save")))
	b.wait(`document.querySelector("#annot-status").textContent.startsWith("saved")`)

	// The label facet.
	b.open("#/")
	if got := eval[string](b, `[...document.querySelectorAll("#f-labels label")].map(l => l.textContent.trim()).join("|")`); got != "checked 1|good 1" {
		t.Errorf("label facet %q", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`input[data-facet="label"][value="checked"]`)))
	b.ready("#/?label=checked")
	if ids := tableIDs(b); fmt.Sprint(ids) != fmt.Sprint([]int{id}) {
		t.Errorf("label=checked shows rows %v", ids)
	}
	if got := eval[string](b, `[...document.querySelectorAll("#rows tbody td.q .tag")].map(e => e.textContent).join("|")`); got != "good|checked|note" {
		t.Errorf("the row's tags in the table: %q", got)
	}
	b.noErrors()
	b.shot("label-filter")

	// The note and labelled filters: the one annotated row has both; "labelled: no" keeps
	// every other row.
	choose := func(sel, value string) {
		t.Helper()
		b.do(chromedp.SetValue(chromedp.CSS(sel), value))
		eval[bool](b, `document.querySelector("`+sel+`").dispatchEvent(new Event("change")), true`)
	}
	b.open("#/")
	choose("#f-noted", "1")
	b.ready("#/?noted=1")
	if ids := tableIDs(b); fmt.Sprint(ids) != fmt.Sprint([]int{id}) {
		t.Errorf("noted=1 shows rows %v", ids)
	}
	b.open("#/")
	choose("#f-labelled", "0")
	b.ready("#/?labelled=0")
	if n := eval[string](b, `document.querySelector("#summary").textContent`); !strings.HasPrefix(n, fmt.Sprintf("%d of ", len(rows)-1)) {
		t.Errorf("labelled=0: %q, want %d rows", n, len(rows)-1)
	}
	if ids := tableIDs(b); slices.Contains(ids, id) || len(ids) == 0 {
		t.Errorf("labelled=0 shows rows %v (the labelled row is %d)", ids, id)
	}
	b.shot("unlabelled")
	b.open("#/?noted=1&label=checked")

	text := evalAsync[string](b, `fetch(document.querySelector("#export-jsonl").href).then(r => r.text())`)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	var got AnnotatedRow
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &got) != nil || got.Key != rows[id].Key ||
		fmt.Sprint(got.Labels) != "[good checked]" || got.Note != "from the other tab" {
		t.Errorf("export of label=checked: %d lines, %s %q %q", len(lines), got.Key, got.Labels, got.Note)
	}
}

// TestBrowserSQLFormat: the row page shows final and gold SQL formatted, a click shows them as
// written, the choice outlives a reload, another click formats them again.
func TestBrowserSQLFormat(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	id := -1
	for i, r := range rows {
		if strings.Contains(r.FinalSQL, " FROM ") && strings.Contains(r.GoldSQL, " FROM ") && formatSQL(r.GoldSQL) != r.GoldSQL {
			id = i
			break
		}
	}
	if id < 0 {
		t.Fatal("no row with final and gold SQL to format")
	}
	b := newBrowser(t, openServer(t, nil, fx.dataset))
	row := fmt.Sprintf("#/row/%d", id)
	b.open(row)
	shown := func() (final, gold string) {
		return eval[string](b, `document.querySelector("#outcome pre.final-sql").textContent`),
			eval[string](b, `document.querySelector("#outcome pre.gold-sql").textContent`)
	}
	check := func(when string, formatted bool) {
		t.Helper()
		final, gold := shown()
		wantF, wantG := rows[id].FinalSQL, rows[id].GoldSQL
		if formatted {
			wantF, wantG = formatSQL(wantF), formatSQL(wantG)
		}
		if final != wantF || gold != wantG {
			t.Errorf("%s: final SQL\n%s\ngold SQL\n%s\nwant\n%s\n%s", when, final, gold, wantF, wantG)
		}
	}
	check("at first", true)
	if _, gold := shown(); !strings.Contains(gold, "\nFROM") {
		t.Errorf("formatted gold SQL has no line for FROM: %q", gold)
	}
	b.shot("sql-formatted")
	b.do(chromedp.Click(chromedp.CSS("#sql-format")))
	check("after a click", false)
	b.do(chromedp.Navigate("about:blank"))
	b.open(row)
	check("after a reload", false)
	b.do(chromedp.Click(chromedp.CSS("#sql-format")))
	check("after a second click", true)
	b.noErrors()
}
