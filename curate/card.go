package curate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// aggregate collects what the card and stats.json need while rows stream past: counts, and the
// per-row token counts (4 bytes a row) for exact percentiles.
type aggregate struct {
	all      teacherAgg
	teachers map[string]*teacherAgg
}

type teacherAgg struct {
	excluded  int
	out       rundir.Tally
	trainable int64
	tokens    []int32
	think     ThinkCounts
}

func newAggregate() *aggregate { return &aggregate{teachers: map[string]*teacherAgg{}} }

func (a *aggregate) teacher(name string) *teacherAgg {
	t := a.teachers[name]
	if t == nil {
		t = &teacherAgg{}
		a.teachers[name] = t
	}
	return t
}

func (a *aggregate) exclude(teacher string) {
	a.all.excluded++
	a.teacher(teacher).excluded++
}

func (a *aggregate) add(r *Row) {
	for _, t := range []*teacherAgg{&a.all, a.teacher(r.Teacher)} {
		t.out.Add(r.Outcome())
		t.trainable += r.NumTrainableTokens
		t.tokens = append(t.tokens, int32(r.NumTokens))
		t.think.Add(r)
	}
}

func (a *aggregate) fill(rep *BuildReport) {
	rep.Rows = a.all.out.N
	rep.Tokens = TokenStatsOf(a.all.tokens)
	rep.TrainableTokens = a.all.trainable
	rep.Think = a.all.think
	rep.TruncatedRows = a.all.out.RowsTruncated
	rep.Correct, rep.Unjudged = a.all.out.Correct, a.all.out.Unjudged
	rep.FormatViolations, rep.MalformedTurns = a.all.out.FormatViolations, a.all.out.MalformedTurns
	rep.ExcludedCount = len(rep.Excluded)
	names := make([]string, 0, len(a.teachers))
	for n := range a.teachers {
		names = append(names, n)
	}
	sort.Strings(names)
	rep.Teachers = make([]TeacherSummary, 0, len(names))
	for _, n := range names {
		t := a.teachers[n]
		rep.Teachers = append(rep.Teachers, TeacherSummary{
			Teacher: n, Rows: t.out.N, Excluded: t.excluded, TruncatedRows: t.out.RowsTruncated, Tokens: TokenStatsOf(t.tokens),
			TrainableTokens: t.trainable, Converged: t.out.Converged, ExecOK: t.out.ExecOK, Correct: t.out.Correct, Unjudged: t.out.Unjudged,
			FormatViolations: t.out.FormatViolations, MalformedTurns: t.out.MalformedTurns, Think: t.think,
		})
	}
}

// TokenStatsOf summarises token counts; percentiles are nearest-rank (the smallest value with
// at least p% of the counts at or below it). It sorts a copy.
func TokenStatsOf[T int | int32 | int64](counts []T) TokenStats {
	if len(counts) == 0 {
		return TokenStats{}
	}
	s := make([]int64, len(counts))
	var sum int64
	for i, c := range counts {
		s[i] = int64(c)
		sum += int64(c)
	}
	slices.Sort(s)
	return TokenStats{
		Sum: sum, Mean: float64(sum) / float64(len(s)),
		P50: int(NearestRank(s, 50)), P95: int(NearestRank(s, 95)), Max: int(s[len(s)-1]),
	}
}

