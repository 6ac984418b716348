package curate

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// TestMaskMatchesCounts checks Mask against the counts Build stores and against Verify's
// independent route (whole encoding, trainable tokens found from the ids alone).
func TestMaskMatchesCounts(t *testing.T) {
	tok := loadTokenizer(t)
	c, _ := newCounter(tok)
	sc, _ := newScanner(tok)
	s := newSynth(7)
	for i := 0; i < 40; i++ {
		tr := s.trajectory(i)
		r, err := Render(tr, ThinkAuto)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Mask(tok, r.Messages)
		if err != nil {
			t.Fatal(err)
		}
		text, spans := r.Text, r.Spans
		if m.Text != text || len(m.Spans) != len(spans) {
			t.Fatalf("trajectory %d: Mask renders %d bytes/%d spans, Build %d/%d", i, len(m.Text), len(m.Spans), len(text), len(spans))
		}
		n, trainable := c.count(text, spans)
		if len(m.Tokens) != n || m.Trainable != trainable {
			t.Fatalf("trajectory %d: Mask %d tokens (%d trainable), count %d (%d)", i, len(m.Tokens), m.Trainable, n, trainable)
		}
		ids := tok.Encode(text)
		st, _, problem := sc.trainable(ids)
		if problem != "" || st != m.Trainable || len(ids) != len(m.Tokens) {
			t.Fatalf("trajectory %d: scanner %d of %d (%q), Mask %d of %d", i, st, len(ids), problem, m.Trainable, len(m.Tokens))
		}
		// Tokens tile the text; each span's bytes lie inside trainable tokens of that span.
		pos := 0
		covered := make([]int, len(spans))
		for _, tk := range m.Tokens {
			if tk.Start != pos || tk.End <= tk.Start {
				t.Fatalf("trajectory %d: token [%d,%d) after %d", i, tk.Start, tk.End, pos)
			}
			pos = tk.End
			if tk.Span >= 0 {
				sp := spans[tk.Span]
				covered[tk.Span] += min(tk.End, sp.End) - max(tk.Start, sp.Start)
			}
		}
		if pos != len(text) {
			t.Fatalf("trajectory %d: tokens end at %d of %d", i, pos, len(text))
		}
		for k, sp := range spans {
			if covered[k] != sp.Len() {
				t.Errorf("trajectory %d span %d: %d of %d bytes in trainable tokens", i, k, covered[k], sp.Len())
			}
			if !strings.HasPrefix(text[sp.Start:sp.End], "\n") || !strings.HasSuffix(text[sp.Start:sp.End], chattmpl.ImEnd+"\n") {
				t.Errorf("span %d is not \"\\n\" + content + %s + \"\\n\"", k, chattmpl.ImEnd)
			}
		}
	}
}

func TestMaskRefusesWhatBuildExcludes(t *testing.T) {
	tok := loadTokenizer(t)
	bad := []chat.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "<|im_end|>"}}
	if _, err := Mask(tok, bad); err == nil || !strings.Contains(err.Error(), ReasonMarkerInContent) {
		t.Errorf("marker in content: %v", err)
	}
	if _, err := Mask(tok, []chat.Message{{Role: "robot", Content: "x"}}); err == nil || !strings.Contains(err.Error(), "robot") {
		t.Errorf("unknown role: %v", err)
	}
}
