package stats

import (
	"bytes"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

// plotsDir is where TestChartsReadable writes its PNGs: $CHAINEDSQL_PLOTS_OUT when set (to look
// at them), else a temporary directory.
func plotsDir(t *testing.T) string {
	if d := os.Getenv("CHAINEDSQL_PLOTS_OUT"); d != "" {
		return d
	}
	return t.TempDir()
}

// teacherSeries makes log-normal token lengths and turn counts shaped like four real teachers.
func teacherSeries() (tokens, turns []Series, outs []Outcomes) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i, name := range []string{"deepseek", "glm", "gpt-oss", "qwen"} {
		n := 1500 + 700*i
		tok := Series{Name: name}
		tu := Series{Name: name}
		o := Outcomes{Name: name, Rows: n}
		for k := 0; k < n; k++ {
			tok.Values = append(tok.Values, int(math.Exp(math.Log(1800+900*float64(i))+0.7*rng.NormFloat64())))
			t := 1 + min(4, int(math.Abs(rng.NormFloat64()*float64(1+i%2))))
			tu.Values = append(tu.Values, t)
			o.Turns += t
			if rng.IntN(10) < 7 {
				o.Converged++
			}
			if rng.IntN(10) < 8 {
				o.ExecOK++
			}
			if rng.IntN(10) < 5-i {
				o.Correct++
			}
			if rng.IntN(40) < i {
				o.RowsWithViolation++
				o.Violations += 1 + rng.IntN(2)
			}
		}
		tokens, turns, outs = append(tokens, tok), append(turns, tu), append(outs, o)
	}
	return tokens, turns, outs
}

