// Package rollout generates GRPO's groups: G episodes of the chained-sql/v1 protocol per task
// from the bundled runtime (inference/generate), all of them scheduled together so that the
// episodes of a task share their prompt's KV cache, and writes them to Parquet as a trainer
// consumes them: the conversation's token ids (never re-tokenised: the ids sampled, and the
// chat template's pieces from package turns), curate's assistant mask, the log-probability of
// every sampled token, the per-turn and final rewards of package rewards and the
// group-normalised advantage. docs/ROLLOUT.md maps the table to TRL's rollout_func and verl's
// batch.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/turns"
)

// Tokenizer is what a rollout needs of the student's tokenizer (*tokenizer.Tokenizer is one):
// the template's pieces are encoded through turns.Encoder, so no content is a control id.
type Tokenizer interface {
	turns.Encoder
	Decode(ids []int) string
	TokenID(tok string) (int, bool)
}

// DefaultEpsilon is the advantage's ε, as TRL's GRPOTrainer adds it to the group's std.
const DefaultEpsilon = 1e-4

// Config is one rollout.
type Config struct {
	// Tasks are the prompts; each gets Group episodes, the task's group, in this order.
	Tasks []datasets.Task
	// TaskIndexes, when set, are the Tasks' places in the tasks the process serves (Select):
	// the rows' and the logged trajectories' task_index. Nil: each task's place in Tasks.
	TaskIndexes []int
	// Dialect is the engine the tasks run on; Opener opens their databases.
	Dialect datasets.Dialect
	Opener  episode.Opener
	// Episode carries MaxTurns, ExecTimeout and Caps (Schemas and Ordered are set here).
	Episode episode.EpisodeOptions
	// Generator decodes with the student; Tokenizer is the student's; Model names it.
	Generator *generate.Generator
	Tokenizer Tokenizer
	Model     string
	// WeightsPath and WeightsVersion name the checkpoint the Generator decodes with: its
	// directory and its version (serve.WeightsInfo: 1 for the weights a process started with,
	// one more at each reload). Every row and logged trajectory records them.
	WeightsPath    string
	WeightsVersion int64
	// Group is G, the episodes per task (at least 1).
	Group int
	// Temperature (0: greedy), TopP (0 or 1: off), TopK (0: off) and Seed are the sampling;
	// each turn of each episode draws from its own seed derived from Seed, the task's index,
	// the sample and the turn, whatever the scheduling. The logits themselves differ in their
	// last bits with how many rows a step carries (the kernels' accumulation order), so a
	// rollout repeats bit for bit only when decoded one sequence at a time without prefix
	// reuse (generate.Config MaxBatch 1, CacheTokens -1).
	Temperature, TopP float64
	TopK              int
	Seed              int64
	// MaxTokens bounds each reply (default 1024).
	MaxTokens int
	// Weights and Mode make the rewards (rewards.DefaultWeights, rewards.ModeFinal when zero).
	Weights *rewards.Weights
	Mode    rewards.Mode
	// Epsilon is added to the group's standard deviation (default DefaultEpsilon).
	Epsilon float64
	// Schemas caches the schema prompts (default a new cache).
	Schemas *episode.SchemaCache
	// Log, when set, receives every episode as a trajectory of teacher LogTeacher keyed by Key,
	// once all of them are done (a rollout that fails or is cancelled logs nothing, as it writes
	// no table). A key already in the log refuses the rollout before it starts.
	Log *rundir.Log
}

// LogTeacher is the teacher name of logged rollout episodes (shard files
// rollout.DIALECT.NNNN.jsonl).
const LogTeacher = "rollout"

// Key is the log key of sample g of group (task index) ti of a rollout of seed:
// TASK_ID/seedSEED/gGROUP/sSAMPLE, unique across the rollouts of other seeds in one log.
func Key(taskID string, seed int64, group, sample int) string {
	return fmt.Sprintf("%s/seed%d/g%d/s%d", taskID, seed, group, sample)
}

// Report sums up a rollout.
type Report struct {
	Episodes int `json:"episodes"`
	// GeneratedTokens counts the sampled tokens, stop tokens included.
	GeneratedTokens int64 `json:"generated_tokens"`
	// PromptTokens and CachedTokens count the prompt tokens of every generation request and
	// those served from the prefix cache.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// Duration is the wall time of all episodes; DecodeTokensPerSec is GeneratedTokens over it.
	Duration           time.Duration `json:"duration_ns"`
	DecodeTokensPerSec float64       `json:"decode_tokens_per_sec"`
	// DecodeSteps are the generator's decode steps during the rollout (generate.Stats: steps in
	// which every running sequence fed one token after its prompt, no prompt chunk riding
	// along), DecodeStepTokens the tokens sampled in them and DecodeStepTime their wall time,
	// prefill excluded; DecodeStepTokensPerSec is the one over the other, the rate to set
	// against student bench's batched decode at the same batch and depth. (Requests of others
	// to the same generator meanwhile, as under --serve, count too.)
	DecodeSteps            int           `json:"decode_steps"`
	DecodeStepTokens       int64         `json:"decode_step_tokens"`
	DecodeStepTime         time.Duration `json:"decode_step_ns"`
	DecodeStepTokensPerSec float64       `json:"decode_step_tok_s"`
	// MeanReward is the mean final reward.
	MeanReward float64 `json:"mean_reward"`
}

