package view

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
)

// BenchmarkPage renders pages of the viewer in headless Chromium over the benchmark dataset
// (BenchEnv; its full-text index built first): each op opens the page afresh and waits for the
// app's ready mark. It reports the medians of the page's own clocks: load-ms from the
// document's navigation to the page drawn (info, the table query, the page's JavaScript),
// render-ms from the app's render call (the API calls and drawing); the charts and a row's
// results come after, as they arrive. Skipped without Chromium.
func BenchmarkPage(b *testing.B) {
	s, err := Open(context.Background(), Options{Paths: []string{benchPath(b, "dataset")}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	if err := s.WaitSearch(context.Background()); err != nil {
		b.Fatal(err)
	}
	br := newBrowser(b, s)
	n := s.Rows()
	pages := map[string]string{
		"rows":             "#/",
		"rows-filtered":    "#/?teacher=glm&correct=0&violations=none&sort=-tokens",
		"search-reasoning": "#/?text=great&in=reasoning",
		"row":              "#/row/" + strconv.Itoa(n/2),
		"row-last":         "#/row/" + strconv.Itoa(n-1),
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		b.Run(name, func(b *testing.B) {
			br.t = b
			var load, render []float64
			for b.Loop() {
				b.StopTimer()
				br.do(chromedp.Navigate("about:blank"))
				b.StartTimer()
				br.open(pages[name])
				b.StopTimer()
				l, _ := strconv.ParseFloat(eval[string](br, `document.body.dataset.loadMs`), 64)
				r, _ := strconv.ParseFloat(eval[string](br, `document.body.dataset.renderMs`), 64)
				load, render = append(load, l), append(render, r)
				br.noErrors()
				b.StartTimer()
			}
			b.ReportMetric(median(load), "load-ms")
			b.ReportMetric(median(render), "render-ms")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	sort.Float64s(v)
	return v[len(v)/2]
}
