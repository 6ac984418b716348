package curate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
)

// Defaults of BuildOptions.
const (
	DefaultMaxLength    = 32768
	DefaultRowsPerShard = 20000
	DefaultRowGroupRows = 1000
)

// Names inside a dataset directory.
const (
	DataDir   = "data"
	StatsFile = "stats.json"
	CardFile  = "README.md"
)

// BuildOptions configure Build.
type BuildOptions struct {
	// Tokenizer is the student's tokenizer (required).
	Tokenizer Tokenizer
	// Think is how assistant messages get their <think> block ("" means ThinkAuto).
	Think ThinkMode
	// Truncated is what becomes of a trajectory with a truncated turn ("" means TruncatedKeep).
	Truncated TruncatedPolicy
	// TokenizerName names the tokenizer in the card and stats.json (e.g. "Qwen2.5").
	TokenizerName string
	// MaxLength excludes rows with more tokens; 0 means DefaultMaxLength.
	MaxLength int
	// Out is the dataset directory to create. It must not exist, or be an empty directory.
	Out string
	// RowsPerShard caps rows per Parquet file; 0 means DefaultRowsPerShard.
	RowsPerShard int
	// RowGroupRows caps rows per Parquet row group; 0 means DefaultRowGroupRows.
	RowGroupRows int
	// Epochs, when > 0, adds trainable tokens × epochs to the card.
	Epochs int
	// Workers tokenise in parallel; 0 means GOMAXPROCS. Output does not depend on it.
	Workers int
	// Salvage builds from run dirs with damaged lines (a line over rundir.MaxLine that an
	// earlier distill wrote, or one that is not a trajectory): each is skipped and listed in
	// BuildReport.Salvaged instead of failing the build.
	Salvage bool
	// Progress, when set, is called from the writing goroutine after each batch.
	Progress func(BuildProgress)
}

// Salvaged is a damaged run-dir line that a --salvage build skipped.
type Salvaged struct {
	SourceRun string `json:"source_run"`
	// File is the shard's name, Line its line number (from 1), Bytes its length.
	File  string `json:"file"`
	Line  int    `json:"line"`
	Bytes int64  `json:"bytes"`
	// Key is the key the run's journal records for the line, "" when none.
	Key   string `json:"key,omitempty"`
	Error string `json:"error"`
}

// BuildProgress is a snapshot passed to BuildOptions.Progress.
type BuildProgress struct {
	Read     int // trajectories read so far
	Rows     int // rows written
	Excluded int // rows excluded
	Tokens   int64
}

// Excluded is one trajectory that did not become a row.
type Excluded struct {
	Key       string `json:"key"`
	SourceRun string `json:"source_run"`
	Teacher   string `json:"teacher"`
	Reason    string `json:"reason"`
	// NumTokens is the rendered length (for max_length exclusions).
	NumTokens int `json:"num_tokens,omitempty"`
	// TruncatedTurns is the trajectory's count of truncated turns (for truncated exclusions).
	TruncatedTurns int `json:"truncated_turns,omitempty"`
	// Token is the special token's text a message holds (for chatml_marker_in_content and
	// special_token_in_content exclusions).
	Token string `json:"token,omitempty"`
}

// TruncatedPolicy is what Build does with a trajectory that has a truncated turn (curate build
// --truncated). Such a turn's assistant message ends where the teacher was cut (an open
// <think>, an unfinished <sql>, or nothing under --think field|none) and then <|im_end|>, inside
// the loss mask: trained on, it teaches the student to stop mid-reply.
type TruncatedPolicy string

// Truncated policies.
const (
	// TruncatedKeep writes the row like any other (the default: the dataset is unfiltered); the
	// card warns and counts the rows, and truncated_turns lets a trainer filter them.
	TruncatedKeep TruncatedPolicy = "keep"
	// TruncatedExclude leaves the row out and lists it in Excluded with ReasonTruncated.
	TruncatedExclude TruncatedPolicy = "exclude"
)

// ParseTruncatedPolicy parses a --truncated value; "" is TruncatedKeep.
func ParseTruncatedPolicy(s string) (TruncatedPolicy, error) {
	switch p := TruncatedPolicy(s); p {
	case "":
		return TruncatedKeep, nil
	case TruncatedKeep, TruncatedExclude:
		return p, nil
	}
	return "", fmt.Errorf("truncated policy %q: want keep or exclude", s)
}