// Run plays Group episodes of every task at once and returns their rows in task order, then
// sample order, with the advantages set.
func Run(ctx context.Context, cfg Config) ([]Row, *Report, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	imEnd, _ := cfg.Tokenizer.TokenID(chattmpl.ImEnd)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make([]Row, len(cfg.Tasks)*cfg.Group)
	errs := make([]error, len(rows))
	var trs []*rundir.Trajectory
	if cfg.Log != nil {
		trs = make([]*rundir.Trajectory, len(rows))
		for ti, t := range cfg.Tasks {
			for g := range cfg.Group {
				if k := Key(t.ID, cfg.Seed, ti, g); cfg.Log.Done(k) {
					return nil, nil, fmt.Errorf("rollout: %s already holds %s: this rollout (seed %d) was logged there; use another --seed or log dir", cfg.Log.Dir(), k, cfg.Seed)
				}
			}
		}
	}
	before := cfg.Generator.Stats()
	began := time.Now()
	var wg sync.WaitGroup
	for ti := range cfg.Tasks {
		for g := 0; g < cfg.Group; g++ {
			i := ti*cfg.Group + g
			wg.Go(func() {
				r, tr, err := cfg.episode(ctx, ti, g, imEnd)
				if err != nil {
					errs[i] = fmt.Errorf("rollout: task %s sample %d: %w", cfg.Tasks[ti].ID, g, err)
					cancel() // one failure ends the rollout: a group with a hole is no group
					return
				}
				rows[i] = r
				if trs != nil {
					trs[i] = tr
				}
			})
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil && errors.Join(errs...) == nil {
		return nil, nil, err
	}
	if err := firstError(errs); err != nil {
		return nil, nil, err
	}
	rep := &Report{Episodes: len(rows), Duration: time.Since(began)}
	after := cfg.Generator.Stats()
	rep.DecodeSteps = after.DecodeSteps - before.DecodeSteps
	rep.DecodeStepTokens = after.DecodeTokens - before.DecodeTokens
	rep.DecodeStepTime = after.DecodeTime - before.DecodeTime
	if s := rep.DecodeStepTime.Seconds(); s > 0 {
		rep.DecodeStepTokensPerSec = float64(rep.DecodeStepTokens) / s
	}
	for i := range rows {
		rep.GeneratedTokens += rows[i].GeneratedTokens
		rep.PromptTokens += rows[i].RequestPromptTokens
		rep.CachedTokens += rows[i].CachedTokens
		rep.MeanReward += rows[i].Reward / float64(len(rows))
	}
	if s := rep.Duration.Seconds(); s > 0 {
		rep.DecodeTokensPerSec = float64(rep.GeneratedTokens) / s
	}
	for ti := range cfg.Tasks {
		SetAdvantages(rows[ti*cfg.Group:(ti+1)*cfg.Group], cfg.Epsilon)
	}
	for _, tr := range trs {
		if err := cfg.Log.Add(tr); err != nil {
			return nil, nil, fmt.Errorf("rollout: logging: %w", err)
		}
	}
	return rows, rep, nil
}

// firstError is the first error that is not only the cancellation another one caused.
func firstError(errs []error) error {
	var cancelled error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			if cancelled == nil {
				cancelled = err
			}
		default:
			return err
		}
	}
	return cancelled
}

