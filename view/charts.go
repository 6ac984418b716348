package view

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Bar is one bar of a chart of the rows a query matches.
type Bar struct {
	Label string `json:"label"`
	// Count is how many matching rows fall in the bar; Correct how many of them are correct;
	// Unjudged how many could not be judged (rundir.Outcome.Unjudged, kept in the index as a
	// flag: their gold SQL gave no result, so they are never correct).
	Count    int `json:"count"`
	Correct  int `json:"correct"`
	Unjudged int `json:"unjudged"`
	// Filter is the URL filter that narrows the table to the bar (name=value&…).
	Filter string `json:"filter"`
}

// Chart is a histogram or bar chart over the matching rows.
type Chart struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Bars  []Bar  `json:"bars"`
}

// ChartsPage is the charts of the rows a query matches.
type ChartsPage struct {
	Total  int     `json:"total"`
	Charts []Chart `json:"charts"`
}

// histBuckets is the number of buckets of a histogram.
const histBuckets = 20

// Charts computes the charts of the rows q matches (its order and page aside): histograms of
// tokens, trainable tokens (datasets) and turns; rows, correct and unjudged rows by teacher,
// dialect and difficulty (the page shows the share correct, EX, beside each, and the unjudged
// among them).
func (s *Server) Charts(q Query) (ChartsPage, error) {
	text, err := s.preHits(q)
	if err != nil {
		return ChartsPage{}, err
	}
	tokensName := s.Info().TokensName
	s.ix.mu.RLock()
	defer s.ix.mu.RUnlock()
	q.Sort = ""
	hits, _ := s.ix.matches(q, text)
	page := ChartsPage{Total: len(hits)}
	hist := func(name, title, lo, hi string, val func(e *entry) int) {
		c := Chart{Name: name, Title: title, Bars: []Bar{}}
		if len(hits) == 0 {
			page.Charts = append(page.Charts, c)
			return
		}
		mn, mx := val(&s.ix.entries[hits[0]]), val(&s.ix.entries[hits[0]])
		for _, i := range hits {
			v := val(&s.ix.entries[i])
			mn, mx = min(mn, v), max(mx, v)
		}
		width := max(1, (mx-mn+histBuckets)/histBuckets)
		n := (mx-mn)/width + 1
		for k := 0; k < n; k++ {
			a, b := mn+k*width, mn+(k+1)*width-1
			label := strconv.Itoa(a)
			if b > a {
				label += "–" + strconv.Itoa(b)
			}
			bar := Bar{Label: label}
			if lo != "" {
				// The table's ranges take whole numbers >= 1 (0 is open).
				bar.Filter = lo + "=" + strconv.Itoa(max(a, 1)) + "&" + hi + "=" + strconv.Itoa(max(b, 1))
			}
			c.Bars = append(c.Bars, bar)
		}
		for _, i := range hits {
			e := &s.ix.entries[i]
			c.Bars[(val(e)-mn)/width].add(e)
		}
		page.Charts = append(page.Charts, c)
	}
	hist("tokens", "rows by "+tokensName, "tokens_min", "tokens_max", func(e *entry) int { return int(e.tokens) })
	if s.kind == KindDataset {
		// The table filters trainable tokens by no range of its own: the bars say no filter.
		hist("trainable", "rows by trainable tokens", "", "", func(e *entry) int { return int(e.trainable) })
	}
	hist("turns", "rows by turns", "turns_min", "turns_max", func(e *entry) int { return int(e.turns) })
	for _, f := range []int{facetTeacher, facetDialect, facetDifficulty} {
		c := Chart{Name: facetNames[f], Title: "rows and EX by " + facetNames[f], Bars: []Bar{}}
		by := make([]Bar, len(s.ix.facets[f].names))
		for _, i := range hits {
			e := &s.ix.entries[i]
			by[e.facet[f]].add(e)
		}
		for id, b := range by {
			if b.Count > 0 {
				name := s.ix.facets[f].names[id]
				b.Label, b.Filter = name, url.Values{facetNames[f]: {name}}.Encode()
				c.Bars = append(c.Bars, b)
			}
		}
		slices.SortFunc(c.Bars, func(a, b Bar) int { return strings.Compare(a.Label, b.Label) })
		page.Charts = append(page.Charts, c)
	}
	return page, nil
}

// add counts the row e in the bar, by the outcome flags the index keeps (a Tally per bar took
// twice the time over 75,858 rows).
func (b *Bar) add(e *entry) {
	b.Count++
	if e.flags&flagCorrect != 0 {
		b.Correct++
	}
	if e.flags&flagUnjudged != 0 {
		b.Unjudged++
	}
}

func (s *Server) handleCharts(w http.ResponseWriter, r *http.Request) { serveQuery(w, r, s.Charts) }