// RunInfo describes one input run directory.
type RunInfo struct {
	// Name is the run directory's base name, the rows' source_run.
	Name         string `json:"name"`
	Shards       int    `json:"shards"`
	Trajectories int    `json:"trajectories"`
}

// TeacherSummary is the per-teacher part of a BuildReport.
type TeacherSummary struct {
	Teacher         string     `json:"teacher"`
	Rows            int        `json:"rows"`
	Excluded        int        `json:"excluded"`
	TruncatedRows   int        `json:"truncated_rows"`
	Tokens          TokenStats `json:"tokens"`
	TrainableTokens int64      `json:"trainable_tokens"`
	Converged       int        `json:"converged"`
	ExecOK          int        `json:"exec_ok"`
	Correct         int        `json:"correct"`
	// Unjudged counts the rows whose gold SQL gave no result (gold_error): never correct.
	Unjudged int `json:"unjudged"`
	// FormatViolations and MalformedTurns sum the teacher's rows' format_violations and
	// malformed_turns (rundir.Tally), as BuildReport's do over all rows.
	FormatViolations int         `json:"format_violations"`
	MalformedTurns   int         `json:"malformed_turns"`
	Think            ThinkCounts `json:"think"`
}

// ThinkCounts counts the assistant turns of written rows by where their think block came from,
// the inline blocks left out, and the truncated turns.
type ThinkCounts struct {
	Field          int `json:"field"`
	Inline         int `json:"inline"`
	None           int `json:"none"`
	InlineDropped  int `json:"inline_dropped"`
	TruncatedTurns int `json:"truncated_turns"`
}

// Add counts the turns of r.
func (c *ThinkCounts) Add(r *Row) {
	for _, s := range r.ThinkSources {
		switch s {
		case ThinkFromField:
			c.Field++
		case ThinkFromInline:
			c.Inline++
		default:
			c.None++
		}
	}
	c.InlineDropped += int(r.InlineThinkDropped)
	c.TruncatedTurns += int(r.TruncatedTurns)
}

// TokenStats summarises per-row token counts.
type TokenStats struct {
	Sum  int64   `json:"sum"`
	Mean float64 `json:"mean"`
	P50  int     `json:"p50"`
	P95  int     `json:"p95"`
	Max  int     `json:"max"`
}

// BuildReport is what Build did; it is also the dataset's stats.json. It holds no absolute
// paths and no times, so that the same input gives the same bytes.
type BuildReport struct {
	Format          string           `json:"format"`
	ThinkMode       ThinkMode        `json:"think_mode"`
	Think           ThinkCounts      `json:"think"`
	Tokenizer       string           `json:"tokenizer"`
	ChatTemplate    string           `json:"chat_template"`
	MaxLength       int              `json:"max_length"`
	Epochs          int              `json:"epochs,omitempty"`
	Runs            []RunInfo        `json:"runs"`
	Trajectories    int              `json:"trajectories"`
	Rows            int              `json:"rows"`
	Shards          []string         `json:"shards"`
	Tokens          TokenStats       `json:"tokens"`
	TrainableTokens int64            `json:"trainable_tokens"`
	Teachers        []TeacherSummary `json:"teachers"`
	ExcludedCount   int              `json:"excluded_count"`
	Excluded        []Excluded       `json:"excluded"`
	// Salvaged lists the damaged lines a --salvage build skipped.
	Salvaged []Salvaged `json:"salvaged,omitempty"`
	// Truncated is the --truncated policy; TruncatedRows counts the written rows with a
	// truncated turn (Think.TruncatedTurns counts the turns).
	Truncated     TruncatedPolicy `json:"truncated"`
	TruncatedRows int             `json:"truncated_rows"`
	// Correct counts the written rows that are correct; Unjudged those whose gold SQL gave no
	// result (gold_error), which are never correct (0 in stats.json before format v5).
	Correct  int `json:"correct"`
	Unjudged int `json:"unjudged"`
	// FormatViolations and MalformedTurns sum the written rows' format_violations and
	// malformed_turns (rundir.Tally; absent from stats.json before them).
	FormatViolations int `json:"format_violations"`
	MalformedTurns   int `json:"malformed_turns"`
	// Dir and Duration describe this build only and are not written to stats.json.
	Dir      string        `json:"-"`
	Duration time.Duration `json:"-"`
}

