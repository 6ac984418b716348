package evaluate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// benchEntries repeats evalEntries n times with fresh question ids.
func benchEntries(n int) []birdEntry {
	var out []birdEntry
	for r := range n {
		for _, e := range evalEntries {
			e.QuestionID = len(out)
			e.Question = fmt.Sprintf("%s (%d)", e.Question, r)
			out = append(out, e)
		}
	}
	return out
}

func benchEval(b *testing.B, spec string, popts policies.Options, tasksN int, batch int, mod func(*evaluate.Config)) {
	path := writeBIRD(b, benchEntries(tasksN))
	tasks := loadBIRD(b, path)
	var last *evaluate.Summary
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, err := policies.Resolve(spec, popts)
		if err != nil {
			b.Fatal(err)
		}
		s, err := runEval(b, context.Background(), filepath.Join(b.TempDir(), "eval"), "bird:"+path, tasks, h, func(c *evaluate.Config) {
			c.Batch = batch
			if mod != nil {
				mod(c)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		last = s
	}
	b.StopTimer()
	b.ReportMetric(last.Throughput.TasksPerSec, "tasks/s")
	b.ReportMetric(last.Throughput.TokensPerSec, "tokens/s")
	b.ReportMetric(last.TurnTime.ModelMS, "model-ms/turn")
	b.ReportMetric(last.TurnTime.SQLMS, "sql-ms/turn")
	b.ReportMetric(last.TurnTime.OverheadMS, "overhead-ms/turn")
}

// BenchmarkEvalOracle is the whole eval loop (episodes, run dir, derived files) on 100 tasks.
func BenchmarkEvalOracle(b *testing.B) {
	benchEval(b, episode.OracleName, policies.Options{}, 10, 8, nil)
}

// BenchmarkEvalTinyStudent is the loop with the tiny random-weight Qwen2 on 10 tasks, 2 turns
// of at most 16 tokens.
func BenchmarkEvalTinyStudent(b *testing.B) {
	model := filepath.Dir(shared.Path(b, "models/tiny-qwen2-f32/config.json"))
	tok := shared.Path(b, "tokenizer/qwen2.5/tokenizer.json")
	popts := policies.Options{Student: student.Options{Tokenizer: tok}}
	benchEval(b, "student:"+model, popts, 1, 10, func(c *evaluate.Config) {
		c.Episode.MaxTurns = 2
		c.Episode.Chat.MaxTokens = 16
	})
}
