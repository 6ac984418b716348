package main

import (
	"context"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// preflightTimeout bounds checkDatabases.
const preflightTimeout = time.Minute

// checkDatabases opens every distinct database the run needs once, in each dialect, before
// anything is written: a missing SQLite file, an unreachable server or a bad DSN is one error
// naming the task, database and dialect, and the run dir is not created. (Inside the run such a
// failure would only become a failures.jsonl line per key, and the command would exit 0.) The
// Connector keeps the pools it opened, so the run reuses them.
func checkDatabases(ctx context.Context, conn *datasets.Connector, tasks []datasets.Task, dialects []datasets.Dialect) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	for _, d := range dialects {
		seen := map[string]bool{}
		for _, t := range tasks {
			if seen[t.DBID] {
				continue
			}
			seen[t.DBID] = true
			if _, err := conn.Open(ctx, d, t); err != nil {
				return fmt.Errorf("checking the %s databases: %w; nothing was run", d, err)
			}
		}
	}
	return nil
}