// FormatVersion is BuildReport.Format. Version 2 renders think blocks by ThinkMode and adds the
// think, truncation and teacher reasoning-token columns; version 3 counts num_trainable_tokens
// over TRL's Qwen2.5 training spans (the header's "\n" through the "\n" after <|im_end|>, two
// tokens per assistant message more than version 2's content plus <|im_end|>); version 4's
// converged column is rundir.Outcome.Converged (the same SQL twice in a row, and it ran), where
// earlier versions held the raw repeat (Row.Outcome reads both alike); version 5 adds
// gold_error and gold_dialect, so that a row whose gold SQL gave no result counts as unjudged
// (earlier versions read them empty: no row unjudged).
const FormatVersion = "chainedsql-sft/v5"

// ChatTemplateName is BuildReport.ChatTemplate.
const ChatTemplateName = "qwen2.5-chatml (inference/chattmpl), add_generation_prompt=false, loss on the assistant spans (header's \n, content, <|im_end|>, \n)"

type item struct {
	t   *rundir.Trajectory
	run string // run name
	dir string // run directory
	loc string // file:line
}

type job struct {
	seq   int
	items []item
}

type built struct {
	row      Row
	excluded *Excluded
	err      error
}

type result struct {
	seq  int
	rows []built
}

const batchSize = 64

// Build curates the trajectories of runDirs into a dataset at opts.Out.
//
// Trajectories are read in a fixed order (run dirs as given, shard files by name, lines in
// order), tokenised by a pool of workers and written in that same order, so the same input
// gives byte-identical files whatever the number of workers. Memory is bounded by the
// in-flight batches, one Parquet row group, and a few bytes per key (to refuse duplicates) and
// per row (for the card's percentiles). A key seen twice, in one run or across runs, is an
// error naming both places. The dataset is written into a temporary directory beside Out and
// renamed into place only when complete: a failure or cancellation leaves nothing at Out.
// The steps, in order: check (the options), prepare (shard lists, token counters), stage (the
// temporary directory), the pipeline (read, work, write), finish (stats.json, the card), place.
func Build(ctx context.Context, runDirs []string, opts BuildOptions) (*BuildReport, error) {
	began := time.Now()
	if err := opts.check(runDirs); err != nil {
		return nil, err
	}
	runs, counters, err := prepare(runDirs, opts)
	if err != nil {
		return nil, err
	}

	tmp, err := stage(opts.Out)
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()

	rep := &BuildReport{
		Format: FormatVersion, ThinkMode: opts.Think, Truncated: opts.Truncated, Tokenizer: opts.TokenizerName, ChatTemplate: ChatTemplateName,
		MaxLength: opts.MaxLength, Epochs: opts.Epochs, Runs: runs, Excluded: []Excluded{},
	}
	sw := &shardWriter{dir: filepath.Join(tmp, DataDir), rowsPerShard: opts.RowsPerShard, rowGroupRows: opts.RowGroupRows}
	agg := newAggregate()

	pl := &pipeline{opts: opts, runDirs: runDirs, runs: runs, rep: rep, agg: agg, sw: sw}
	if err := pl.run(ctx, counters); err != nil {
		sw.abort()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		sw.abort()
		return nil, err
	}
	if err := finish(ctx, tmp, rep, sw, agg, runs); err != nil {
		return nil, err
	}
	if err := place(tmp, opts.Out); err != nil {
		return nil, err
	}
	done = true
	rep.Dir = opts.Out
	rep.Duration = time.Since(began)
	return rep, nil
}

// stage creates the staging dir beside out (.NAME.curate-*, with its data dir), removing the
// ones a killed build left.
func stage(out string) (string, error) {
	parent := filepath.Dir(filepath.Clean(out))
	prefix := "." + filepath.Base(filepath.Clean(out)) + ".curate-"
	if err := removeStale(parent, prefix); err != nil {
		return "", fmt.Errorf("curate build: %w", err)
	}
	tmp, err := mkdirTemp(parent, prefix)
	if err != nil {
		return "", fmt.Errorf("curate build: %w", err)
	}
	if err := os.Mkdir(filepath.Join(tmp, DataDir), 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("curate build: %w", err)
	}
	return tmp, nil
}

