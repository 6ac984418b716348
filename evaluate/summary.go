package evaluate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/stats"
)

// Summary is summary.json: what was evaluated and how it scored.
type Summary struct {
	Protocol string `json:"protocol"`
	Policy   string `json:"policy"`
	Spec     string `json:"policy_spec"`
	Model    string `json:"model,omitempty"`
	TaskSpec string `json:"tasks"`
	Limit    int    `json:"limit,omitempty"`
	// Shard is the part I/N of the tasks this eval dir holds ("" for all; Merge joins parts).
	Shard       string           `json:"shard,omitempty"`
	Dialect     datasets.Dialect `json:"dialect"`
	Samples     int              `json:"samples"`
	Vote        bool             `json:"vote,omitempty"`
	Temperature float64          `json:"temperature"`
	MaxTurns    int              `json:"max_turns"`
	Ordered     bool             `json:"ordered,omitempty"`
	// Loaded is the number of tasks evaluated and Counts their difficulties, from the loaded file.
	Loaded int            `json:"loaded"`
	Counts map[string]int `json:"counts"`
	// Complete is true when every key is done or failed; Pending counts the keys still to do
	// and Failed the keys whose episode failed (they score 0).
	Complete bool `json:"complete"`
	Pending  int  `json:"pending"`
	Failed   int  `json:"failed"`
	// Eval is the headline over the results (one per task, or per task and sample without Vote).
	Eval       stats.EvalSummary `json:"eval"`
	Tokens     chat.Usage        `json:"tokens"`
	Throughput Throughput        `json:"throughput"`
	TurnTime   TurnTime          `json:"turn_time"`
	Updated    time.Time         `json:"updated"`
	// Repairs lists what resume cut from the eval dir (this invocation; not saved).
	Repairs []string `json:"-"`
}

// Throughput is the speed of the invocation that did the work.
type Throughput struct {
	// Trajectories were completed in Seconds of wall time, using Tokens tokens (prompt plus
	// completion, every turn). CachedTokens of them are prompt tokens served from a prefix
	// cache (the bundled runtime's, or the provider's where it reports one) and not computed;
	// summaries written before it was recorded read 0.
	Trajectories int     `json:"trajectories"`
	Seconds      float64 `json:"seconds"`
	Tokens       int     `json:"tokens"`
	CachedTokens int     `json:"cached_tokens"`
	// TasksPerSec counts tasks (trajectories over samples per task). TokensPerSec is Tokens
	// over Seconds, cache hits included; ComputedTokensPerSec is Tokens less CachedTokens over
	// Seconds, the work the model did.
	TasksPerSec          float64 `json:"tasks_per_sec"`
	TokensPerSec         float64 `json:"tokens_per_sec"`
	ComputedTokensPerSec float64 `json:"computed_tokens_per_sec"`
}

// setRates fills the per-second figures from the counts, over tasks of samples each.
func (t *Throughput) setRates(samples int) {
	if t.Seconds <= 0 {
		return
	}
	t.TasksPerSec = float64(t.Trajectories) / float64(max(1, samples)) / t.Seconds
	t.TokensPerSec = float64(t.Tokens) / t.Seconds
	t.ComputedTokensPerSec = float64(t.Tokens-t.CachedTokens) / t.Seconds
}

// TurnTime is the average time per turn over every trajectory, split into the model's reply,
// the turn's SQL execution, and the rest (schema, prompts, judging with the gold SQL, writing).
type TurnTime struct {
	Turns      int     `json:"turns"`
	TotalMS    float64 `json:"total_ms"`
	ModelMS    float64 `json:"model_ms"`
	SQLMS      float64 `json:"sql_ms"`
	OverheadMS float64 `json:"overhead_ms"`
}

