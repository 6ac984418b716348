package distill

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/rundir"
)

// progress counts per teacher and renders either a live display (redrawn in place on a
// terminal) or periodic log lines.
type progress struct {
	w           io.Writer
	interactive bool
	interval    time.Duration
	started     time.Time

	mu      sync.Mutex
	order   []string
	by      map[string]*teacherProgress
	notes   []string
	drawn   int // lines of the last live frame
	stopped bool
}

type teacherProgress struct {
	todo, skipped, done, failed, abandoned int
	tokens                                 int
	malformed                              int // the done trajectories' malformed turns (rundir.Outcome)
}

func newProgress(w io.Writer, interactive bool, interval time.Duration) *progress {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if interactive {
		interval = time.Second
	}
	return &progress{w: w, interactive: interactive, interval: interval, started: time.Now(), by: map[string]*teacherProgress{}}
}

func (p *progress) get(name string) *teacherProgress {
	t := p.by[name]
	if t == nil {
		t = &teacherProgress{}
		p.by[name] = t
		p.order = append(p.order, name)
	}
	return t
}

func (p *progress) add(name string, todo, skipped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.get(name)
	t.todo += todo
	t.skipped += skipped
}

func (p *progress) done(tr *rundir.Trajectory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.get(tr.Teacher)
	t.done++
	t.tokens += tr.Usage.Total()
	t.malformed += tr.Outcome().MalformedTurns
}

func (p *progress) failed(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.get(name).failed++
}

func (p *progress) abandoned(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.get(name).abandoned++
}

func (p *progress) abandonedTotal() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, t := range p.by {
		n += t.abandoned
	}
	return n
}

// note prints a message at once (above the live display).
func (p *progress) note(msg string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, "%s %s\n", time.Now().Format("15:04:05"), msg)
	p.drawLocked(false)
}

// start begins periodic rendering; the returned function stops it and prints the final state.
func (p *progress) start() func() {
	if p.w == nil {
		return func() {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.clearLocked()
				p.drawLocked(false)
				p.mu.Unlock()
			}
		}
	}()
	return func() {
		close(stop)
		wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.clearLocked()
		p.drawLocked(true)
		p.drawn = 0
		p.stopped = true
	}
}

func (p *progress) clearLocked() {
	if p.interactive && p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
		p.drawn = 0
	}
}

// drawLocked renders one line per teacher.
func (p *progress) drawLocked(final bool) {
	if p.stopped {
		return
	}
	el := time.Since(p.started)
	var b strings.Builder
	lines := 0
	for _, name := range p.order {
		t := p.by[name]
		rate := float64(t.done+t.failed) / el.Seconds()
		left := t.todo - t.done - t.failed - t.abandoned
		eta := "-"
		if rate > 0 && left > 0 {
			eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second).String()
		} else if left <= 0 {
			eta = "0s"
		}
		prefix := ""
		if !p.interactive {
			prefix = time.Now().Format("15:04:05") + " "
		}
		fmt.Fprintf(&b, "%s%-14s done %d/%d", prefix, name, t.done, t.todo)
		if t.skipped > 0 {
			fmt.Fprintf(&b, " (+%d earlier)", t.skipped)
		}
		fmt.Fprintf(&b, "  failed %d  %.1f/s  ETA %s  tokens %s  malformed %d", t.failed, rate, eta, humanCount(t.tokens), t.malformed)
		if t.abandoned > 0 {
			fmt.Fprintf(&b, "  abandoned %d", t.abandoned)
		}
		if final {
			fmt.Fprintf(&b, "  in %s", el.Round(time.Millisecond))
		}
		b.WriteByte('\n')
		lines++
	}
	io.WriteString(p.w, b.String())
	if p.interactive {
		p.drawn = lines
	}
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// SummaryRow aggregates the trajectories of one (teacher, dialect) of a run dir.
type SummaryRow struct {
	Teacher      string           `json:"teacher"`
	Dialect      datasets.Dialect `json:"dialect"`
	Trajectories int              `json:"trajectories"`
	Failed       int              `json:"failed"`
	// Converged, ExecOK, Correct, FormatViolations, MalformedTurns (the format reward's count,
	// rundir.MalformedTurns), Turns and Unjudged count as rundir.Tally does
	// (Trajectory.Outcome).
	Converged        int `json:"converged"`
	ExecOK           int `json:"exec_ok"`
	Correct          int `json:"correct"`
	FormatViolations int `json:"format_violations"`
	MalformedTurns   int `json:"malformed_turns"`
	Turns            int `json:"turns"`
	Tokens           int `json:"tokens"`
	// Unjudged counts the trajectories whose gold SQL failed on their dialect (their
	// gold_error, Outcome.Unjudged): never correct, whatever the teacher wrote.
	Unjudged int `json:"unjudged"`

	tally rundir.Tally
}

// Summarize reads a run dir (streaming) and aggregates it per teacher and dialect, failures
// that were not redone included. Damaged lines (rundir.BadLine: over rundir.MaxLine or not
// decoding, in a shard or in failures.jsonl) are skipped and returned.
func Summarize(dir string) ([]SummaryRow, []*rundir.BadLine, error) {
	rows := map[[2]string]*SummaryRow{}
	get := func(t string, d datasets.Dialect) *SummaryRow {
		k := [2]string{t, string(d)}
		r := rows[k]
		if r == nil {
			r = &SummaryRow{Teacher: t, Dialect: d}
			rows[k] = r
		}
		return r
	}
	var bad []*rundir.BadLine
	for tr, err := range rundir.Trajectories(dir) {
		if b, ok := rundir.SkipBad(err); ok {
			bad = append(bad, b)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		r := get(tr.Teacher, tr.Dialect)
		r.tally.Add(tr.Outcome())
		r.Tokens += tr.Usage.Total()
	}
	fails, badFails, err := rundir.ReadFailures(dir)
	if err != nil {
		return nil, nil, err
	}
	bad = append(bad, badFails...)
	for _, f := range fails {
		get(f.Teacher, f.Dialect).Failed++
	}
	out := make([]SummaryRow, 0, len(rows))
	for _, r := range rows {
		t := r.tally
		r.Trajectories, r.Converged, r.ExecOK, r.Correct, r.FormatViolations, r.MalformedTurns, r.Turns, r.Unjudged =
			t.N, t.Converged, t.ExecOK, t.Correct, t.FormatViolations, t.MalformedTurns, t.Turns, t.Unjudged
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Teacher != out[j].Teacher {
			return out[i].Teacher < out[j].Teacher
		}
		return out[i].Dialect < out[j].Dialect
	})
	return out, bad, nil
}

// WriteSummary prints rows as a table: trajectories, failures, converged %, exec-ok %,
// correct %, format violations, malformed turns, average turns, tokens, and the trajectories
// left unjudged by a gold SQL that failed.
func WriteSummary(w io.Writer, rows []SummaryRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "teacher\tdialect\ttrajectories\tfailed\tconverged\texec-ok\tcorrect\tformat-viol\tmalformed\tavg turns\ttokens\tunjudged\t")
	pct := func(a, n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(n))
	}
	for _, r := range rows {
		avg := "-"
		if r.Trajectories > 0 {
			avg = fmt.Sprintf("%.2f", float64(r.Turns)/float64(r.Trajectories))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t\n", r.Teacher, r.Dialect, r.Trajectories, r.Failed,
			pct(r.Converged, r.Trajectories), pct(r.ExecOK, r.Trajectories), pct(r.Correct, r.Trajectories),
			r.FormatViolations, r.MalformedTurns, avg, humanCount(r.Tokens), r.Unjudged)
	}
	return tw.Flush()
}
