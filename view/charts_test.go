package view

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chainedsql/chainedsql/curate"
)

// TestCharts checks /api/charts under a filter against the rows read back: each chart covers
// every matching row, the bars by teacher, dialect and difficulty count the rows and correct
// rows, and a histogram bar's filter selects as many rows as the bar counts.
func TestCharts(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	h := openServer(t, fx.tok, fx.dataset).Handler()
	keep := func(r *curate.Row) bool { return r.Turns >= 2 }
	var p ChartsPage
	if code := get(t, h, "/api/charts?turns_min=2&sort=-tokens&offset=5", &p); code != 200 {
		t.Fatalf("charts: %d", code)
	}
	want := 0
	byFacet := map[string]map[string][2]int{"teacher": {}, "dialect": {}, "difficulty": {}}
	for i := range rows {
		r := &rows[i]
		if !keep(r) {
			continue
		}
		want++
		for f, v := range map[string]string{"teacher": r.Teacher, "dialect": r.Dialect, "difficulty": r.Difficulty} {
			c := byFacet[f][v]
			c[0]++
			if r.Correct {
				c[1]++
			}
			byFacet[f][v] = c
		}
	}
	if p.Total != want || len(p.Charts) != 6 {
		t.Fatalf("charts of %d rows (%d charts), want %d rows, 6 charts", p.Total, len(p.Charts), want)
	}
	for _, c := range p.Charts {
		sum := 0
		for _, b := range c.Bars {
			sum += b.Count
		}
		if sum != want {
			t.Errorf("chart %s counts %d rows, want %d", c.Name, sum, want)
		}
		if m, ok := byFacet[c.Name]; ok {
			for _, b := range c.Bars {
				if m[b.Label] != [2]int{b.Count, b.Correct} {
					t.Errorf("chart %s, %s: %d rows, %d correct; want %v", c.Name, b.Label, b.Count, b.Correct, m[b.Label])
				}
			}
			continue
		}
		for _, b := range c.Bars {
			if b.Filter == "" {
				continue
			}
			var rp Page
			get(t, h, "/api/rows?turns_min=2&"+b.Filter, &rp)
			// turns_min of the bar replaces the filter's own where it is later in the URL.
			if c.Name != "turns" && rp.Total != b.Count {
				t.Errorf("chart %s, bar %s: the bar's filter %q selects %d rows, the bar counts %d", c.Name, b.Label, b.Filter, rp.Total, b.Count)
			}
		}
	}
	var none ChartsPage
	if get(t, h, "/api/charts?teacher=nobody", &none); none.Total != 0 || len(none.Charts) != 6 {
		t.Errorf("charts of no rows: %+v", none)
	}
	if code := get(t, h, "/api/charts?turns_min=x", nil); code != 400 {
		t.Errorf("bad filter: %d", code)
	}
}

// TestBrowserCharts: the rows page's charts follow the filter, and a bar's click narrows the
// table to it.
func TestBrowserCharts(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	b := newBrowser(t, openServer(t, fx.tok, fx.dataset))
	b.open("#/?teacher=alpha")
	alpha := 0
	for _, r := range rows {
		if r.Teacher == "alpha" {
			alpha++
		}
	}
	if n := eval[int](b, `document.querySelectorAll("#minicharts figure").length`); n != 6 {
		t.Fatalf("%d charts", n)
	}
	sum := func(chart string) int {
		return eval[int](b, `[...document.querySelectorAll('figure[data-chart="`+chart+`"] rect.bar')].reduce((s, r) => s + Number(r.dataset.count), 0)`)
	}
	for _, c := range []string{"tokens", "trainable", "turns", "teacher", "difficulty"} {
		if got := sum(c); got != alpha {
			t.Errorf("chart %s counts %d rows under teacher=alpha, want %d", c, got, alpha)
		}
	}
	b.shot("charts")
	label := eval[string](b, `document.querySelector('figure[data-chart="difficulty"] rect.bar').dataset.label`)
	b.do(chromedp.Click(chromedp.CSS(`figure[data-chart="difficulty"] rect.bar`)))
	b.ready("#/?teacher=alpha&" + url.Values{"difficulty": {label}}.Encode())
	want := 0
	for _, r := range rows {
		if r.Teacher == "alpha" && r.Difficulty == label {
			want++
		}
	}
	if got := eval[string](b, `document.querySelector("#summary").textContent`); !strings.HasPrefix(got, fmt.Sprintf("%d of", want)) {
		t.Errorf("after a click on the %s bar: %q, want %d rows", label, got, want)
	}
	if got := sum("difficulty"); got != want {
		t.Errorf("the difficulty chart follows the filter with %d rows, want %d", got, want)
	}
	b.noErrors()
}