func (cfg *Config) check() error {
	switch {
	case len(cfg.Tasks) == 0:
		return errors.New("rollout: no tasks")
	case cfg.Group < 1:
		return fmt.Errorf("rollout: group size %d: want at least 1", cfg.Group)
	case cfg.Opener == nil || cfg.Generator == nil || cfg.Tokenizer == nil:
		return errors.New("rollout: a database opener, a generator and a tokenizer are required")
	case cfg.TaskIndexes != nil && len(cfg.TaskIndexes) != len(cfg.Tasks):
		return fmt.Errorf("rollout: %d task indexes for %d tasks", len(cfg.TaskIndexes), len(cfg.Tasks))
	case cfg.Temperature < 0 || cfg.TopP < 0 || cfg.TopP > 1 || cfg.TopK < 0:
		return fmt.Errorf("rollout: temperature %g, top-p %g, top-k %d: out of range", cfg.Temperature, cfg.TopP, cfg.TopK)
	}
	if _, ok := cfg.Tokenizer.TokenID(chattmpl.ImEnd); !ok {
		return fmt.Errorf("rollout: the tokenizer has no %s token: not a ChatML (Qwen2) tokenizer", chattmpl.ImEnd)
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 1024
	}
	cfg.Opener = episode.Patient(cfg.Opener) // an episode's runaways cost the others time, not their rewards
	if cfg.Weights == nil {
		w := rewards.DefaultWeights
		cfg.Weights = &w
	}
	mode, err := rewards.ParseMode(string(cfg.Mode))
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	cfg.Mode = mode
	if cfg.Epsilon <= 0 {
		cfg.Epsilon = DefaultEpsilon
	}
	if cfg.Schemas == nil {
		cfg.Schemas = episode.NewSchemaCache(episode.DefaultSchemaSamples)
	}
	if cfg.Episode.MaxTurns <= 0 {
		cfg.Episode.MaxTurns = protocol.DefaultMaxTurns
	}
	return nil
}

// seed derives the seed of one turn's request (splitmix64 over the four numbers).
func seed(base int64, task, sample, turn int) int64 {
	x := uint64(base)
	for _, v := range []int{task, sample, turn} {
		x += 0x9e3779b97f4a7c15 + uint64(v)
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		x = z ^ (z >> 31)
	}
	return int64(x)
}

// episode plays sample g of task ti; with a log it returns the trajectory too, keyed for it.
func (cfg *Config) episode(ctx context.Context, ti, g, imEnd int) (Row, *rundir.Trajectory, error) {
	task := cfg.Tasks[ti]
	began := time.Now()
	db, err := cfg.Opener.Open(ctx, cfg.Dialect, task)
	if err != nil {
		return Row{}, nil, fmt.Errorf("opening the %s database %s: %w", cfg.Dialect, task.DBID, err)
	}
	opts := cfg.Episode
	opts.Schemas, opts.GoldOpener = cfg.Schemas, cfg.Opener
	opts.Ordered = task.Source == datasets.SpecSpider // as student eval and the env judge
	st, err := episode.NewStepper(ctx, task, db, opts)
	if err != nil {
		return Row{}, nil, err
	}
	seq := newSequence(turns.Prompt(st.Messages()).Encode(cfg.Tokenizer))
	index := ti
	if cfg.TaskIndexes != nil {
		index = cfg.TaskIndexes[ti]
	}
	row := Row{TaskID: task.ID, TaskIndex: int64(index), DBID: task.DBID, Dialect: string(cfg.Dialect), Difficulty: task.Difficulty,
		Group: int64(ti), Sample: int64(g), PromptTokens: int64(len(seq.ids)), Model: cfg.Model,
		WeightsPath: cfg.WeightsPath, WeightsVersion: cfg.WeightsVersion,
		Temperature: cfg.Temperature, TopP: cfg.TopP, Seed: cfg.Seed}
	var genTime time.Duration
	for turn := 1; !st.Done(); turn++ {
		res, err := cfg.Generator.Generate(ctx, generate.Request{
			Prompt: seq.ids, MaxTokens: cfg.MaxTokens, Temperature: cfg.Temperature, TopP: cfg.TopP, TopK: cfg.TopK,
			Seed: seed(cfg.Seed, ti, g, turn), LogProbs: true,
		})
		if err != nil {
			return Row{}, nil, fmt.Errorf("turn %d: generating: %w", turn, err)
		}
		genTime += res.Duration
		row.GeneratedTokens += int64(len(res.LogProbs))
		row.RequestPromptTokens += int64(res.PromptTokens)
		row.CachedTokens += int64(res.CachedTokens)
		finish := chat.FinishStop
		if res.FinishReason == generate.FinishLength {
			finish = chat.FinishLength
		}
		content := cfg.Tokenizer.Decode(res.Tokens)
		tu, err := st.Step(ctx, chat.Reply{Content: content, FinishReason: finish, Model: cfg.Model})
		if err != nil {
			return Row{}, nil, fmt.Errorf("turn %d: %w", turn, err)
		}
		row.FinishReasons = append(row.FinishReasons, finish)
		seq.sampled(res.Tokens, res.LogProbs)
		stopped := res.FinishReason == generate.FinishStop && res.StopID >= 0
		if stopped && res.StopID != imEnd {
			// Another special token ended the reply (<|endoftext|>, <|im_start|>, …): the policy
			// sampled it, so it is recorded as sampled with its log-prob, and it stays in the
			// sequence the next turn is generated from, so what the trainer scores is what the
			// sampler saw. The template's <|im_end|> still closes the turn after it, unsampled.
			seq.sampled([]int{res.StopID}, res.LogProbs[len(res.LogProbs)-1:])
		}
		next := turns.Closing()
		if !st.Done() {
			next = turns.Observation(tu.Observation)
		}
		next = next.Encode(cfg.Tokenizer)
		if len(next.IDs) == 0 || next.IDs[0] != imEnd {
			return Row{}, nil, fmt.Errorf("turn %d: the template's piece after a reply does not start with %s", turn, chattmpl.ImEnd)
		}
		at := len(seq.ids)
		seq.add(next)
		if stopped && res.StopID == imEnd {
			// The <|im_end|> that opens the piece is the stop token the model sampled.
			seq.sampledMask[at], seq.logprobs[at] = 1, res.LogProbs[len(res.LogProbs)-1]
		}
	}
	tr := st.Trajectory()
	row.Messages = append(row.Messages, tr.Conversation()...)
	r := rewards.Of(tr)
	row.TurnRewards, row.Reward = cfg.Weights.TurnRewards(tr, true, cfg.Mode)
	row.Format, row.ExecOK, row.Converged, row.Correct = r.Format == 1, r.ExecOK == 1, r.Converged == 1, r.Correct == 1
	row.MalformedTurns = int64(r.Malformed)
	row.Turns = int64(len(tr.Turns))
	row.FinalSQL, row.GoldError = tr.FinalSQL, tr.GoldError
	row.TokenIDs, row.AssistantMask, row.SampledMask, row.LogProbs = seq.ids32(), seq.mask, seq.sampledMask, seq.logprobs
	for _, tu := range tr.Turns {
		if tu.Exec != nil {
			row.ExecMS += float64(tu.Exec.Duration.Microseconds()) / 1000
		}
	}
	row.GenerateMS = float64(genTime.Microseconds()) / 1000
	row.DurationMS = float64(time.Since(began).Microseconds()) / 1000
	if cfg.Log == nil {
		return row, nil, nil
	}
	tr.Key, tr.Teacher, tr.Sample = Key(task.ID, cfg.Seed, ti, g), LogTeacher, g
	tr.TaskIndex = index
	tr.WeightsPath, tr.WeightsVersion = cfg.WeightsPath, cfg.WeightsVersion
	return row, tr, nil
}