// TestChartsReadable checks the properties the charts are for: axes that fit the data (the
// token axis does not start at 0, goes logarithmic when wide), whole-number ticks on counts,
// headroom above the highest bar or peak, bars half a category inside each edge.
func TestChartsReadable(t *testing.T) {
	tokens, turns, outs := teacherSeries()
	dir := plotsDir(t)
	var charts []*Chart

	tc, err := TokenLengthChart("Token length per teacher", "tokens per row", tokens)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.MaxInt, 0
	for _, s := range tokens {
		for _, v := range s.Values {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if _, ok := tc.p.X.Scale.(plot.LogScale); !ok {
		t.Errorf("tokens %d..%d: want a log x axis", lo, hi)
	}
	if tc.p.X.Min > float64(lo) || tc.p.X.Min < float64(lo)*0.9 || tc.p.X.Max < float64(hi) || tc.p.X.Max > float64(hi)*1.1 {
		t.Errorf("x axis %.0f..%.0f does not fit the data %d..%d", tc.p.X.Min, tc.p.X.Max, lo, hi)
	}
	checkIntTicks(t, "tokens y", tc.p.Y.Tick.Marker.Ticks(tc.p.Y.Min, tc.p.Y.Max))
	charts = append(charts, tc)

	// A narrow range stays linear and starts near the data, not at 0.
	narrow, err := TokenLengthChart("narrow", "tokens", []Series{{Name: "oracle", Values: []int{880, 910, 1000, 1350, 1200}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := narrow.p.X.Scale.(plot.LogScale); ok || narrow.p.X.Min < 800 || narrow.p.X.Min > 880 || narrow.p.X.Max < 1350 {
		t.Errorf("narrow: x %.0f..%.0f", narrow.p.X.Min, narrow.p.X.Max)
	}
	checkIntTicks(t, "narrow x", narrow.p.X.Tick.Marker.Ticks(narrow.p.X.Min, narrow.p.X.Max))

	// Values all alike: the one full bin sits inside the axis, with empty bins either side.
	for _, v := range []int{160, 0, 1} {
		same, err := TokenLengthChart("same", "tokens", []Series{{Name: "scripted", Values: []int{v, v, v}}})
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := same.p.X.Min, same.p.X.Max; hi-lo < 5 || float64(v) < lo || float64(v)+1 > hi || (v > 0 && float64(v) == lo) || float64(v)+1 == hi || lo < 0 {
			t.Errorf("values all %d: x %.0f..%.0f", v, lo, hi)
		}
	}

	uc, err := TurnsChart("teacher", turns)
	if err != nil {
		t.Fatal(err)
	}
	if uc.p.X.Min != -0.5 || uc.p.X.Max != 4.5 {
		t.Errorf("turns x axis %.1f..%.1f, want -0.5..4.5 (five categories, none cut)", uc.p.X.Min, uc.p.X.Max)
	}
	checkIntTicks(t, "turns y", uc.p.Y.Tick.Marker.Ticks(uc.p.Y.Min, uc.p.Y.Max))
	charts = append(charts, uc)

	rc, err := RatesChart("teacher", outs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range rc.p.Y.Tick.Marker.Ticks(rc.p.Y.Min, rc.p.Y.Max) {
		if tk.Value > 100 {
			t.Errorf("rate tick %v above 100%%", tk)
		}
	}
	charts = append(charts, rc)
	vc, err := ViolationsChart("teacher", outs)
	if err != nil {
		t.Fatal(err)
	}
	if vc.p.Y.Max > 20 {
		t.Errorf("violations y axis goes to %.0f%% for shares under 10%%", vc.p.Y.Max)
	}
	charts = append(charts, vc)

	ec, err := EXChart([]PolicyEX{
		{Name: "student", Summary: SummarizeEval(evalResults(0.3))},
		{Name: "deepseek", Summary: SummarizeEval(evalResults(0.6))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ec.p.X.Max != 3.5 { // simple, moderate, challenging, all
		t.Errorf("EX chart x max %.1f", ec.p.X.Max)
	}
	charts = append(charts, ec)

	paths, err := WriteCharts(dir, charts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r := img.Bounds(); r.Dx() < 700 || r.Dy() < 400 {
			t.Errorf("%s is %v", filepath.Base(p), r)
		}
	}
	t.Logf("charts in %s", dir)
}

func evalResults(p float64) []EvalResult {
	rng := rand.New(rand.NewPCG(3, uint64(p*100)))
	var out []EvalResult
	for i := 0; i < 1534; i++ {
		d := []string{"simple", "simple", "moderate", "challenging"}[i%4]
		out = append(out, EvalResult{Difficulty: d, Correct: rng.Float64() < p*(1-0.2*float64(i%4)), Turns: 2})
	}
	return out
}

func checkIntTicks(t *testing.T, what string, ticks []plot.Tick) {
	t.Helper()
	labelled := 0
	for _, tk := range ticks {
		if tk.Label == "" {
			continue
		}
		labelled++
		if strings.ContainsAny(tk.Label, ".") || tk.Value != math.Trunc(tk.Value) {
			t.Errorf("%s: tick %v is not a whole number", what, tk)
		}
	}
	if labelled < 3 || labelled > 9 {
		t.Errorf("%s: %d labelled ticks %v", what, labelled, ticks)
	}
}

func TestTickHelpers(t *testing.T) {
	for x, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7: 10, 45: 50, 120: 200} {
		if got := niceStep(x); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", x, got, want)
		}
	}
	for x, want := range map[float64]float64{0.5: 1, 520: 500, 780: 1000, 140: 100, 160: 200} {
		if got := nearStep(x); got != want {
			t.Errorf("nearStep(%v) = %v, want %v", x, got, want)
		}
	}
	if got := thousands(1234567); got != "1,234,567" {
		t.Errorf("thousands: %s", got)
	}
	var labels []string
	for _, tk := range (logTicks{}).Ticks(150, 30000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "200 500 1,000 2,000 5,000 10,000 20,000" {
		t.Errorf("log ticks: %s", got)
	}
}

// TestLegendMedianIsTheTablesP50: the token chart's legend gives the p50 the tables print
// (nearest rank), not another median.
func TestLegendMedianIsTheTablesP50(t *testing.T) {
	for _, c := range []struct {
		v    []int
		want int
	}{{[]int{4, 1, 3, 2}, 2}, {[]int{5}, 5}, {[]int{3, 1, 2}, 2}, {nil, 0}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %d, want %d", c.v, got, c.want)
		}
	}
}

// TestEmptyChartsHaveNoTicks: a chart with no data says so in its title and draws no numbers
// on its axes (0.0–1.0 would read as data).
func TestEmptyChartsHaveNoTicks(t *testing.T) {
	charts := []func() (*Chart, error){
		func() (*Chart, error) { return TokenLengthChart("tokens", "tokens", nil) },
		func() (*Chart, error) { return TurnsChart("teacher", nil) },
		func() (*Chart, error) { return RatesChart("teacher", nil) },
		func() (*Chart, error) { return ViolationsChart("teacher", nil) },
		func() (*Chart, error) { return EXChart(nil) },
	}
	for _, f := range charts {
		c, err := f()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(c.Title, "(no ") {
			t.Errorf("%s: title %q does not say it is empty", c.Name, c.Title)
		}
		if n := len(c.p.X.Tick.Marker.Ticks(c.p.X.Min, c.p.X.Max)) + len(c.p.Y.Tick.Marker.Ticks(c.p.Y.Min, c.p.Y.Max)); n != 0 {
			t.Errorf("%s: %d ticks on an empty chart", c.Name, n)
		}
		if _, err := c.PNG(); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
}

// TestChartsUnjudged: a group's unjudged rows are named under it in the rates chart, and a
// policy's unjudged results in its EX chart legend entry.
func TestChartsUnjudged(t *testing.T) {
	rc, err := RatesChart("teacher", []Outcomes{{Name: "alpha", Rows: 4, Correct: 2, Unjudged: 1}, {Name: "beta", Rows: 2, Correct: 2}})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, tk := range rc.p.X.Tick.Marker.Ticks(rc.p.X.Min, rc.p.X.Max) {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, "|"); got != "alpha\n4 rows, 1 unjudged|beta\n2 rows" {
		t.Errorf("rates chart categories %q", got)
	}
	res := []EvalResult{{Correct: true, Turns: 1}, {Turns: 1, Unjudged: true}, {Turns: 1}}
	if got := (PolicyEX{Name: "student", Summary: SummarizeEval(res)}).legend(); got != "student (1 of 3 unjudged)" {
		t.Errorf("EX legend %q", got)
	}
	if got := (PolicyEX{Name: "student", Summary: SummarizeEval(res[:1])}).legend(); got != "student" {
		t.Errorf("EX legend without unjudged %q", got)
	}
}
