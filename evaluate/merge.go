package evaluate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/stats"
)

// Merge joins the eval dirs of the parts of a sharded evaluation (Config.Shard, `student eval
// --shard I/N`) into out: results.jsonl (in task index order), predict_dev.json,
// trajectories.jsonl and summary.json over all tasks, written atomically. The parts must be the
// same evaluation (policy, tasks, dialect, samples, vote, temperature, turns) and together cover
// every part of one N exactly once; a task in two parts is refused. out must not be one of the
// parts; merging again replaces what out held.
func Merge(out string, dirs []string) (*Summary, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("merge: no eval dirs")
	}
	sums := make([]*Summary, len(dirs))
	for i, d := range dirs {
		if sameDir(d, out) {
			return nil, fmt.Errorf("merge: the output %s is one of the parts", out)
		}
		s, err := ReadSummary(d)
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		sums[i] = s
	}
	if err := checkParts(dirs, sums); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}

	m := *sums[0]
	m.Shard, m.Loaded, m.Counts = "", 0, map[string]int{}
	m.Complete, m.Pending, m.Failed = true, 0, 0
	m.Throughput, m.Tokens, m.Repairs, m.TurnTime = Throughput{}, chat.Usage{}, nil, TurnTime{}
	var (
		results []*Result
		seen    = map[string]string{} // task id → part dir
		preds   = map[string]string{}
	)
	for i, d := range dirs {
		s := sums[i]
		m.Loaded += s.Loaded
		for k, n := range s.Counts {
			m.Counts[k] += n
		}
		m.Complete = m.Complete && s.Complete
		m.Pending += s.Pending
		m.Failed += s.Failed
		m.Tokens = m.Tokens.Add(s.Tokens)
		m.Throughput.Trajectories += s.Throughput.Trajectories
		m.Throughput.Tokens += s.Throughput.Tokens
		m.Throughput.CachedTokens += s.Throughput.CachedTokens
		m.Throughput.Seconds = max(m.Throughput.Seconds, s.Throughput.Seconds)
		m.TurnTime = addTurnTime(m.TurnTime, s.TurnTime)
		if s.Updated.After(m.Updated) {
			m.Updated = s.Updated
		}
		rs, err := ReadResults(d)
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		for j := range rs {
			r := &rs[j]
			if other, dup := seen[r.ID]; dup && other != d {
				return nil, fmt.Errorf("merge: task %s is in both %s and %s (a part passed twice, or parts of different splits)", r.ID, other, d)
			}
			seen[r.ID] = d
			results = append(results, r)
		}
		raw, err := os.ReadFile(filepath.Join(d, PredictFile))
		if err != nil {
			return nil, fmt.Errorf("merge: eval dir %s: %w", d, err)
		}
		var p map[string]string
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("merge: eval dir %s: %s: %w", d, PredictFile, err)
		}
		for k, v := range p {
			if _, dup := preds[k]; dup {
				return nil, fmt.Errorf("merge: prediction %s is in two parts (the second is %s)", k, d)
			}
			preds[k] = v
		}
	}
	sort.SliceStable(results, func(a, b int) bool {
		if results[a].Index != results[b].Index {
			return results[a].Index < results[b].Index
		}
		return results[a].Sample < results[b].Sample
	})
	m.Throughput.setRates(m.Samples)
	er := make([]stats.EvalResult, len(results))
	for i, r := range results {
		er[i] = stats.EvalResultOf(r.Difficulty, r.EpisodeOutcome())
	}
	m.Eval = stats.SummarizeEval(er)

	if err := concatTrajectories(out, dirs); err != nil {
		return nil, err
	}
	if err := writeResults(filepath.Join(out, ResultsFile), results); err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(out, PredictFile), preds); err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(out, SummaryFile), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// checkParts refuses parts of different evaluations, of different splits, or a split with a
// part missing or given twice.
func checkParts(dirs []string, sums []*Summary) error {
	first := sums[0]
	key := func(s *Summary) string {
		return fmt.Sprintf("policy %s, tasks %s (limit %d), dialect %s, %d samples, vote %v, temperature %g, %d turns",
			s.Spec, s.TaskSpec, s.Limit, s.Dialect, s.Samples, s.Vote, s.Temperature, s.MaxTurns)
	}
	parts := map[int]string{}
	count := -1
	for i, s := range sums {
		if key(s) != key(first) {
			return fmt.Errorf("merge: %s is another evaluation than %s:\n  %s\n  %s", dirs[i], dirs[0], key(s), key(first))
		}
		sh, err := rundir.ParseShard(s.Shard)
		if err != nil {
			return fmt.Errorf("merge: %s: %w", dirs[i], err)
		}
		n := max(1, sh.Count)
		if count >= 0 && n != count {
			return fmt.Errorf("merge: %s is part of a split into %d, %s of a split into %d", dirs[i], n, dirs[0], count)
		}
		count = n
		if other, dup := parts[sh.Index]; dup {
			return fmt.Errorf("merge: part %d/%d is given twice (%s and %s)", sh.Index, n, other, dirs[i])
		}
		parts[sh.Index] = dirs[i]
	}
	if len(parts) != count {
		var missing []string
		for i := range count {
			if _, ok := parts[i]; !ok {
				missing = append(missing, fmt.Sprintf("%d/%d", i, count))
			}
		}
		return fmt.Errorf("merge: parts %s are missing", strings.Join(missing, ", "))
	}
	return nil
}

// addTurnTime combines two per-turn time splits, weighting each by its turns.
func addTurnTime(a, b TurnTime) TurnTime {
	n := a.Turns + b.Turns
	if n == 0 {
		return TurnTime{}
	}
	w := func(x, y float64) float64 { return (x*float64(a.Turns) + y*float64(b.Turns)) / float64(n) }
	return TurnTime{Turns: n, TotalMS: w(a.TotalMS, b.TotalMS), ModelMS: w(a.ModelMS, b.ModelMS),
		SQLMS: w(a.SQLMS, b.SQLMS), OverheadMS: w(a.OverheadMS, b.OverheadMS)}
}

// concatTrajectories writes the parts' trajectories.jsonl one after the other into out.
func concatTrajectories(out string, dirs []string) error {
	f, err := createAtomic(filepath.Join(out, TrajectoriesFile))
	if err != nil {
		return err
	}
	defer f.Abort()
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, TrajectoriesFile))
		if err != nil {
			return fmt.Errorf("merge: eval dir %s: %w", d, err)
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
	}
	return f.Commit()
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && filepath.Clean(aa) == filepath.Clean(bb)
}