func turnTimeOf(t turnTimes) TurnTime {
	tt := TurnTime{Turns: t.turns}
	if t.turns == 0 {
		return tt
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(t.turns) }
	tt.TotalMS = ms(t.duration)
	tt.ModelMS = ms(t.model)
	tt.SQLMS = ms(t.sql)
	tt.OverheadMS = max(0, tt.TotalMS-tt.ModelMS-tt.SQLMS)
	return tt
}

func newSummary(cfg *Config, results []*Result) *Summary {
	s := &Summary{
		Protocol: protocol.ProtocolVersion, Policy: cfg.Policy.Name, Spec: cfg.Policy.Spec, Model: cfg.Policy.Model,
		TaskSpec: cfg.TaskSpec, Limit: cfg.Limit, Shard: cfg.Shard.String(), Dialect: cfg.Dialect, Samples: cfg.Samples, Vote: cfg.Vote && cfg.Samples > 1,
		Temperature: *cfg.Episode.Chat.Temperature, MaxTurns: cfg.Episode.MaxTurns, Ordered: cfg.Episode.Ordered,
		Loaded: len(cfg.Tasks), Counts: map[string]int{}, Updated: time.Now().UTC(),
	}
	for _, t := range cfg.Tasks {
		s.Counts[t.Difficulty]++
	}
	er := make([]stats.EvalResult, len(results))
	for i, r := range results {
		er[i] = stats.EvalResultOf(r.Difficulty, r.EpisodeOutcome())
	}
	s.Eval = stats.SummarizeEval(er)
	return s
}

// ReadSummary reads an eval dir's summary.json.
func ReadSummary(dir string) (*Summary, error) {
	data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return nil, fmt.Errorf("eval dir %s: %w", dir, err)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("eval dir %s: %s: %w", dir, SummaryFile, err)
	}
	return &s, nil
}

