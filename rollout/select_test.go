package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
)

// TestSelect: every task by default; a subset keeps its tasks in their order, the two subsets
// partition the tasks as datasets.Subsets assigns them; task ids are played in the order given
// (twice: two groups) with their places among the tasks served; an unknown id, an id outside
// the subset, an empty list, a bad subset name and a subset without tasks are SelectErrors
// naming the field.
func TestSelect(t *testing.T) {
	var tasks []datasets.Task
	for i := range 40 {
		tasks = append(tasks, datasets.Task{ID: fmt.Sprintf("bird-train/%d", i)})
	}
	sub := datasets.Subsets{ValFraction: 0.3, Seed: 4}
	ids := func(ts []datasets.Task) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	all, idx, err := Select(tasks, Selection{Subsets: sub})
	if err != nil || len(all) != 40 || idx[39] != 39 {
		t.Fatalf("every task: %d, %v, %v", len(all), idx, err)
	}
	var seen []int
	for _, name := range []string{datasets.SubsetTrain, datasets.SubsetVal} {
		got, idx, err := Select(tasks, Selection{Subset: name, Subsets: sub})
		if err != nil || len(got) == 0 || len(got) == 40 {
			t.Fatalf("subset %s: %d tasks, %v", name, len(got), err)
		}
		for k, task := range got {
			if sub.Of(task.ID) != name || tasks[idx[k]].ID != task.ID || (k > 0 && idx[k] <= idx[k-1]) {
				t.Fatalf("subset %s: task %s at index %d", name, task.ID, idx[k])
			}
		}
		seen = append(seen, idx...)
	}
	slices.Sort(seen)
	if len(seen) != 40 || slices.Compact(seen)[39] != 39 {
		t.Fatalf("train and val together: %v", seen)
	}

	got, idx, err := Select(tasks, Selection{TaskIDs: []string{"bird-train/7", "bird-train/2", "bird-train/7"}, Subsets: sub})
	if err != nil || !slices.Equal(ids(got), []string{"bird-train/7", "bird-train/2", "bird-train/7"}) || !slices.Equal(idx, []int{7, 2, 7}) {
		t.Fatalf("task ids: %v %v %v", ids(got), idx, err)
	}
	var val, train string
	for _, task := range tasks {
		if sub.Of(task.ID) == datasets.SubsetVal && val == "" {
			val = task.ID
		} else if sub.Of(task.ID) == datasets.SubsetTrain && train == "" {
			train = task.ID
		}
	}
	if got, _, err := Select(tasks, Selection{TaskIDs: []string{val}, Subset: datasets.SubsetVal, Subsets: sub}); err != nil || len(got) != 1 {
		t.Fatalf("a val task in subset val: %v", err)
	}
	for _, c := range []struct {
		sel   Selection
		param string
		names []string
	}{
		{Selection{TaskIDs: []string{"bird-train/3", "nope/1", "bird-dev/9"}}, "task_ids", []string{`"nope/1"`, `"bird-dev/9"`, "40 tasks"}},
		{Selection{TaskIDs: []string{val, train}, Subset: datasets.SubsetVal}, "task_ids", []string{fmt.Sprintf("%q", train), "subset val"}},
		{Selection{TaskIDs: []string{}}, "task_ids", []string{"empty"}},
		{Selection{Subset: "test"}, "subset", []string{`"test"`, "train or val"}},
		{Selection{Subset: datasets.SubsetVal, Subsets: datasets.Subsets{ValFraction: 0}}, "subset", []string{"none of the 40 tasks"}},
	} {
		if c.sel.Subsets == (datasets.Subsets{}) && c.sel.Subset != datasets.SubsetVal {
			c.sel.Subsets = sub
		}
		_, _, err := Select(tasks, c.sel)
		var se *SelectError
		if !errors.As(err, &se) || se.Param != c.param {
			t.Errorf("%+v: %v, want a SelectError on %s", c.sel, err, c.param)
			continue
		}
		for _, n := range c.names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%+v: %q does not name %s", c.sel, err, n)
			}
		}
	}
	many := make([]string, 25)
	for i := range many {
		many[i] = fmt.Sprintf("x/%d", i)
	}
	if _, _, err := Select(tasks, Selection{TaskIDs: many, Subsets: sub}); err == nil || !strings.Contains(err.Error(), "and 15 more") {
		t.Errorf("25 unknown ids: %v", err)
	}
}
