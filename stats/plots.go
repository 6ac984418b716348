package stats

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot file names written by WritePlots.
const (
	TokensPlot = "tokens_per_teacher.png"
	TurnsPlot  = "turns_per_teacher.png"
)

// tokenBins is the number of token-length bins.
const tokenBins = 40

// WritePlots writes two PNG plots into dir (created if needed): the token-length histogram per
// teacher (one step line per teacher over common bins) and the turns histogram per teacher
// (grouped bars). It returns the paths written. Each file is written to a temporary name and
// renamed.
func (s *DatasetStats) WritePlots(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	tp, err := s.tokensPlot()
	if err != nil {
		return nil, err
	}
	up, err := s.turnsPlot()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, x := range []struct {
		p    *plot.Plot
		name string
	}{{tp, TokensPlot}, {up, TurnsPlot}} {
		path := filepath.Join(dir, x.name)
		if err := savePNG(x.p, path); err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}

func (s *DatasetStats) teacherNames() []string {
	names := make([]string, len(s.Teachers))
	for i, g := range s.Teachers {
		names[i] = g.Name
	}
	return names
}

func (s *DatasetStats) tokensPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Token length per teacher"
	p.X.Label.Text = "tokens per row"
	p.Y.Label.Text = "rows"
	maxTok := max(s.Overall.Tokens.Max, 1)
	width := float64(maxTok) / tokenBins
	for i, name := range s.teacherNames() {
		counts := make([]float64, tokenBins)
		for _, n := range s.tokensByTeacher[name] {
			b := min(int(float64(n)/width), tokenBins-1)
			counts[b]++
		}
		pts := make(plotter.XYs, 0, tokenBins+1)
		for b, c := range counts {
			pts = append(pts, plotter.XY{X: float64(b) * width, Y: c})
		}
		pts = append(pts, plotter.XY{X: float64(maxTok), Y: counts[tokenBins-1]})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plots: %w", err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d)", name, len(s.tokensByTeacher[name])), l)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func (s *DatasetStats) turnsPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Turns per teacher"
	p.X.Label.Text = "turns"
	p.Y.Label.Text = "rows"
	names := s.teacherNames()
	nt := max(s.MaxTurns, 1)
	barW := vg.Points(max(4, 60/float64(max(len(names), 1))))
	for i, name := range names {
		vals := make(plotter.Values, nt)
		for _, t := range s.turnsByTeacher[name] {
			if t >= 1 {
				vals[t-1]++
			}
		}
		b, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, fmt.Errorf("plots: %w", err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(len(names)-1)/2) * barW
		p.Add(b)
		p.Legend.Add(name, b)
	}
	labels := make([]string, nt)
	for k := range labels {
		labels[k] = fmt.Sprint(k + 1)
	}
	p.NominalX(labels...)
	p.Legend.Top = true
	return p, nil
}

func savePNG(p *plot.Plot, path string) error {
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	bw := bufio.NewWriter(f)
	_, err = wt.WriteTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