// countsLine renders the loaded file's difficulty counts, BIRD's buckets first.
func countsLine(counts map[string]int, total int) string {
	var parts []string
	for _, b := range stats.SummarizeEval(bucketResults(counts)).ByDifficulty {
		if b.Difficulty != "" || len(counts) > 1 {
			name := b.Difficulty
			if name == "" {
				name = "other"
			}
			parts = append(parts, fmt.Sprintf("%s %d", name, b.N))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprint(total)
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// bucketResults makes one empty result per counted task, so stats orders the buckets.
func bucketResults(counts map[string]int) []stats.EvalResult {
	var out []stats.EvalResult
	for d, n := range counts {
		for range n {
			out = append(out, stats.EvalResult{Difficulty: d})
		}
	}
	return out
}

// WriteText prints the summary: the headline, the task counts, throughput and time per turn.
func (s *Summary) WriteText(w io.Writer) error {
	state := "complete"
	if !s.Complete {
		state = fmt.Sprintf("incomplete: %d keys pending, rerun to resume", s.Pending)
	}
	lines := []string{
		fmt.Sprintf("%s on %s (%s), %s", s.Policy, s.TaskSpec, s.Dialect, state),
		s.Eval.Headline(),
		fmt.Sprintf("tasks %s; results %d, failed episodes %d", countsLine(s.Counts, s.Loaded), s.Eval.N, s.Failed),
		fmt.Sprintf("throughput %.2f tasks/s, %.0f computed tokens/s, %d prompt tokens from cache (%d trajectories in %.1f s)",
			s.Throughput.TasksPerSec, s.Throughput.ComputedTokensPerSec, s.Throughput.CachedTokens, s.Throughput.Trajectories, s.Throughput.Seconds),
		fmt.Sprintf("per turn %.2f ms: model %.2f ms, SQL %.2f ms, overhead %.2f ms (%d turns)",
			s.TurnTime.TotalMS, s.TurnTime.ModelMS, s.TurnTime.SQLMS, s.TurnTime.OverheadMS, s.TurnTime.Turns),
	}
	if s.Samples > 1 {
		mode := "every sample scored"
		if s.Vote {
			mode = "majority vote over executed results"
		}
		lines = append(lines, fmt.Sprintf("samples %d at temperature %g, %s", s.Samples, s.Temperature, mode))
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// Compare prints the summaries side by side, one column per eval dir, in the order given.
func Compare(w io.Writer, dirs []string) error {
	if len(dirs) == 0 {
		return fmt.Errorf("compare: no eval dirs given")
	}
	sums := make([]*Summary, len(dirs))
	for i, d := range dirs {
		s, err := ReadSummary(d)
		if err != nil {
			return err
		}
		sums[i] = s
	}
	// Difficulty rows: the union of buckets over every summary, in stats' order.
	seen := map[string]int{}
	for _, s := range sums {
		for _, b := range s.Eval.ByDifficulty {
			seen[b.Difficulty] += b.N
		}
	}
	var buckets []string
	for _, b := range stats.SummarizeEval(bucketResults(seen)).ByDifficulty {
		buckets = append(buckets, b.Difficulty)
	}

	pct := func(r float64) string { return fmt.Sprintf("%.2f%%", 100*r) }
	type row struct {
		label string
		cell  func(*Summary) string
	}
	rows := []row{
		{"policy", func(s *Summary) string { return s.Policy }},
		{"model", func(s *Summary) string { return s.Model }},
		{"tasks", func(s *Summary) string { return fmt.Sprintf("%s (%d)", s.TaskSpec, s.Loaded) }},
		{"complete", func(s *Summary) string { return fmt.Sprint(s.Complete) }},
		{"EX", func(s *Summary) string { return pct(s.Eval.EX) }},
	}
	for _, b := range buckets {
		label := "  " + b
		if b == "" {
			label = "  other"
		}
		rows = append(rows, row{label, func(s *Summary) string {
			for _, d := range s.Eval.ByDifficulty {
				if d.Difficulty == b {
					return fmt.Sprintf("%s (%d/%d)", pct(d.EX), d.Correct, d.N)
				}
			}
			return "-"
		}})
	}
	rows = append(rows,
		row{"convergence", func(s *Summary) string { return pct(s.Eval.Convergence) }},
		row{"exec-ok", func(s *Summary) string { return pct(s.Eval.ExecOK) }},
		row{"format violations", func(s *Summary) string { return pct(s.Eval.FormatViolationRate) }},
		row{"malformed turns", func(s *Summary) string { return fmt.Sprint(s.Eval.MalformedTurns) }},
		row{"avg turns", func(s *Summary) string { return fmt.Sprintf("%.2f", s.Eval.AvgTurns) }},
		row{"unjudged (gold failed)", func(s *Summary) string { return fmt.Sprint(s.Eval.Unjudged) }},
		row{"samples", func(s *Summary) string {
			if s.Vote {
				return fmt.Sprintf("%d (vote)", s.Samples)
			}
			return fmt.Sprint(s.Samples)
		}},
		row{"tasks/s", func(s *Summary) string { return fmt.Sprintf("%.2f", s.Throughput.TasksPerSec) }},
		row{"computed tokens/s", func(s *Summary) string { return fmt.Sprintf("%.0f", s.Throughput.ComputedTokensPerSec) }},
		row{"cache-hit tokens", func(s *Summary) string { return fmt.Sprint(s.Throughput.CachedTokens) }},
		row{"model ms/turn", func(s *Summary) string { return fmt.Sprintf("%.2f", s.TurnTime.ModelMS) }},
		row{"SQL ms/turn", func(s *Summary) string { return fmt.Sprintf("%.2f", s.TurnTime.SQLMS) }},
		row{"overhead ms/turn", func(s *Summary) string { return fmt.Sprintf("%.2f", s.TurnTime.OverheadMS) }},
	)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "eval dir")
	for _, d := range dirs {
		fmt.Fprint(tw, "\t"+filepath.Base(filepath.Clean(d)))
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprint(tw, r.label)
		for _, s := range sums {
			fmt.Fprint(tw, "\t"+r.cell(s))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