// NearestRank returns the p-th percentile (0 < p <= 100) of sorted by the nearest-rank method.
func NearestRank(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	// rank = ceil(p/100 * n), computed in integers to avoid float rounding at exact ranks.
	n := len(sorted)
	rank := int((int64(p*1000)*int64(n) + 100000 - 1) / 100000)
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// outputPerm is the mode of the dataset's files (less the umask).
const outputPerm = 0o644

func writeStats(path string, rep *BuildReport) error {
	return atomicfile.WriteJSON(path, rep, outputPerm)
}

// CardFront is the YAML front matter of the dataset card, in the layout the Hugging Face hub
// reads (configs, dataset_info).
type CardFront struct {
	License      string       `yaml:"license"`
	PrettyName   string       `yaml:"pretty_name"`
	Language     []string     `yaml:"language"`
	TaskCategory []string     `yaml:"task_categories"`
	Tags         []string     `yaml:"tags"`
	SizeCategory []string     `yaml:"size_categories"`
	Configs      []CardConfig `yaml:"configs"`
	DatasetInfo  CardInfo     `yaml:"dataset_info"`
}

// CardConfig is one entry of configs.
type CardConfig struct {
	ConfigName string         `yaml:"config_name"`
	DataFiles  []CardDataFile `yaml:"data_files"`
}

// CardDataFile maps a split to files.
type CardDataFile struct {
	Split string `yaml:"split"`
	Path  string `yaml:"path"`
}

// CardInfo is dataset_info.
type CardInfo struct {
	Features     []CardFeature `yaml:"features"`
	Splits       []CardSplit   `yaml:"splits"`
	DownloadSize int64         `yaml:"download_size"`
}

// CardFeature is one feature in the hub's YAML form: dtype for scalars, sequence for a list of
// scalars, list of sub-features for a list of structs.
type CardFeature struct {
	Name     string        `yaml:"name"`
	Dtype    string        `yaml:"dtype,omitempty"`
	Sequence string        `yaml:"sequence,omitempty"`
	List     []CardFeature `yaml:"list,omitempty"`
}

// CardSplit is one split's size.
type CardSplit struct {
	Name        string `yaml:"name"`
	NumExamples int    `yaml:"num_examples"`
}

func cardFeatures() []CardFeature {
	out := make([]CardFeature, 0, len(Features))
	for _, f := range Features {
		switch {
		case f.Name == "messages":
			out = append(out, CardFeature{Name: f.Name, List: []CardFeature{{Name: "role", Dtype: "string"}, {Name: "content", Dtype: "string"}}})
		case strings.HasPrefix(f.Type, "list<"):
			out = append(out, CardFeature{Name: f.Name, Sequence: strings.TrimSuffix(strings.TrimPrefix(f.Type, "list<"), ">")})
		default:
			out = append(out, CardFeature{Name: f.Name, Dtype: f.Type})
		}
	}
	return out
}

func sizeCategory(n int) string {
	switch {
	case n < 1000:
		return "n<1K"
	case n < 10000:
		return "1K<n<10K"
	case n < 100000:
		return "10K<n<100K"
	case n < 1000000:
		return "100K<n<1M"
	default:
		return "1M<n<10M"
	}
}

// renderCard writes the dataset card: YAML front matter, then a human-readable section.
func renderCard(rep *BuildReport, downloadSize int64) ([]byte, error) {
	front := CardFront{
		License:      "other",
		PrettyName:   "chained-sql distilled Text-to-SQL trajectories",
		Language:     []string{"en"},
		TaskCategory: []string{"text-generation"},
		Tags:         []string{"text-to-sql", "sql", "distillation", "agentic", "multi-turn", "chained-sql"},
		SizeCategory: []string{sizeCategory(rep.Rows)},
		Configs:      []CardConfig{{ConfigName: "default", DataFiles: []CardDataFile{{Split: "train", Path: DataDir + "/train-*.parquet"}}}},
		DatasetInfo: CardInfo{
			Features:     cardFeatures(),
			Splits:       []CardSplit{{Name: "train", NumExamples: rep.Rows}},
			DownloadSize: downloadSize,
		},
	}
	var y bytes.Buffer
	enc := yaml.NewEncoder(&y)
	enc.SetIndent(2)
	if err := enc.Encode(front); err != nil {
		return nil, fmt.Errorf("card front matter: %w", err)
	}
	enc.Close()

	var b bytes.Buffer
	b.WriteString("---\n")
	b.Write(y.Bytes())
	b.WriteString("---\n\n")
	b.WriteString("# chained-sql distilled Text-to-SQL trajectories\n\n")
	except := fmt.Sprintf("those longer than %d tokens", rep.MaxLength)
	if rep.Truncated == TruncatedExclude {
		except += " and those with a truncated turn (`--truncated exclude`)"
	}
	fmt.Fprintf(&b, "Multi-turn agentic Text-to-SQL conversations distilled from teacher models under the `%s` protocol, "+
		"one row per trajectory, in the `messages` format TRL's `SFTTrainer` reads. Unfiltered: every trajectory is here, "+
		"correct or not, except %s (use `correct`, `gold_error`, `converged`, `exec_ok`, `format_violations`, `malformed_turns` and `truncated_turns` to filter).\n\n",
		protocol.ProtocolVersion, except)
	if rep.TruncatedRows > 0 {
		// The warning a trainer must not miss: these rows teach stopping mid-reply.
		fmt.Fprintf(&b, "> **Warning: %d rows (%s) hold %d truncated turns.** A truncated turn is a teacher reply the token limit cut "+
			"before its SQL was complete; its assistant message ends where the teacher was cut (an open `<think>`, an unfinished "+
			"`<sql>`, or nothing at all under `--think field|none`), followed by `<|im_end|>`. Under `assistant_only_loss` that "+
			"message is trained on like any other, so a student learns to stop mid-thought. Keep only `truncated_turns == 0` "+
			"(`ds.filter(lambda r: r[\"truncated_turns\"] == 0)`) or rebuild with `curate build --truncated exclude`.\n\n",
			rep.TruncatedRows, pct(rep.TruncatedRows, rep.Rows), rep.Think.TruncatedTurns)
	}
	fmt.Fprintf(&b, "- Rows: %d (%d trajectories read, %d excluded)\n", rep.Rows, rep.Trajectories, rep.ExcludedCount)
	// Unjudged rows are wrong by construction: the card says how many, as the eval headline does.
	fmt.Fprintf(&b, "- Correct (`correct`): %d of %d rows (%s)", rep.Correct, rep.Rows, pct(rep.Correct, rep.Rows))
	if rep.Unjudged > 0 {
		fmt.Fprintf(&b, "; %d of %d unjudged: their gold SQL failed (`gold_error`), so `correct` is false whatever the teacher "+
			"wrote (keep `gold_error == \"\"` for judged rows only)", rep.Unjudged, rep.Rows)
	} else {
		b.WriteString("; none unjudged (every gold SQL gave a result)")
	}
	b.WriteString("\n")
	if n := len(rep.Salvaged); n > 0 {
		fmt.Fprintf(&b, "- Salvaged (`--salvage`): %d damaged run-dir lines skipped (over the readers' line limit, or not a trajectory), listed under `salvaged` in `%s`\n", n, StatsFile)
	}
	fmt.Fprintf(&b, "- Shards: %d Parquet files (zstd) under `%s/`\n", len(rep.Shards), DataDir)
	fmt.Fprintf(&b, "- Tokens (%s): %d in all; per row mean %.1f, p50 %d, p95 %d, max %d\n",
		nameOr(rep.Tokenizer, "student tokenizer"), rep.Tokens.Sum, rep.Tokens.Mean, rep.Tokens.P50, rep.Tokens.P95, rep.Tokens.Max)
	fmt.Fprintf(&b, "- Trainable tokens (`num_trainable_tokens`: each assistant span, the `\\n` ending its header, its content, `<|im_end|>` and the `\\n` after it): %d", rep.TrainableTokens)
	if rep.Epochs > 0 {
		fmt.Fprintf(&b, "; × %d epochs = %d", rep.Epochs, rep.TrainableTokens*int64(rep.Epochs))
	}
	th := rep.Think
	fmt.Fprintf(&b, "\n- Think blocks (`--think %s`): %d assistant turns took the reasoning field, %d the inline `<think>`, %d have none; "+
		"%d inline blocks were left out\n", rep.ThinkMode, th.Field, th.Inline, th.None, th.InlineDropped)
	fmt.Fprintf(&b, "- Truncated turns (`--truncated %s`): %d turns in %d rows", rep.Truncated, th.TruncatedTurns, rep.TruncatedRows)
	if n := excludedFor(rep, ReasonTruncated); n > 0 {
		fmt.Fprintf(&b, "; %d rows with truncated turns excluded", n)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Format: %d format violations (`format_violations`: complete replies without a usable `<sql>` block) and "+
		"%d malformed turns (`malformed_turns`: replies failing the format reward's stricter rule, exactly one `<think>…</think>` "+
		"then one `<sql>…</sql>` and nothing else; they include every format violation and truncated turn)\n",
		rep.FormatViolations, rep.MalformedTurns)
	b.WriteString("\n## Per teacher\n\n")
	b.WriteString("| teacher | rows | share | excluded | tokens mean | p50 | p95 | max | trainable tokens | converged | exec ok | correct | unjudged | format violations / malformed turns | think field / inline / none | truncated rows / turns |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range rep.Teachers {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %.1f | %d | %d | %d | %d | %s | %s | %s | %d | %d / %d | %d / %d / %d | %d / %d |\n",
			mdEscape(t.Teacher), t.Rows, pct(t.Rows, rep.Rows), t.Excluded, t.Tokens.Mean, t.Tokens.P50, t.Tokens.P95, t.Tokens.Max,
			t.TrainableTokens, pct(t.Converged, t.Rows), pct(t.ExecOK, t.Rows), pct(t.Correct, t.Rows), t.Unjudged,
			t.FormatViolations, t.MalformedTurns, t.Think.Field, t.Think.Inline, t.Think.None, t.TruncatedRows, t.Think.TruncatedTurns)
	}
	b.WriteString("\n## Protocol\n\n")
	b.WriteString("The system turn gives the SQL dialect and the schema as `CREATE TABLE` DDL with sample values; the user turn gives " +
		"`Question: …` and, where the benchmark has it, `Evidence: …`. Each assistant turn is `<think>…</think>\\n<sql>…</sql>` with one " +
		"statement; the statement runs read-only on the task's database and the result or error comes back as a user turn " +
		"`<observation>…</observation>`. The episode ends when the same SQL is given on two consecutive turns or after " +
		"5 turns. A complete reply without a parsable `<sql>` is a format violation; a reply the token limit cut before its SQL was " +
		"complete is a truncated turn (`truncated_turns`), answered with a notice to think more briefly. `correct` is BIRD-style " +
		"execution accuracy of the final SQL against `gold_sql`, whose result came from the engine `gold_dialect` names (the row's " +
		"dialect, or `sqlite` where the gold failed on a server and ran on the task's SQLite file). A row whose gold SQL gave no " +
		"result (an error or a refusal, or no gold for the dialect) is unjudged: `gold_error` says why, and `correct` is false " +
		"whatever the final SQL. Datasets before `chainedsql-sft/v5` have neither column (read them empty: no row unjudged). `converged` is true when the episode ended on the same SQL twice " +
		"in a row and that SQL ran (`exec_ok`): a failing statement given twice ends the episode but has not converged. Datasets " +
		"before `chainedsql-sft/v4` set `converged` on any repeat; read `converged and exec_ok` there, as `curate stats` does.\n\n")
	b.WriteString("Each assistant message is rendered as `<think>REASONING</think>\\n` followed by the reply's answer, where REASONING is " +
		"the teacher's own reasoning text: in mode `auto` the separate reasoning field the provider returned (`reasoning_content`, " +
		"`reasoning` or `reasoning_details`) when there is one, else the `<think>` block the model wrote inline (a field and an inline " +
		"copy: the field's text is kept); `field` and `inline` take only that source; `none` writes no think block. `think_sources` " +
		"says per turn which source was used; `reasoning` keeps each turn's field text as received; `teacher_reasoning_tokens` is " +
		"the provider's count, or the student tokenizer's count of the text where the provider reported none " +
		"(`teacher_reasoning_tokens_estimated`).\n\n")
	b.WriteString("## How it was made\n\n")
	fmt.Fprintf(&b, "`curate build` (chainedsql) read %d run director", len(rep.Runs))
	if len(rep.Runs) == 1 {
		b.WriteString("y")
	} else {
		b.WriteString("ies")
	}
	b.WriteString(" (")
	for i, r := range rep.Runs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "`%s`: %d trajectories", r.Name, r.Trajectories)
	}
	b.WriteString("), rendered each conversation up to its last assistant turn with the Qwen2.5 chat template " +
		"(`add_generation_prompt=false`, default system message when none is given), and tokenised it. `num_tokens` is the " +
		"length of that rendering; `num_trainable_tokens` counts the tokens in the assistant spans: each assistant message's " +
		"the `\\n` that ends its `<|im_start|>assistant` header, its content, `<|im_end|>` and the `\\n` after it: the " +
		"`{% generation %}` regions of TRL's Qwen2.5 training template (`trl/chat_templates/qwen2_5_training.jinja`), which " +
		"`SFTTrainer` uses for `assistant_only_loss=True` since Qwen2.5's own template has no generation blocks. `curate verify` recomputes both per row by scanning token ids. " +
		"`stats.json` has these figures and the list of excluded rows.\n\n")
	if rep.ExcludedCount > 0 {
		reasons := map[string]int{}
		for _, e := range rep.Excluded {
			reasons[e.Reason]++
		}
		keys := make([]string, 0, len(reasons))
		for k := range reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("Excluded: ")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d × `%s`", reasons[k], k)
			if t := reasonTexts[k]; t != "" {
				fmt.Fprintf(&b, " (%s)", t)
			}
		}
		b.WriteString(" (keys in `stats.json`).\n\n")
	}
	b.WriteString("## Licence\n\n")
	b.WriteString("The questions, evidence, schemas and gold SQL come from the source benchmarks (see the `source` column) and keep " +
		"their licences (BIRD and Spider: CC BY-SA 4.0). The assistant turns were generated by the teacher models named in " +
		"`teacher` and `model`; their providers' terms of use may restrict training on outputs. Check both before redistributing " +
		"or training; `license: other` above stands for this mix.\n")
	return b.Bytes(), nil
}

// excludedFor counts the report's exclusions for reason.
func excludedFor(rep *BuildReport, reason string) int {
	n := 0
	for _, e := range rep.Excluded {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func pct(n, of int) string {
	if of == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// ReadReport reads a dataset's stats.json.
func ReadReport(dir string) (*BuildReport, error) {
	b, err := os.ReadFile(filepath.Join(dir, StatsFile))
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", dir, err)
	}
	rep := new(BuildReport)
	if err := json.Unmarshal(b, rep); err != nil {
		return nil, fmt.Errorf("dataset %s: %s: %w", dir, StatsFile, err)
	}
	rep.Dir = dir
	return rep, nil
}