// place renames the complete staging dir tmp to out: an empty directory at out (checked before
// the build) is replaced; anything else was refused.
func place(tmp, out string) error {
	if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("curate build: replace empty %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("curate build: move dataset into place: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(filepath.Clean(out))); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	return nil
}

// check refuses options Build cannot work with and fills the defaults.
func (opts *BuildOptions) check(runDirs []string) error {
	if opts.Tokenizer == nil {
		return errors.New("curate build: no tokenizer")
	}
	if len(runDirs) == 0 {
		return errors.New("curate build: no run directories")
	}
	if opts.Out == "" {
		return errors.New("curate build: no output directory")
	}
	if opts.MaxLength <= 0 {
		opts.MaxLength = DefaultMaxLength
	}
	if opts.RowsPerShard <= 0 {
		opts.RowsPerShard = DefaultRowsPerShard
	}
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = DefaultRowGroupRows
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.Think == "" {
		opts.Think = ThinkAuto
	}
	if _, err := ParseThinkMode(string(opts.Think)); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	var err error
	if opts.Truncated, err = ParseTruncatedPolicy(string(opts.Truncated)); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	if err := checkOut(opts.Out); err != nil {
		return err
	}
	return nil
}

// prepare lists the run dirs' shards and creates one token counter per worker (up front, so
// that a tokenizer without ChatML tokens fails early).
func prepare(runDirs []string, opts BuildOptions) ([]RunInfo, []*counter, error) {
	runs := make([]RunInfo, len(runDirs))
	for i, d := range runDirs {
		files, err := shardFiles(d)
		if err != nil {
			return nil, nil, fmt.Errorf("curate build: %w", err)
		}
		runs[i] = RunInfo{Name: filepath.Base(filepath.Clean(d)), Shards: len(files)}
	}
	counters := make([]*counter, opts.Workers)
	for i := range counters {
		c, err := newCounter(opts.Tokenizer)
		if err != nil {
			return nil, nil, fmt.Errorf("curate build: %w", err)
		}
		counters[i] = c
	}
	return runs, counters, nil
}

// pipeline is Build's row pipeline: read (the run dirs' trajectories, in batches, in order),
// work (render, tokenise and check each batch on opts.Workers workers), write (the batches back
// in read order, into the Parquet shards, the report and the aggregate). inflight bounds the
// batches between read and write, the reorder buffer included.
type pipeline struct {
	opts     BuildOptions
	runDirs  []string
	runs     []RunInfo
	rep      *BuildReport
	agg      *aggregate
	sw       *shardWriter
	jobs     chan job
	results  chan result
	inflight chan struct{}
}

// run runs the three steps until every row is written or one fails.
func (p *pipeline) run(ctx context.Context, counters []*counter) error {
	p.jobs = make(chan job)
	p.results = make(chan result, p.opts.Workers)
	p.inflight = make(chan struct{}, 2*p.opts.Workers+2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.read(gctx) })
	g.Go(func() error { return p.work(gctx, counters) })
	g.Go(func() error { return p.write(gctx) })
	return g.Wait()
}

