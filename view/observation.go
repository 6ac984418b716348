package view

import (
	"regexp"
	"strings"

	"github.com/chainedsql/chainedsql/protocol"
)

// Observation is an observation turn read back into its parts, for display as a table.
type Observation struct {
	// Kind is "table", "empty", "error", "timeout", "refused", "format" (a format-violation
	// notice) or "text" (anything else, shown as it is).
	Kind    string     `json:"kind"`
	Columns []string   `json:"columns,omitempty"`
	Rows    [][]string `json:"rows,omitempty"`
	// Footer is the row-count line ("(3 rows)", "… 40 more rows (50 total)").
	Footer string `json:"footer,omitempty"`
	// Text is the observation's body (always set).
	Text string `json:"text"`
}

// notices are the observations that are one line of text, by their first words.
var notices = []struct{ prefix, kind string }{
	{"Error: ", "error"}, {"Timeout: ", "timeout"}, {"Refused: ", "refused"}, {"Format error: ", "format"},
}

var footerRE = regexp.MustCompile(`^(\(\d+ rows?\)|… \d+ more rows \(\d+ total\))$`)

// parseObservation reads an observation as protocol.RenderObservation writes it: a header
// line, rows with cells joined by " | ", a count line; or an empty-result, error, timeout,
// refusal or format notice. A table whose rows do not split into the header's number of
// cells (a cell holding " | ") is shown as text.
func parseObservation(s string) *Observation {
	body := strings.TrimSpace(s)
	body = strings.TrimPrefix(body, "<observation>")
	body = strings.TrimSuffix(body, "</observation>")
	body = strings.Trim(body, "\n")
	o := &Observation{Kind: "text", Text: body}
	switch {
	case body == "":
		return o
	case strings.HasPrefix(body, protocol.ObsEmpty):
		o.Kind = "empty"
		if _, cols, ok := strings.Cut(body, "\nColumns: "); ok {
			o.Columns = strings.Split(cols, " | ")
		}
		return o
	}
	for _, n := range notices {
		if strings.HasPrefix(body, n.prefix) {
			o.Kind = n.kind
			return o
		}
	}
	lines := strings.Split(body, "\n")
	if len(lines) < 2 || !footerRE.MatchString(lines[len(lines)-1]) {
		return o
	}
	cols := strings.Split(lines[0], " | ")
	var rows [][]string
	for _, l := range lines[1 : len(lines)-1] {
		cells := strings.Split(l, " | ")
		if len(cells) != len(cols) {
			return o
		}
		rows = append(rows, cells)
	}
	o.Kind, o.Columns, o.Rows, o.Footer = "table", cols, rows, lines[len(lines)-1]
	return o
}
