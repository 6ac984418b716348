package datasets

import "testing"

// TestGoldReference: only an episode on a server of a task with SQLite gold only has the
// SQLite reference.
func TestGoldReference(t *testing.T) {
	lite := Task{Gold: map[Dialect]string{SQLite: "SELECT 1"}}
	both := Task{Gold: map[Dialect]string{SQLite: "SELECT 1", Postgres: "SELECT 1"}}
	none := Task{}
	for _, c := range []struct {
		task Task
		d    Dialect
		ok   bool
	}{
		{lite, Postgres, true}, {lite, MySQL, true}, {lite, SQLite, false},
		{both, Postgres, false}, {both, MySQL, true}, {none, Postgres, false},
	} {
		if ref, ok := c.task.GoldReference(c.d); ok != c.ok || ok && ref != SQLite {
			t.Errorf("gold %v on %s: %q %v, want %v", c.task.Gold, c.d, ref, ok, c.ok)
		}
	}
}
