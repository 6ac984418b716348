package curate

import (
	"context"
	"fmt"

	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/rundir"
)

// shardFiles lists a run directory's shard files in their reading order (rundir.ShardFiles),
// refusing a directory that is not a run dir or has no shards.
func shardFiles(dir string) ([]string, error) {
	if err := rundir.Check(dir); err != nil {
		return nil, err
	}
	files, err := rundir.ShardFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("run dir %s: no shards in %s/", dir, rundir.ShardsDir)
	}
	return files, nil
}

// readRun streams the committed trajectories of one run directory in shard order (files by
// teacher, dialect and sequence; lines in order) through distill.Trajectories, which decodes
// rundir.Lines, the journaled prefix of each shard: a run that is still going, or crashed and was
// not resumed, is read correctly. fn gets each trajectory (freshly allocated, it may be kept)
// and its position ("trajectory N" of the run, counting from 1).
func readRun(ctx context.Context, dir string, fn func(t *distill.Trajectory, loc string) error) error {
	n := 0
	for t, err := range distill.Trajectories(dir) {
		if err != nil {
			return fmt.Errorf("read run %s: %w", dir, err)
		}
		n++
		if n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if t.Key == "" {
			return fmt.Errorf("run %s: trajectory %d has no key", dir, n)
		}
		if err := fn(t, fmt.Sprintf("trajectory %d", n)); err != nil {
			return err
		}
	}
	return ctx.Err()
}
