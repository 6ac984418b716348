package env

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestGoldPairClockPostgres: sandbox/postgres's TestPostgresJudgePairAfterSlotWait through the
// env's goldDB, as every env judgement runs: the 16 statement slots held by pg_sleeps, the gold
// (Spider's style runs it first) waits for one, runs 1 s of the pair's 2 s, and the prediction
// still runs and is judged correct. Before goldCall.listen the judge's clock never heard of the
// shared gold's wait and judged the prediction a timeout (found by a review).
func TestGoldPairClockPostgres(t *testing.T) {
	task := tasksOf(t)[1]
	conn := freshPostgres(t, []datasets.Task{task})
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	db, err := conn.Open(ctx, datasets.Postgres, task)
	if err != nil {
		t.Fatal(err)
	}
	const gold, pred = "SELECT 1 AS x FROM pg_catalog.pg_sleep(1)", "SELECT 1 AS x"
	j := judge.Judge{Style: judge.StyleSpider}
	for _, wrap := range []bool{false, true} {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = db.Exec(ctx, "SELECT pg_sleep(1.5)", sandbox.ExecOptions{Timeout: 10 * time.Second})
			}()
		}
		time.Sleep(50 * time.Millisecond)
		d := db
		if wrap {
			d = goldOpener{judge: j, gold: gold, cache: newGoldCache(20*time.Second, DefaultGoldCacheBytes)}.wrap(db, task)
		}
		start := time.Now()
		v, err := j.Run(ctx, d, gold, pred, nil, 2*time.Second)
		took := time.Since(start)
		wg.Wait()
		if err != nil || v.Outcome != string(sandbox.OutcomeOK) || !v.Correct {
			t.Errorf("goldDB %v: %+v, %v after %s; want ok, correct", wrap, v, err, took.Round(time.Millisecond))
		}
	}
}
