package env

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/sandbox"
)

// PromptFormat names the prompt table's layout, in the Parquet footer (key chainedsql.format).
const PromptFormat = "chainedsql-prompts/v1"

// promptBatch is how many prompts are rendered, then written, at a time: the memory of an
// export is bounded by it, not by the number of tasks.
const promptBatch = 256

// PromptRow is the prompt of one task in one dialect, as POST /v1/episodes starts its episode;
// its field tags define the Parquet schema (docs/ENV.md, "Prompt export").
type PromptRow struct {
	TaskID     string `parquet:"task_id" json:"task_id"`
	TaskIndex  int64  `parquet:"task_index" json:"task_index"`
	Dialect    string `parquet:"dialect,dict" json:"dialect"`
	DBID       string `parquet:"db_id,dict" json:"db_id"`
	Difficulty string `parquet:"difficulty,dict" json:"difficulty"`
	// Split is the task's benchmark split (SplitOf), Subset its train or validation subset
	// (Config.Subsets).
	Split  string `parquet:"split,dict" json:"split"`
	Subset string `parquet:"subset,dict" json:"subset"`
	// Prompt is the episode's opening messages: system (schema, rules), user (question).
	Prompt []chat.Message `parquet:"prompt,list" json:"prompt"`
	// PromptText is Prompt in the student's chat template with the generation prompt;
	// PromptIDs its token ids and PromptTokens their count.
	PromptText   string  `parquet:"prompt_text" json:"prompt_text"`
	PromptIDs    []int32 `parquet:"prompt_ids,list" json:"prompt_ids"`
	PromptTokens int64   `parquet:"prompt_tokens" json:"prompt_tokens"`
}

// prompt renders the prompt of task in dialect d by starting an episode the way POST
// /v1/episodes does, and drops the episode.
func (s *Server) prompt(ctx context.Context, task *datasets.Task, d datasets.Dialect) (PromptRow, error) {
	st, err := s.start(ctx, *task, d, 0)
	if err != nil {
		return PromptRow{}, err
	}
	msgs := st.Messages()
	tok := s.promptTokens(msgs)
	row := PromptRow{
		TaskID: task.ID, TaskIndex: int64(task.Index), Dialect: string(d), DBID: task.DBID, Difficulty: task.Difficulty,
		Split: SplitOf(task.ID), Subset: s.cfg.Subsets.Of(task.ID),
		Prompt: slices.Clone(msgs), PromptText: tok.Text,
		PromptIDs: make([]int32, len(tok.IDs)), PromptTokens: int64(len(tok.IDs)),
	}
	for i, id := range tok.IDs {
		row.PromptIDs[i] = int32(id)
	}
	return row, nil
}

// Prompts renders the prompt of every task in every dialect served, in the order of
// Config.Tasks and, for each task, of Config.Dialects, and hands them to emit a batch at a time
// (the slice is reused after emit returns). It needs Config.Tokenizer for the token columns. A
// prompt whose database is busy (sandbox.ErrBusy) is tried again within sandbox.BusyPatience.
func (s *Server) Prompts(ctx context.Context, emit func([]PromptRow) error) error {
	if s.cfg.Tokenizer == nil {
		return errors.New("env: the prompt export needs the student's tokenizer for the prompts' token ids")
	}
	type job struct {
		task *datasets.Task
		d    datasets.Dialect
	}
	var jobs []job
	for _, t := range s.order {
		for _, d := range s.cfg.Dialects {
			jobs = append(jobs, job{t, d})
		}
	}
	rows := make([]PromptRow, 0, min(promptBatch, len(jobs)))
	for len(jobs) > 0 {
		batch := jobs[:min(promptBatch, len(jobs))]
		jobs = jobs[len(batch):]
		rows = rows[:len(batch)]
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s.cfg.Parallel)
		for i, j := range batch {
			g.Go(func() error {
				// A batch job: a busy database (sandbox.ErrBusy: its open with no file descriptor
				// left, its slots held) is tried again, as episode.Patient's openers do, not the
				// whole export's failure.
				var row PromptRow
				err := sandbox.RetryBusy(gctx, sandbox.BusyPatience, func() error {
					var err error
					row, err = s.prompt(gctx, j.task, j.d)
					return err
				})
				if err != nil {
					return fmt.Errorf("prompt of task %s (%s): %w", j.task.ID, j.d, err)
				}
				rows[i] = row
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if err := emit(rows); err != nil {
			return err
		}
	}
	return nil
}

// WritePrompts writes Prompts to path as one zstd Parquet file, atomically: a cancelled or
// failed export leaves no file (and an old one unchanged). It returns the rows written.
func (s *Server) WritePrompts(ctx context.Context, path string) (int, error) {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return 0, fmt.Errorf("env: %w", err)
	}
	n, err := s.writePrompts(ctx, f)
	if err != nil {
		f.Abort()
		return 0, fmt.Errorf("env: write %s: %w", path, err)
	}
	if err := f.Commit(); err != nil {
		return 0, fmt.Errorf("env: %w", err)
	}
	return n, nil
}

func (s *Server) writePrompts(ctx context.Context, w io.Writer) (int, error) {
	pw := parquet.NewGenericWriter[PromptRow](w,
		parquet.Compression(&parquet.Zstd),
		parquet.CreatedBy("chainedsql distill env prompts", PromptFormat, buildinfo.Version()),
		parquet.KeyValueMetadata("chainedsql.format", PromptFormat),
	)
	n := 0
	err := s.Prompts(ctx, func(rows []PromptRow) error {
		_, err := pw.Write(rows)
		n += len(rows)
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return n, pw.Close()
}

// ReadPrompts reads a prompt file back.
func ReadPrompts(path string) ([]PromptRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("env: %s: %w", path, err)
	}
	if v, _ := pf.Lookup("chainedsql.format"); v != PromptFormat {
		return nil, fmt.Errorf("env: %s: format %q, want %s", path, v, PromptFormat)
	}
	r := parquet.NewGenericReader[PromptRow](pf)
	defer r.Close()
	rows := make([]PromptRow, pf.NumRows())
	n, err := r.Read(rows)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("env: read %s: %w", path, err)
	}
	return rows[:n], nil
}
