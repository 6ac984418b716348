package textcap

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	if got := Cut("short", 10); got != "short" {
		t.Fatalf("Cut kept %q", got)
	}
	long := strings.Repeat("é", 1000) // 2000 bytes, two per character
	for _, limit := range []int{40, 41, 100, 1001, 1999} {
		got := Cut(long, limit)
		if len(got) > limit {
			t.Errorf("limit %d: %d bytes", limit, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("limit %d: invalid UTF-8 %q", limit, got)
		}
		prefix, ok := strings.CutSuffix(got, " bytes]")
		i := strings.LastIndex(prefix, "…[truncated ")
		if !ok || i < 0 {
			t.Fatalf("limit %d: no marker in %q", limit, got)
		}
		kept := prefix[:i]
		if n := prefix[i+len("…[truncated "):]; n != strconv.Itoa(len(long)-len(kept)) {
			t.Errorf("limit %d: marker says %s bytes left out, %d were", limit, n, len(long)-len(kept))
		}
		if !strings.HasPrefix(long, kept) || len(kept) < limit-30 {
			t.Errorf("limit %d: kept %d bytes", limit, len(kept))
		}
	}
	if got := Cut(long, 3); got != "…[truncated 2000 bytes]" {
		t.Errorf("a limit below the marker: %q", got)
	}
}

// TestCutAgain: a text cut again (distill's encoder cuts a kept reply to a quarter, a
// failure's error is cut when written) keeps one marker whose N counts every byte left out of
// the text as it first came; before, the second marker counted only the second cut's bytes
// (a 1 MiB reply cut to 64 KiB said 196,634 bytes where 983,000 were left out).
func TestCutAgain(t *testing.T) {
	long := strings.Repeat("é", 5000) + "tail" // 10,004 bytes
	once := Cut(long, 4000)
	for _, limit := range []int{3999, 1000, 100, 30, 3} {
		got := Cut(once, limit)
		if len(got) > max(limit, len("…[truncated 10004 bytes]")) || !utf8.ValidString(got) {
			t.Errorf("limit %d: %d bytes, valid %v: %q", limit, len(got), utf8.ValidString(got), got)
		}
		if strings.Count(got, "…[truncated ") != 1 {
			t.Errorf("limit %d: %q has not one marker", limit, got)
			continue
		}
		i := strings.LastIndex(got, "…[truncated ")
		kept := got[:i]
		if want := "…[truncated " + strconv.Itoa(len(long)-len(kept)) + " bytes]"; got[i:] != want || !strings.HasPrefix(long, kept) {
			t.Errorf("limit %d: %q after %d bytes kept, want %q", limit, got[i:], len(kept), want)
		}
	}
	// A number past any text's length is the text's own, not a marker: it is cut as text.
	odd := strings.Repeat("a", 100) + "…[truncated 99999999999999999999 bytes]"
	if got, want := Cut(odd, 60), strings.Repeat("a", 36)+"…[truncated 105 bytes]"; got != want {
		t.Errorf("an overlong count: %q, want %q", got, want)
	}
}

func TestCutList(t *testing.T) {
	few := []string{"a", "b"}
	if got := CutList(few); &got[0] != &few[0] {
		t.Fatal("CutList copied a list within the limits")
	}
	many := make([]string, 5000)
	for i := range many {
		many[i] = strings.Repeat("c", 10)
	}
	many[0] = strings.Repeat("x", 1<<20)
	got := CutList(many)
	total := 0
	for _, n := range got[:len(got)-1] {
		if len(n) > Name {
			t.Fatalf("a name of %d bytes", len(n))
		}
		total += len(n)
	}
	if total > Names {
		t.Fatalf("%d bytes of names", total)
	}
	if last := got[len(got)-1]; last != "…["+strconv.Itoa(5000-(len(got)-1))+" more]" {
		t.Fatalf("last entry %q of %d", last, len(got))
	}
}

// TestValidAsJSON: Valid gives the text encoding/json writes for a string, so a text made valid
// before it is kept reads the same from a run dir as from where it was shown.
func TestValidAsJSON(t *testing.T) {
	for _, s := range []string{"", "ok é 😀", "\xff", "a\xffb\xfe", "\xe2\x82", "\xe2\x82\xac\xed\xa0\x80", "\xf0\x9f\x98", strings.Repeat("\xc3", 5) + "z"} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := Valid(s); got != back || !utf8.ValidString(got) {
			t.Errorf("Valid(%q) = %q, encoding/json %q", s, got, back)
		}
	}
}

// TestMarker: the marker a text ends in, as Cut reads it, is read off its last MaxMarker bytes
// alone (what a reader that keeps only a text's first bytes and its last ones has): Cut of the
// text before the marker, that many bytes longer, is Cut of the whole text.
func TestMarker(t *testing.T) {
	pad := strings.Repeat("é", 40)
	for _, s := range []string{
		pad + "…[truncated 7 bytes]", pad + "…[truncated 0 bytes]", pad + "…[truncated 1234567890123456 bytes]",
		pad + "…[truncated 12345678901234567 bytes]", pad + "…[truncated 9999999999999999 bytes]",
		pad + "…[truncated 7 bytes]x", pad + "…[truncated  bytes]", pad + "[truncated 7 bytes]", pad + "…[truncated 7…[truncated 8 bytes]",
		pad + "…[truncated …[truncated 8 bytes]", pad,
	} {
		size, n := Marker(s[max(0, len(s)-MaxMarker):])
		body, before := cutBefore(s)
		if size != len(s)-len(body) || n != before {
			t.Errorf("%q: marker of %d bytes, N %d; Cut reads %d, %d", s, size, n, len(s)-len(body), before)
		}
	}
}
