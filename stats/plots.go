package stats

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/rundir"
)

// Chart file names (Chart.Name).
const (
	TokensPlot     = "tokens_per_teacher.png"
	TurnsPlot      = "turns_per_teacher.png"
	RatesPlot      = "rates_per_teacher.png"
	ViolationsPlot = "format_violations_per_teacher.png"
	EXPlot         = "ex_by_difficulty.png"
)

// Chart size and the plot area left for data once the axes take their share; bar widths are
// given in canvas units, so they are sized from this estimate.
const (
	chartW    = 8 * vg.Inch
	chartH    = 5 * vg.Inch
	plotAreaW = 7 * vg.Inch
)

// Chart is one plot, drawn on demand.
type Chart struct {
	// Name is the chart's file name (one of the *Plot constants).
	Name string
	// Title is the chart's title, as drawn on it.
	Title string
	p     *plot.Plot
}

// WritePNG draws the chart as an 8×5 inch PNG.
func (c *Chart) WritePNG(w io.Writer) error {
	wt, err := c.p.WriterTo(chartW, chartH, "png")
	if err != nil {
		return fmt.Errorf("plot %s: %w", c.Name, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("plot %s: %w", c.Name, err)
	}
	return nil
}

// PNG returns the chart drawn as PNG bytes.
func (c *Chart) PNG() ([]byte, error) {
	var b bytes.Buffer
	err := c.WritePNG(&b)
	return b.Bytes(), err
}

// Series is a named set of integer values, one per row (token lengths, turns).
type Series struct {
	Name   string
	Values []int
}

// Outcomes counts what happened to a group of trajectories (a teacher's rows).
type Outcomes struct {
	Name      string
	Rows      int
	Converged int
	ExecOK    int
	Correct   int
	// Unjudged counts the rows whose gold SQL gave no result (never correct).
	Unjudged          int
	RowsWithViolation int
	// Turns is the number of assistant turns over all rows; Violations how many of them were
	// format violations.
	Turns      int
	Violations int
}

// OutcomesOf returns the Outcomes of a group named name from its tally.
func OutcomesOf(name string, t rundir.Tally) Outcomes {
	return Outcomes{Name: name, Rows: t.N, Converged: t.Converged, ExecOK: t.ExecOK, Correct: t.Correct, Unjudged: t.Unjudged,
		RowsWithViolation: t.RowsWithViolation, Turns: t.Turns, Violations: t.FormatViolations}
}

// PolicyEX is one policy's evaluation, for EXChart.
type PolicyEX struct {
	Name    string
	Summary EvalSummary
}

// Charts returns the dataset's charts: token length, turns used, convergence / exec-ok /
// correct rates and format violations, each per teacher.
func (s *DatasetStats) Charts() ([]*Chart, error) {
	names := make([]string, len(s.Teachers))
	tokens := make([]Series, len(s.Teachers))
	turns := make([]Series, len(s.Teachers))
	outs := make([]Outcomes, len(s.Teachers))
	for i, g := range s.Teachers {
		names[i] = g.Name
		tokens[i] = Series{Name: g.Name, Values: s.tokensByTeacher[g.Name]}
		turns[i] = Series{Name: g.Name, Values: s.turnsByTeacher[g.Name]}
		outs[i] = g.Outcomes()
	}
	var out []*Chart
	for _, f := range []func() (*Chart, error){
		func() (*Chart, error) {
			return TokenLengthChart("Token length per teacher", "tokens per row (student tokenizer, chat template)", tokens)
		},
		func() (*Chart, error) { return TurnsChart("teacher", turns) },
		func() (*Chart, error) { return RatesChart("teacher", outs) },
		func() (*Chart, error) { return ViolationsChart("teacher", outs) },
	} {
		c, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Outcomes returns the group's counts as Outcomes.
func (g *Group) Outcomes() Outcomes { return OutcomesOf(g.Name, g.out) }

// WritePlots writes the dataset's charts (Charts) as PNG files into dir (created if needed) and
// returns the paths written. Each file is written to a temporary name and renamed.
func (s *DatasetStats) WritePlots(dir string) ([]string, error) {
	charts, err := s.Charts()
	if err != nil {
		return nil, err
	}
	return WriteCharts(dir, charts)
}

// WriteCharts writes charts as PNG files named Chart.Name into dir (created if needed).
func WriteCharts(dir string, charts []*Chart) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	var out []string
	for _, c := range charts {
		path := filepath.Join(dir, c.Name)
		if err := savePNG(c, path); err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}

// newPlot makes a plot with a title, axis labels and the chart fonts.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Padding = vg.Points(2)
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.XOffs = -vg.Points(4)
	return p
}

// headroom is the factor above the highest value that keeps a legend of n entries (top right)
// and bar labels clear of the data: about 6% of the plot height per entry.
func headroom(n int) float64 { return 1.12 + 0.065*float64(n) }

// TokenLengthChart draws one histogram outline per series over common bins. The x axis spans
// the data (not zero); it is logarithmic, with geometric bins, when the largest value is more
// than 20 times the smallest. The y axis counts rows, with integer ticks.
func TokenLengthChart(title, xlabel string, series []Series) (*Chart, error) {
	p := newPlot(title, xlabel, "rows")
	lo, hi, n := math.MaxInt, 0, 0
	for _, s := range series {
		for _, v := range s.Values {
			lo, hi = min(lo, v), max(hi, v)
		}
		n = max(n, len(s.Values))
	}
	if n == 0 {
		return emptyChart(TokensPlot, p, "no rows"), nil
	}
	bins := min(50, max(8, int(math.Ceil(2*math.Cbrt(float64(n))))))
	logX := lo >= 1 && hi > 20*lo
	var edges []float64
	if logX {
		a, b := math.Log10(float64(lo)*0.98), math.Log10(float64(hi)*1.02)
		for i := 0; i <= bins; i++ {
			edges = append(edges, math.Pow(10, a+(b-a)*float64(i)/float64(bins)))
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.X.Label.Text += ", log scale"
	} else {
		step := nearStep(float64(hi-lo+1) / float64(bins))
		start := math.Floor(float64(lo)/step) * step
		for e := start; ; e += step {
			edges = append(edges, e)
			if e > float64(hi) {
				break
			}
		}
		// Values all alike (a scripted teacher, a length limit) fill one or two bins: empty bins
		// on both sides keep them off the plot's edges, so the outline reads as a bar.
		for left := true; len(edges)-1 < 5; left = !left {
			if left && edges[0]-step >= 0 {
				edges = append([]float64{edges[0] - step}, edges...)
			} else {
				edges = append(edges, edges[len(edges)-1]+step)
			}
		}
		p.X.Tick.Marker = intTicks{}
	}
	peak := 0
	for i, s := range series {
		counts := make([]int, len(edges)-1)
		for _, v := range s.Values {
			k := sort.SearchFloat64s(edges, float64(v)+0.5) - 1
			counts[min(max(k, 0), len(counts)-1)]++
		}
		pts := plotter.XYs{{X: edges[0], Y: 0}}
		for k, c := range counts {
			pts = append(pts, plotter.XY{X: edges[k], Y: float64(c)})
			peak = max(peak, c)
		}
		pts = append(pts, plotter.XY{X: edges[len(edges)-1], Y: float64(counts[len(counts)-1])}, plotter.XY{X: edges[len(edges)-1], Y: 0})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plots: %w", err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.8)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%s rows, median %s)", s.Name, thousands(len(s.Values)), thousands(median(s.Values))), l)
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = edges[0], edges[len(edges)-1]
	p.Y.Min, p.Y.Max = 0, float64(peak)*headroom(len(series))
	p.Y.Tick.Marker = intTicks{}
	return &Chart{Name: TokensPlot, Title: title, p: p}, nil
}

// TurnsChart draws, per series, the number of rows that used each number of turns (grouped
// bars, one group per turn count from 1 to the largest seen). by names what a series is
// ("teacher", "policy").
func TurnsChart(by string, series []Series) (*Chart, error) {
	title := "Turns used per " + by
	p := newPlot(title, "assistant turns in the trajectory", "rows")
	maxT := 0
	for _, s := range series {
		for _, v := range s.Values {
			maxT = max(maxT, v)
		}
	}
	if maxT == 0 {
		return emptyChart(TurnsPlot, p, "no rows"), nil
	}
	cats := make([]string, maxT)
	for k := range cats {
		cats[k] = strconv.Itoa(k + 1)
	}
	vals := make([][]float64, len(series))
	names := make([]string, len(series))
	for i, s := range series {
		names[i] = s.Name
		vals[i] = make([]float64, maxT)
		for _, v := range s.Values {
			if v >= 1 {
				vals[i][v-1]++
			}
		}
	}
	if err := groupedBars(p, cats, names, vals, func(v float64) string { return thousands(int(v)) }); err != nil {
		return nil, err
	}
	p.Y.Tick.Marker = intTicks{}
	return &Chart{Name: TurnsPlot, Title: title, p: p}, nil
}

// RatesChart draws convergence, exec-ok and correct rates (% of rows) per group; by names
// what a group is ("teacher", "policy"). A group with unjudged rows says how many under its
// name: its correct rate counts them as wrong.
func RatesChart(by string, groups []Outcomes) (*Chart, error) {
	title := "Convergence, execution and correctness per " + by
	p := newPlot(title, by, "share of the "+by+"'s rows (%)")
	if len(groups) == 0 {
		return emptyChart(RatesPlot, p, "no rows"), nil
	}
	cats := make([]string, len(groups))
	vals := make([][]float64, 3)
	for k := range vals {
		vals[k] = make([]float64, len(groups))
	}
	for i, g := range groups {
		cats[i] = fmt.Sprintf("%s\n%s rows", g.Name, thousands(g.Rows))
		if g.Unjudged > 0 {
			cats[i] += fmt.Sprintf(", %s unjudged", thousands(g.Unjudged))
		}
		vals[0][i] = 100 * ratio(g.Converged, g.Rows)
		vals[1][i] = 100 * ratio(g.ExecOK, g.Rows)
		vals[2][i] = 100 * ratio(g.Correct, g.Rows)
	}
	if err := groupedBars(p, cats, []string{"converged", "final SQL ran", "correct (EX)"}, vals, pctLabel); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, 100*headroom(3)
	p.Y.Tick.Marker = pctTicks{top: 100}
	return &Chart{Name: RatesPlot, Title: title, p: p}, nil
}

// ViolationsChart draws, per group, the share of rows with at least one format violation and
// the share of turns that were one. The y axis fits the largest share. by names what a group
// is ("teacher", "policy").
func ViolationsChart(by string, groups []Outcomes) (*Chart, error) {
	title := "Format violations per " + by
	p := newPlot(title, by, "share (%)")
	if len(groups) == 0 {
		return emptyChart(ViolationsPlot, p, "no rows"), nil
	}
	cats := make([]string, len(groups))
	vals := [][]float64{make([]float64, len(groups)), make([]float64, len(groups))}
	top := 0.0
	for i, g := range groups {
		cats[i] = fmt.Sprintf("%s\n%s rows, %s turns", g.Name, thousands(g.Rows), thousands(g.Turns))
		vals[0][i] = 100 * ratio(g.RowsWithViolation, g.Rows)
		vals[1][i] = 100 * ratio(g.Violations, g.Turns)
		top = max(top, vals[0][i], vals[1][i])
	}
	if err := groupedBars(p, cats, []string{"rows with a violation", "turns that were a violation"}, vals, pctLabel); err != nil {
		return nil, err
	}
	// At least 0–1% so that an all-zero chart still has an axis.
	top = niceCeil(max(top, 1))
	p.Y.Min, p.Y.Max = 0, top*headroom(2)
	p.Y.Tick.Marker = pctTicks{top: top}
	return &Chart{Name: ViolationsPlot, Title: title, p: p}, nil
}

// legend is the policy's name, and how many of its results are unjudged where some are.
func (pe PolicyEX) legend() string {
	if u := pe.Summary.Unjudged; u > 0 {
		return fmt.Sprintf("%s (%s of %s unjudged)", pe.Name, thousands(u), thousands(pe.Summary.N))
	}
	return pe.Name
}

// EXChart draws execution accuracy per difficulty bucket (and over all tasks) per policy; a
// policy with unjudged results says how many in its legend entry (EX counts them as wrong).
func EXChart(policies []PolicyEX) (*Chart, error) {
	const title = "Execution accuracy (EX) by difficulty"
	p := newPlot(title, "difficulty", "EX (%)")
	if len(policies) == 0 {
		return emptyChart(EXPlot, p, "no evaluations"), nil
	}
	var buckets []string
	seen := map[string]bool{}
	for _, pe := range policies {
		for _, b := range pe.Summary.ByDifficulty {
			if !seen[b.Difficulty] {
				seen[b.Difficulty] = true
				buckets = append(buckets, b.Difficulty)
			}
		}
	}
	buckets = orderDifficulties(buckets)
	// Each category says how many tasks it holds: one n when the policies agree, else one per
	// policy (an eval with --limit has fewer).
	counts := func(n func(PolicyEX) int) string {
		var ns []string
		for _, pe := range policies {
			ns = append(ns, thousands(n(pe)))
		}
		if slices.Equal(ns[:len(ns)-1], ns[1:]) {
			return "n = " + ns[0]
		}
		p.X.Label.Text = "difficulty (n: tasks of each policy, in legend order)"
		return "n = " + strings.Join(ns, " / ")
	}
	cats := make([]string, 0, len(buckets)+1)
	for _, b := range buckets {
		name := b
		if name == "" {
			name = "other"
		}
		cats = append(cats, name+"\n"+counts(func(pe PolicyEX) int {
			for _, d := range pe.Summary.ByDifficulty {
				if d.Difficulty == b {
					return d.N
				}
			}
			return 0
		}))
	}
	cats = append(cats, "all\n"+counts(func(pe PolicyEX) int { return pe.Summary.N }))
	names := make([]string, len(policies))
	vals := make([][]float64, len(policies))
	for i, pe := range policies {
		names[i] = pe.legend()
		vals[i] = make([]float64, len(cats))
		for k, b := range buckets {
			for _, d := range pe.Summary.ByDifficulty {
				if d.Difficulty == b {
					vals[i][k] = 100 * d.EX
				}
			}
		}
		vals[i][len(cats)-1] = 100 * pe.Summary.EX
	}
	if err := groupedBars(p, cats, names, vals, pctLabel); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, 100*headroom(len(policies))
	p.Y.Tick.Marker = pctTicks{top: 100}
	return &Chart{Name: EXPlot, Title: title, p: p}, nil
}

// groupedBars adds one bar series per name over the categories, side by side within each
// category, each bar labelled with label(value). The x axis runs half a category beyond the
// outer categories, so no bar touches an edge, and the y axis gets headroom for the legend.
func groupedBars(p *plot.Plot, cats, names []string, vals [][]float64, label func(float64) string) error {
	n := max(len(names), 1)
	catW := plotAreaW / vg.Length(len(cats))
	barW := min(catW*0.8/vg.Length(n), vg.Inch)
	top := 0.0
	labelStyle := text.Style{Color: draw.LineStyle{}.Color, Font: font.From(plot.DefaultFont, vg.Points(8)),
		XAlign: draw.XCenter, YAlign: draw.YBottom, Handler: plot.DefaultTextHandler}
	showLabels := len(cats)*n <= 30
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0 // category centres need no lines through the bars
	p.Add(grid)
	for i, name := range names {
		b, err := plotter.NewBarChart(plotter.Values(vals[i]), barW)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * barW
		p.Add(b)
		p.Legend.Add(name, b)
		for _, v := range vals[i] {
			top = max(top, v)
		}
		if showLabels {
			xys := make(plotter.XYs, len(cats))
			texts := make([]string, len(cats))
			for k := range cats {
				xys[k] = plotter.XY{X: float64(k), Y: vals[i][k]}
				texts[k] = label(vals[i][k])
			}
			l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
			if err != nil {
				return fmt.Errorf("plots: %w", err)
			}
			for k := range l.TextStyle {
				l.TextStyle[k] = labelStyle
			}
			l.Offset = vg.Point{X: b.Offset, Y: vg.Points(2)}
			p.Add(l)
		}
	}
	p.NominalX(cats...)
	// NominalX pads the y axis by half the first label's width; the half category of margin
	// on each side already keeps the labels inside.
	p.Y.Padding = 0
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	p.Y.Min, p.Y.Max = 0, max(top, 1)*headroom(len(names))
	return nil
}

// emptyChart is a chart that says why it has no data: its axes and labels, no ticks (an axis
// of 0.0 to 1.0 would read as data).
func emptyChart(name string, p *plot.Plot, why string) *Chart {
	p.Title.Text += " (" + why + ")"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(nil), plot.ConstantTicks(nil)
	return &Chart{Name: name, Title: p.Title.Text, p: p}
}

// intTicks marks whole numbers at a 1-2-5 step that gives four to eight labels, labelled
// without decimals and with thousands separators.
type intTicks struct{}

// Ticks implements plot.Ticker.
func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	step := max(1, niceStep((hi-lo)/6))
	var ts []plot.Tick
	first := math.Ceil(lo / step)
	for k := 0; (first+float64(k))*step <= hi; k++ {
		v := (first + float64(k)) * step
		ts = append(ts, plot.Tick{Value: v, Label: thousands(int(math.Round(v)))})
	}
	// Unlabelled ticks halfway, where they fall on whole numbers.
	if minor := step / 2; minor >= 1 && minor == math.Trunc(minor) {
		for v := math.Ceil(lo/step)*step - minor; v <= hi; v += step {
			if v >= lo {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}

// pctTicks labels 0 to top (a percentage) at a 1-2-5 step and draws nothing above top, the
// headroom kept for the legend.
type pctTicks struct{ top float64 }

// Ticks implements plot.Ticker.
func (t pctTicks) Ticks(lo, hi float64) []plot.Tick {
	hi = min(hi, t.top)
	step := niceStep((hi - lo) / 5)
	prec := max(0, int(-math.Floor(math.Log10(step))))
	var ts []plot.Tick
	first := math.Ceil(lo / step)
	for k := 0; ; k++ {
		v := (first + float64(k)) * step
		if v > hi+step*1e-9 {
			break
		}
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64) + "%"})
	}
	return ts
}

// logTicks labels 1, 2 and 5 times each power of ten in range (only the powers when the range
// spans more than three decades), with unlabelled ticks at the other integers times a power.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	wide := hi/lo > 1000
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		p := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (!wide && (m == 2 || m == 5)) {
				t.Label = thousands(int(math.Round(v)))
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if x <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// nearStep is the 1, 2 or 5 times a power of ten nearest to x (by ratio), at least 1: a bin
// width close to the one asked for.
func nearStep(x float64) float64 {
	if x <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	best := p
	for _, m := range []float64{1, 2, 5, 10} {
		if math.Abs(math.Log(m*p/x)) < math.Abs(math.Log(best/x)) {
			best = m * p
		}
	}
	return best
}

// niceCeil rounds x up to a multiple of its 1-2-5 step (for an axis top).
func niceCeil(x float64) float64 {
	s := niceStep(x / 5)
	return math.Ceil(x/s) * s
}

func pctLabel(v float64) string {
	if v != 0 && v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "%"
}

// thousands renders n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return neg + s
}

// median is the p50 of the stats tables (curate.NearestRank), so the legend and the table
// agree.
func median(v []int) int {
	s := make([]int64, len(v))
	for i, x := range v {
		s[i] = int64(x)
	}
	slices.Sort(s)
	return int(curate.NearestRank(s, 50))
}

// savePNG writes c to path as a PNG through atomicfile, mode 0644 less the umask.
func savePNG(c *Chart, path string) error {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer f.Abort()
	if err := c.WritePNG(f); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