// sequence is an episode's token list as it grows.
type sequence struct {
	ids         []int
	mask        []int8 // curate's assistant mask
	sampledMask []int8 // 1 where the policy sampled the token
	logprobs    []float32
}

func newSequence(prompt turns.Piece) *sequence {
	s := &sequence{}
	s.add(prompt)
	return s
}

// add appends a piece of the template: not sampled.
func (s *sequence) add(p turns.Piece) {
	s.ids = append(s.ids, p.IDs...)
	s.mask = append(s.mask, p.Mask...)
	for range p.IDs {
		s.sampledMask = append(s.sampledMask, 0)
		s.logprobs = append(s.logprobs, 0)
	}
}

// sampled appends sampled tokens and their log-probs (assistant mask 1: they are inside the reply's
// turn).
func (s *sequence) sampled(ids []int, logprobs []float32) {
	s.ids = append(s.ids, ids...)
	for i := range ids {
		s.mask = append(s.mask, 1)
		s.sampledMask = append(s.sampledMask, 1)
		s.logprobs = append(s.logprobs, logprobs[i])
	}
}

func (s *sequence) ids32() []int32 {
	out := make([]int32, len(s.ids))
	for i, id := range s.ids {
		out[i] = int32(id)
	}
	return out
}

// SetAdvantages sets the advantage of each row of one group: (r - mean) / (std + eps) over the
// group's final rewards, std the sample standard deviation (n - 1, as torch.std and so TRL's
// GRPOTrainer compute it; 0 for a group of one). A group whose rewards are all equal gets 0.
func SetAdvantages(group []Row, eps float64) {
	n := float64(len(group))
	mean := 0.0
	for _, r := range group {
		mean += r.Reward / n
	}
	ss := 0.0
	for _, r := range group {
		ss += (r.Reward - mean) * (r.Reward - mean)
	}
	std := 0.0
	if len(group) > 1 {
		std = math.Sqrt(ss / (n - 1))
	}
	for i := range group {
		group[i].Advantage = (group[i].Reward - mean) / (std + eps)
		if ss == 0 {
			group[i].Advantage = 0 // all equal: no signal, not the rounding of the mean over eps
		}
	}
}
