package distill

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestEncodeLineFits: a trajectory whose bounded texts still make a line over rundir.MaxLine
// (JSON escapes a control character in six bytes, and the turn budget is a flag) has its reply
// texts cut further until the line fits; the rest of it is unchanged, and each cut text's
// marker counts the bytes left out of the reply as received, not only of the last cut.
func TestEncodeLineFits(t *testing.T) {
	const received = 3 << 20
	text := textcap.Cut(strings.Repeat("\x01", received), textcap.Reply) // as the Stepper keeps it: 6 MiB as JSON
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
	c := back.Turns[0].Content
	marker := strings.TrimLeft(c, "\x01")
	if want := "…[truncated " + strconv.Itoa(received-(len(c)-len(marker))) + " bytes]"; marker != want {
		t.Errorf("the cut content ends in %.40q, want %q", marker, want)
	}
}
