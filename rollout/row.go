package rollout

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
)

// Format names the table's layout, in the Parquet footer (key chainedsql.format).
const Format = "chainedsql-rollout/v1"

// Row is one episode; its field tags define the Parquet schema. The token columns are aligned:
// token_ids[i], assistant_mask[i], sampled_mask[i] and logprobs[i] describe one token.
type Row struct {
	TaskID string `parquet:"task_id" json:"task_id"`
	// TaskIndex is the task's place in the tasks the process serves (--tasks).
	TaskIndex  int64  `parquet:"task_index" json:"task_index"`
	DBID       string `parquet:"db_id,dict" json:"db_id"`
	Dialect    string `parquet:"dialect,dict" json:"dialect"`
	Difficulty string `parquet:"difficulty,dict" json:"difficulty"`
	// Group numbers the task's group in the rollout (in the order of Config.Tasks); Sample the
	// episode in its group.
	Group  int64 `parquet:"group" json:"group"`
	Sample int64 `parquet:"sample" json:"sample"`
	// Messages is the conversation: system, user question, then each reply (the decoded
	// sampled tokens) and the observation answering it, ending with the last reply.
	Messages []chat.Message `parquet:"messages,list" json:"messages"`
	// TokenIDs is the whole conversation in the student's chat template, as the model saw and
	// produced it: the prompt's ids, each reply's sampled ids (with the special token it stopped
	// on when that was not <|im_end|>), the template's pieces between (package turns), ending
	// with the last reply's <|im_end|> and newline.
	TokenIDs []int32 `parquet:"token_ids,list" json:"token_ids"`
	// PromptTokens is how many of TokenIDs are the prompt (system and user turns, generation
	// prompt included).
	PromptTokens int64 `parquet:"prompt_tokens" json:"prompt_tokens"`
	// AssistantMask is curate's trainable mask (TRL's assistant_only_loss spans).
	AssistantMask []int8 `parquet:"assistant_mask,list" json:"assistant_mask"`
	// SampledMask is 1 on the tokens the policy sampled: the replies and the special token each
	// stopped on (<|im_end|>, which closes the turn, or another, which the template's
	// <|im_end|>, 0 here, follows). LogProbs holds their log-probabilities (0 elsewhere), each <= 0: log-softmax
	// of the logits at the sampling temperature (1 when greedy), before top-k and top-p.
	SampledMask []int8    `parquet:"sampled_mask,list" json:"sampled_mask"`
	LogProbs    []float32 `parquet:"logprobs,list" json:"logprobs"`
	// TurnRewards are the turns' rewards under the reward mode; they sum to Reward, the
	// episode's final reward (package rewards). Advantage is (Reward - mean) / (std + eps)
	// over the group.
	TurnRewards    []float64 `parquet:"turn_rewards,list" json:"turn_rewards"`
	Reward         float64   `parquet:"reward" json:"reward"`
	Advantage      float64   `parquet:"advantage" json:"advantage"`
	Format         bool      `parquet:"format" json:"format"`
	ExecOK         bool      `parquet:"exec_ok" json:"exec_ok"`
	Converged      bool      `parquet:"converged" json:"converged"`
	Correct        bool      `parquet:"correct" json:"correct"`
	MalformedTurns int64     `parquet:"malformed_turns" json:"malformed_turns"`
	Turns          int64     `parquet:"turns" json:"turns"`
	// FinishReasons are the turns' finish reasons (stop, length).
	FinishReasons []string `parquet:"finish_reasons,list" json:"finish_reasons"`
	FinalSQL      string   `parquet:"final_sql" json:"final_sql"`
	GoldError     string   `parquet:"gold_error" json:"gold_error"`
	// GeneratedTokens counts the sampled tokens (stop tokens included); RequestPromptTokens the
	// prompt tokens of the episode's generation requests, CachedTokens those of them the prefix
	// cache served.
	GeneratedTokens     int64 `parquet:"generated_tokens" json:"generated_tokens"`
	RequestPromptTokens int64 `parquet:"request_prompt_tokens" json:"request_prompt_tokens"`
	CachedTokens        int64 `parquet:"cached_tokens" json:"cached_tokens"`
	// Timings in milliseconds: generation (queueing included), SQL execution, the episode.
	GenerateMS float64 `parquet:"generate_ms" json:"generate_ms"`
	ExecMS     float64 `parquet:"exec_ms" json:"exec_ms"`
	DurationMS float64 `parquet:"duration_ms" json:"duration_ms"`
	// The sampling: Model is the served model id, which a reload of the weights keeps;
	// WeightsPath and WeightsVersion name the checkpoint that decoded the episode (its
	// directory and version: 1 for the weights the process started with, one more at each
	// reload; "" and 0 in tables written before they were recorded).
	Model          string  `parquet:"model,dict" json:"model"`
	WeightsPath    string  `parquet:"weights_path,dict" json:"weights_path"`
	WeightsVersion int64   `parquet:"weights_version" json:"weights_version"`
	Temperature    float64 `parquet:"temperature" json:"temperature"`
	TopP           float64 `parquet:"top_p" json:"top_p"`
	Seed           int64   `parquet:"seed" json:"seed"`
}

// Write writes rows to path as one zstd Parquet file, atomically: a cancelled or failed write
// leaves no file (and an old one unchanged). An existing file at path is replaced only when it
// is a rollout table (OutDir.Write in path's directory; ErrNotTable otherwise).
func Write(path string, rows []Row) error {
	d, name, err := openFor(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Write(name, rows)
}

// CheckOut is Write's refusal of path before the rows exist, for a command to give before it
// starts a rollout.
func CheckOut(path string) error {
	d, name, err := openFor(path)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.Resolve(name)
	return err
}

// openFor opens path's directory as an OutDir and returns it with path's name in it.
func openFor(path string) (*OutDir, string, error) {
	if path == "" || strings.HasSuffix(path, "/") || strings.HasSuffix(path, string(filepath.Separator)) {
		return nil, "", fmt.Errorf("rollout: %q: %w", path, ErrBadName)
	}
	d, err := OpenOutDir(filepath.Dir(path))
	if err != nil {
		return nil, "", err
	}
	return d, filepath.Base(path), nil
}

func write(w io.Writer, rows []Row) error {
	pw := parquet.NewGenericWriter[Row](w,
		parquet.Compression(&parquet.Zstd),
		parquet.CreatedBy(createdBy, Format, buildinfo.Version()),
		parquet.KeyValueMetadata("chainedsql.format", Format),
	)
	if _, err := pw.Write(rows); err != nil {
		return err
	}
	return pw.Close()
}

// Read reads a rollout file back.
func Read(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("rollout: %s: %w", path, err)
	}
	if v, _ := pf.Lookup("chainedsql.format"); v != Format {
		return nil, fmt.Errorf("rollout: %s: format %q, want %s", path, v, Format)
	}
	r := parquet.NewGenericReader[Row](pf)
	defer r.Close()
	rows := make([]Row, pf.NumRows())
	n, err := r.Read(rows)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("rollout: read %s: %w", path, err)
	}
	return rows[:n], nil
}
