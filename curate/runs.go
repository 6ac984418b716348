package curate

import (
	"context"
	"fmt"

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
// teacher, dialect and sequence; lines in order) through rundir.Trajectories, which decodes
// rundir.Lines, the journaled prefix of each shard: a run that is still going, or crashed and was
// not resumed, is read correctly. fn gets each trajectory (freshly allocated, it may be kept)
// and its position ("trajectory N" of the run, counting from 1). A damaged line (over
// rundir.MaxLine, or not a trajectory) goes to salvage, which returns nil to skip it; with a nil
// salvage it is an error that points to --salvage.
func readRun(ctx context.Context, dir string, salvage func(*rundir.BadLine) error, fn func(t *rundir.Trajectory, loc string) error) error {
	n := 0
	for t, err := range rundir.Trajectories(dir) {
		if b, bad := rundir.SkipBad(err); bad {
			if salvage == nil {
				return fmt.Errorf("read run %s: %w: the run dir is damaged; curate build --salvage builds without its damaged lines and lists them", dir, err)
			}
			if err := salvage(b); err != nil {
				return err
			}
			continue
		}
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
