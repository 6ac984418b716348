package distill

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/rundir"
)

// TestEncodeLineFits: a trajectory whose bounded texts still make a line over rundir.MaxLine
// (JSON escapes a control character in six bytes, and the turn budget is a flag) has its reply
// texts cut further until the line fits; the rest of it is unchanged.
func TestEncodeLineFits(t *testing.T) {
	text := strings.Repeat("\x01", 1<<20) // 6 MiB as JSON
	tr := &rundir.Trajectory{Key: "k", Question: "q", FinalSQL: "SELECT 1"}
	for i := range 6 {
		tr.Turns = append(tr.Turns, rundir.Turn{Index: i + 1, Content: text, Reasoning: text, SQL: "SELECT 1"})
	}
	if whole, _ := json.Marshal(tr); len(whole) <= rundir.MaxLine {
		t.Fatalf("the test's trajectory is only %d bytes", len(whole))
	}
	line, err := encodeLine(tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(line)+1 > rundir.MaxLine {
		t.Fatalf("a line of %d bytes", len(line))
	}
	var back rundir.Trajectory
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Turns) != 6 || back.FinalSQL != "SELECT 1" || back.Turns[5].SQL != "SELECT 1" ||
		!strings.HasSuffix(back.Turns[0].Content, " bytes]") || len(back.Turns[0].Content) > 1<<20/4 {
		t.Fatalf("the line read back: %d turns, final %q, first content %d bytes", len(back.Turns), back.FinalSQL, len(back.Turns[0].Content))
	}
}
