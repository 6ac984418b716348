package view

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/stats"
)

// StatsPage is the stats page: one section per dataset (the tables of curate stats and its
// charts), or one section over all run or eval dirs.
type StatsPage struct {
	Sections []StatsSection `json:"sections"`
}

// StatsSection is a titled group of tables and charts.
type StatsSection struct {
	Title  string        `json:"title"`
	Tables []stats.Table `json:"tables"`
	Charts []ChartRef    `json:"charts"`
	Error  string        `json:"error,omitempty"`
}

// ChartRef names a chart the page loads from /api/chart.
type ChartRef struct {
	Title string `json:"title"`
	URL   string `json:"url"`
}

// cachedStats is a section with its charts' PNGs, valid while the index version holds.
type cachedStats struct {
	version int64
	section StatsSection
	charts  map[string]*stats.Chart
	png     map[string][]byte
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	var page StatsPage
	for key := range s.statsKeys() {
		c := s.stats(r.Context(), key)
		page.Sections = append(page.Sections, c.section)
	}
	writeJSON(w, page)
}

// statsKeys names the sections: one per dataset, or "runs".
func (s *Server) statsKeys() func(func(string) bool) {
	return func(yield func(string) bool) {
		if s.kind != KindDataset {
			yield("runs")
			return
		}
		for i := range s.datasets {
			if !yield(strconv.Itoa(i)) {
				return
			}
		}
	}
}

// stats returns the section named key, computing it when the index changed since.
func (s *Server) stats(ctx context.Context, key string) *cachedStats {
	s.ix.mu.RLock()
	version := s.ix.version
	s.ix.mu.RUnlock()
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if c := s.statsCache[key]; c != nil && (c.version == version || s.kind == KindDataset) {
		return c
	}
	c := &cachedStats{version: version, charts: map[string]*stats.Chart{}, png: map[string][]byte{}}
	var charts []*stats.Chart
	var err error
	if key == "runs" {
		c.section, charts, err = s.runStats()
	} else {
		i, _ := strconv.Atoi(key)
		c.section, charts, err = s.datasetStats(ctx, s.datasets[i].dir)
	}
	if err != nil {
		c.section.Error = err.Error()
	}
	c.section.Charts = []ChartRef{}
	for _, ch := range charts {
		c.charts[ch.Name] = ch
		c.section.Charts = append(c.section.Charts, ChartRef{Title: ch.Title, URL: fmt.Sprintf("/api/chart?s=%s&name=%s&v=%d", key, ch.Name, version)})
	}
	if c.section.Tables == nil {
		c.section.Tables = []stats.Table{}
	}
	if ctx.Err() == nil {
		// A section cut short by a request that went away is not kept: a dataset's is kept for
		// good, and the next request must compute it whole.
		s.statsCache[key] = c
	}
	return c
}

func (s *Server) datasetStats(ctx context.Context, dir string) (StatsSection, []*stats.Chart, error) {
	sec := StatsSection{Title: "Dataset " + dir}
	st, err := stats.Dataset(ctx, dir)
	if err != nil {
		return sec, nil, err
	}
	sec.Tables = st.Tables()
	charts, err := st.Charts()
	return sec, charts, err
}

