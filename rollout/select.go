package rollout

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/datasets"
)

// Selection chooses one rollout's tasks among the tasks a rollout process serves (its --tasks):
// all of them, those of one train/validation subset, or the tasks a trainer names.
type Selection struct {
	// TaskIDs, when not nil, are the tasks, in this order, one group each (an id given twice is
	// two groups); every id must be served, and be in Subset when that is set.
	TaskIDs []string
	// Subset, when set (datasets.SubsetTrain or datasets.SubsetVal), keeps the tasks of that
	// subset under Subsets: the assignment of `distill env serve` and `distill env prompts` with
	// the same validation fraction and seed.
	Subset  string
	Subsets datasets.Subsets
}

// SelectError is a selection that cannot be played: Param names the field at fault (task_ids
// or subset), Msg says why.
type SelectError struct {
	Param, Msg string
}

func (e *SelectError) Error() string { return e.Param + ": " + e.Msg }

// maxNamed bounds the ids a SelectError lists.
const maxNamed = 10

// Select returns the tasks sel chooses among tasks, with each one's index in tasks (Config's
// Tasks and TaskIndexes). The error is a *SelectError.
func Select(tasks []datasets.Task, sel Selection) ([]datasets.Task, []int, error) {
	if err := sel.Subsets.Check(); err != nil {
		return nil, nil, &SelectError{"subset", err.Error()}
	}
	if sel.Subset != "" && sel.Subset != datasets.SubsetTrain && sel.Subset != datasets.SubsetVal {
		return nil, nil, &SelectError{"subset", fmt.Sprintf("%q: want %s or %s", sel.Subset, datasets.SubsetTrain, datasets.SubsetVal)}
	}
	in := func(t *datasets.Task) bool { return sel.Subset == "" || sel.Subsets.Of(t.ID) == sel.Subset }
	var out []datasets.Task
	var idx []int
	if sel.TaskIDs == nil {
		for i := range tasks {
			if in(&tasks[i]) {
				out, idx = append(out, tasks[i]), append(idx, i)
			}
		}
		if len(out) == 0 {
			return nil, nil, &SelectError{"subset", fmt.Sprintf("none of the %d tasks served is in subset %s (validation fraction %g, seed %d)",
				len(tasks), sel.Subset, sel.Subsets.ValFraction, sel.Subsets.Seed)}
		}
		return out, idx, nil
	}
	if len(sel.TaskIDs) == 0 {
		return nil, nil, &SelectError{"task_ids", "empty: name at least one task, or leave task_ids out for every task"}
	}
	byID := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if _, dup := byID[t.ID]; !dup {
			byID[t.ID] = i
		}
	}
	var unknown, outside []string
	for _, id := range sel.TaskIDs {
		i, ok := byID[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case !in(&tasks[i]):
			outside = append(outside, id)
		default:
			out, idx = append(out, tasks[i]), append(idx, i)
		}
	}
	if len(unknown) > 0 {
		return nil, nil, &SelectError{"task_ids", fmt.Sprintf("unknown task ids %s: not among the %d tasks served", named(unknown), len(tasks))}
	}
	if len(outside) > 0 {
		return nil, nil, &SelectError{"task_ids", fmt.Sprintf("task ids %s are not in subset %s (validation fraction %g, seed %d)",
			named(outside), sel.Subset, sel.Subsets.ValFraction, sel.Subsets.Seed)}
	}
	return out, idx, nil
}

// named lists ids, quoted, the first maxNamed of them.
func named(ids []string) string {
	q := make([]string, 0, min(len(ids), maxNamed))
	for _, id := range ids[:min(len(ids), maxNamed)] {
		q = append(q, fmt.Sprintf("%q", id))
	}
	s := strings.Join(q, ", ")
	if len(ids) > maxNamed {
		s += fmt.Sprintf(" and %d more", len(ids)-maxNamed)
	}
	return s
}