// read sends the trajectories of every run dir, in order, in batches of batchSize, refusing a
// key seen before.
func (p *pipeline) read(ctx context.Context) error {
	defer close(p.jobs)
	type seen struct{ run, loc string }
	keys := map[string]seen{}
	seq := 0
	var batch []item
	send := func() error {
		select {
		case p.inflight <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case p.jobs <- job{seq: seq, items: batch}:
		case <-ctx.Done():
			return ctx.Err()
		}
		seq++
		batch = nil
		return nil
	}
	for i, d := range p.runDirs {
		name := p.runs[i].Name
		var salvage func(*rundir.BadLine) error
		if p.opts.Salvage {
			salvage = func(b *rundir.BadLine) error {
				p.rep.Salvaged = append(p.rep.Salvaged, Salvaged{SourceRun: name, File: b.File, Line: b.N, Bytes: b.Bytes, Key: b.Key, Error: textcap.Cut(b.Err.Error(), textcap.Error)})
				return nil
			}
		}
		err := readRun(ctx, d, salvage, func(t *rundir.Trajectory, loc string) error {
			if prev, ok := keys[t.Key]; ok {
				return fmt.Errorf("curate build: duplicate key %q: in run %s (%s) and in run %s (%s); curate each trajectory once (merging shards of a split run? pass each part once)",
					t.Key, prev.run, prev.loc, d, loc)
			}
			keys[t.Key] = seen{run: d, loc: loc}
			p.runs[i].Trajectories++
			batch = append(batch, item{t: t, run: name, dir: d, loc: loc})
			if len(batch) == batchSize {
				return send()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(batch) > 0 {
		return send()
	}
	return nil
}

// work renders, tokenises and checks the batches on opts.Workers workers; it closes results
// when they are done.
func (p *pipeline) work(ctx context.Context, counters []*counter) error {
	workers, wctx := errgroup.WithContext(ctx)
	for w := 0; w < p.opts.Workers; w++ {
		c := counters[w]
		workers.Go(func() error {
			for j := range p.jobs {
				res := result{seq: j.seq, rows: make([]built, len(j.items))}
				for k, it := range j.items {
					res.rows[k] = process(c, it, p.opts)
					if err := res.rows[k].err; err != nil {
						return err
					}
				}
				select {
				case p.results <- res:
				case <-wctx.Done():
					return wctx.Err()
				}
			}
			return nil
		})
	}
	err := workers.Wait()
	close(p.results)
	return err

}

// write takes the batches back in read order and writes their rows, counting them in the
// report and the aggregate.
func (p *pipeline) write(ctx context.Context) error {
	pending := map[int]result{}
	next := 0
	var prog BuildProgress
	for res := range p.results {
		pending[res.seq] = res
		for {
			r, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			<-p.inflight
			rows := make([]Row, 0, len(r.rows))
			for _, b := range r.rows {
				prog.Read++
				if b.excluded != nil {
					p.rep.Excluded = append(p.rep.Excluded, *b.excluded)
					p.agg.exclude(b.excluded.Teacher)
					prog.Excluded++
					continue
				}
				rows = append(rows, b.row)
				p.agg.add(&b.row)
				prog.Rows++
				prog.Tokens += b.row.NumTokens
			}
			if err := p.sw.write(rows); err != nil {
				return err
			}
			if p.opts.Progress != nil {
				p.opts.Progress(prog)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// finish closes the shards and writes stats.json and the card into the staging dir tmp.
func finish(ctx context.Context, tmp string, rep *BuildReport, sw *shardWriter, agg *aggregate, runs []RunInfo) error {
	shards, err := sw.finish()
	if err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	rep.Shards = shards
	for _, r := range runs {
		rep.Trajectories += r.Trajectories
	}
	agg.fill(rep)
	if err := writeStats(filepath.Join(tmp, StatsFile), rep); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	card, err := renderCard(rep, sw.bytes)
	if err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, CardFile), card, outputPerm); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Join(tmp, DataDir)); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return fmt.Errorf("curate build: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return nil
}

// checkOut refuses an output path that exists and is not an empty directory.
func checkOut(out string) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(filepath.Clean(out))); err != nil {
			return fmt.Errorf("curate build: parent of output %s: %w", out, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("curate build: output %s: %w", out, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("curate build: output %s exists and is not a directory", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("curate build: output %s: %w", out, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("curate build: output %s exists and is not empty; remove it or choose another --out", out)
	}
	return nil
}

// removeStale removes the temporary directories (prefix*) that earlier builds of the same
// output left in parent when they were killed before their deferred cleanup could run. Two
// builds into the same output at once are not supported: the later one removes the earlier
// one's temporary directory, which then fails instead of moving a dataset into place.
func removeStale(parent, prefix string) error {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				return fmt.Errorf("remove stale temporary %s: %w", filepath.Join(parent, e.Name()), err)
			}
		}
	}
	return nil
}

// process turns one trajectory into a row or an exclusion.
func process(c *counter, it item, opts BuildOptions) built {
	t, mode := it.t, opts.Think
	r, err := Render(t, mode)
	if err != nil {
		return built{err: fmt.Errorf("curate build: trajectory %q at %s: %w", t.Key, it.loc, err)}
	}
	if reason, token := specialInContent(c.specials, r.Messages); reason != "" {
		return built{excluded: &Excluded{Key: t.Key, SourceRun: it.run, Teacher: t.Teacher, Reason: reason, Token: token}}
	}
	if opts.Truncated == TruncatedExclude && t.TruncatedTurns > 0 {
		return built{excluded: &Excluded{Key: t.Key, SourceRun: it.run, Teacher: t.Teacher, Reason: ReasonTruncated, TruncatedTurns: t.TruncatedTurns}}
	}
	n, trainable := c.count(r.Text, r.Spans)
	if n > opts.MaxLength {
		return built{excluded: &Excluded{Key: t.Key, SourceRun: it.run, Teacher: t.Teacher, Reason: ReasonMaxLength, NumTokens: n}}
	}
	row := rowOf(t, r, mode, it.run)
	row.NumTokens = int64(n)
	row.NumTrainableTokens = int64(trainable)
	row.ReasoningTokens, row.ReasoningTokensEstimated = reasoningTokens(t, c.tok)
	return built{row: row}
}

// NewParquetWriter returns the writer of dataset Parquet files over w: curate.Row's schema,
// with the options of ParquetOptions. Close it to write the footer.
func NewParquetWriter(w io.Writer, rowGroupRows int) *parquet.GenericWriter[Row] {
	return parquet.NewGenericWriter[Row](w, ParquetOptions(rowGroupRows)...)
}

// ParquetOptions are the writer options of dataset Parquet files: zstd, row groups of at most
// rowGroupRows rows (0: DefaultRowGroupRows), the toolkit and the format in the footer. A
// writer of curate.Row with further columns (the viewer's export of annotations) uses them.
func ParquetOptions(rowGroupRows int) []parquet.WriterOption {
	if rowGroupRows <= 0 {
		rowGroupRows = DefaultRowGroupRows
	}
	return []parquet.WriterOption{
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(int64(rowGroupRows)),
		parquet.CreatedBy("chainedsql curate", FormatVersion, buildinfo.Version()),
		parquet.KeyValueMetadata("chainedsql.format", FormatVersion),
	}
}

// shardWriter writes rows into part files of at most rowsPerShard rows.
type shardWriter struct {
	dir          string
	rowsPerShard int
	rowGroupRows int
	f            *os.File
	w            *parquet.GenericWriter[Row]
	inShard      int
	parts        []string
	bytes        int64
}

func (s *shardWriter) open() error {
	name := filepath.Join(s.dir, fmt.Sprintf("part-%05d.parquet", len(s.parts)))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, outputPerm)
	if err != nil {
		return err
	}
	s.f = f
	s.w = NewParquetWriter(f, s.rowGroupRows)
	s.parts = append(s.parts, name)
	s.inShard = 0
	return nil
}

func (s *shardWriter) write(rows []Row) error {
	for len(rows) > 0 {
		if s.w == nil {
			if err := s.open(); err != nil {
				return fmt.Errorf("curate build: %w", err)
			}
		}
		n := min(len(rows), s.rowsPerShard-s.inShard)
		if _, err := s.w.Write(rows[:n]); err != nil {
			return fmt.Errorf("curate build: write %s: %w", s.f.Name(), err)
		}
		s.inShard += n
		rows = rows[n:]
		if s.inShard == s.rowsPerShard {
			if err := s.closeShard(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *shardWriter) closeShard() error {
	if s.w == nil {
		return nil
	}
	name := s.f.Name()
	err := s.w.Close()
	if err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.w, s.f = nil, nil
	if err != nil {
		return fmt.Errorf("curate build: finish %s: %w", name, err)
	}
	if st, err := os.Stat(name); err == nil {
		s.bytes += st.Size()
	}
	return nil
}

func (s *shardWriter) abort() {
	if s.w != nil {
		s.f.Close()
		s.w, s.f = nil, nil
	}
}

// finish closes the last shard and renames the parts to train-NNNNN-of-NNNNN.parquet; with no
// rows at all it writes one empty shard, so that the dataset still has its schema.
func (s *shardWriter) finish() ([]string, error) {
	if len(s.parts) == 0 {
		if err := s.open(); err != nil {
			return nil, err
		}
	}
	if err := s.closeShard(); err != nil {
		return nil, err
	}
	out := make([]string, len(s.parts))
	for i, p := range s.parts {
		rel := fmt.Sprintf("train-%05d-of-%05d.parquet", i, len(s.parts))
		if err := os.Rename(p, filepath.Join(s.dir, rel)); err != nil {
			return nil, err
		}
		out[i] = DataDir + "/" + rel
	}
	sort.Strings(out)
	return out, nil
}