// runStats summarises the trajectories of the run or eval dirs per teacher (policy) with
// stats' own summaries: the eval headline of each, its outcomes, and the charts.
func (s *Server) runStats() (StatsSection, []*stats.Chart, error) {
	by := "teacher"
	if s.kind == KindEval {
		by = "policy"
	}
	sec := StatsSection{Title: "Trajectories per " + by}
	type group struct {
		results []stats.EvalResult
		out     rundir.Tally
		tokens  []int
		turns   []int
	}
	groups := map[string]*group{}
	var names []string
	for _, r := range s.runs {
		for _, t := range r.snapshot() {
			g := groups[t.Teacher]
			if g == nil {
				g = &group{}
				groups[t.Teacher] = g
				names = append(names, t.Teacher)
			}
			o := t.Outcome()
			g.results = append(g.results, stats.EvalResultOf(t.Difficulty, o))
			g.out.Add(o)
			if t.Usage.CompletionTokens > 0 {
				// Zero means the endpoint reported no usage (the oracle, some providers): no
				// length to plot.
				g.tokens = append(g.tokens, t.Usage.CompletionTokens)
			}
			g.turns = append(g.turns, len(t.Turns))
		}
	}
	slices.Sort(names)
	head := stats.Table{Title: "Outcomes (from the trajectories read so far)",
		Header: []string{by, "trajectories", "EX", "by difficulty", "convergence", "exec-ok", "format violations (turns)", "malformed turns", "avg turns", "unjudged (gold SQL failed)"}}
	var tokens, turns []stats.Series
	var outs []stats.Outcomes
	var exs []stats.PolicyEX
	for _, n := range names {
		g := groups[n]
		sum := stats.SummarizeEval(g.results)
		head.Rows = append(head.Rows, []string{n, strconv.Itoa(sum.N), pct(sum.EX), sum.FormatEX(), pct(sum.Convergence), pct(sum.ExecOK),
			pct(sum.FormatViolationRate), strconv.Itoa(sum.MalformedTurns), strconv.FormatFloat(sum.AvgTurns, 'f', 2, 64), strconv.Itoa(sum.Unjudged)})
		if len(g.tokens) > 0 {
			tokens = append(tokens, stats.Series{Name: n, Values: g.tokens})
		}
		turns = append(turns, stats.Series{Name: n, Values: g.turns})
		outs = append(outs, stats.OutcomesOf(n, g.out))
		exs = append(exs, stats.PolicyEX{Name: n, Summary: sum})
	}
	sec.Tables = append(sec.Tables, head)
	if s.kind == KindEval {
		t := stats.Table{Title: "summary.json of each eval dir (vote and failed episodes included)", Header: []string{"eval dir", "policy", "complete", "headline"}}
		for _, r := range s.runs {
			sum, _ := r.evalFiles()
			if sum == nil {
				t.Rows = append(t.Rows, []string{filepath.Base(r.dir), r.policyName(), "no summary.json yet", ""})
				continue
			}
			t.Rows = append(t.Rows, []string{filepath.Base(r.dir), sum.Policy, strconv.FormatBool(sum.Complete), sum.Eval.Headline()})
		}
		sec.Tables = append(sec.Tables, t)
	}
	var charts []*stats.Chart
	for _, f := range []func() (*stats.Chart, error){
		func() (*stats.Chart, error) {
			return stats.TokenLengthChart(strings.ToUpper(by[:1])+by[1:]+" completion tokens per trajectory",
				"completion tokens over the episode (the "+by+"'s count; trajectories without usage left out)", tokens)
		},
		func() (*stats.Chart, error) { return stats.TurnsChart(by, turns) },
		func() (*stats.Chart, error) { return stats.RatesChart(by, outs) },
		func() (*stats.Chart, error) { return stats.ViolationsChart(by, outs) },
		func() (*stats.Chart, error) { return stats.EXChart(exs) },
	} {
		c, err := f()
		if err != nil {
			return sec, charts, err
		}
		charts = append(charts, c)
	}
	return sec, charts, nil
}

func pct(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }

func (s *Server) handleChart(w http.ResponseWriter, r *http.Request) {
	key, name := r.URL.Query().Get("s"), r.URL.Query().Get("name")
	known := false
	for k := range s.statsKeys() {
		known = known || k == key
	}
	if !known {
		httpError(w, http.StatusNotFound, fmt.Errorf("no stats section %q", key))
		return
	}
	c := s.stats(r.Context(), key)
	s.statsMu.Lock()
	png, ok := c.png[name]
	ch := c.charts[name]
	s.statsMu.Unlock()
	if !ok {
		if ch == nil {
			httpError(w, http.StatusNotFound, fmt.Errorf("no chart %q", name))
			return
		}
		var err error
		if png, err = ch.PNG(); err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		s.statsMu.Lock()
		c.png[name] = png
		s.statsMu.Unlock()
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(png)
}
