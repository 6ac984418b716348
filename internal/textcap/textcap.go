// Package textcap bounds the texts that come from a database or a model (error messages, reply
// contents and reasoning, statements, column names) before they are stored or returned: a
// PostgreSQL error echoes the value that failed a cast, so one statement's error can be
// hundreds of megabytes, and a reply is whatever its sender chose to send. The limits are
// here, in one place (docs/DESIGN.md, "Bounded texts"); Cut applies them.
package textcap

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits in bytes. A text cut by Cut is at most its limit long, the marker included.
const (
	// Error bounds an error text kept or returned: a statement's (the engine's message, a
	// refusal's reason), the gold's, a failure's.
	Error = 16 << 10
	// Reply bounds each text of a reply kept in a trajectory (its content, its separate
	// reasoning) by distill and student eval: far above what a teacher's token limit lets it
	// write, so training data is never cut.
	Reply = 1 << 20
	// EnvReply bounds each text of a reply an RL episode keeps (distill env serve): the
	// environment parses the whole reply, then keeps this much of it for GET /v1/episodes.
	EnvReply = 64 << 10
	// SQL bounds a statement that is executed: a longer one is refused unrun (far above any
	// benchmark's gold SQL), so every statement kept as a turn's or the final SQL ran whole.
	SQL = 64 << 10
	// Name bounds one name kept in a record: a result's column name, a provider's finish
	// reason or model id; Names bounds all of a result's names together (SQLite takes an alias
	// of any length, and a statement may have thousands of columns).
	Name  = 256
	Names = 16 << 10
)

// A cut text ends in markerHead, the number of bytes left out, markerTail.
const markerHead, markerTail = "…[truncated ", " bytes]"

// Cut returns s when it is at most limit bytes long; otherwise its longest prefix that, followed
// by the marker "…[truncated N bytes]" (N the bytes left out), is at most limit bytes long,
// ending on a UTF-8 character boundary, with the marker. A text cut before (s ends in a
// marker) is cut again with one marker, whose N adds the earlier marker's: the bytes left out
// of the text as it first came. A cut text is a new string (it does not keep s's memory
// alive). A limit shorter than the marker gives the marker alone.
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	body, before := cutBefore(s)
	// The marker's length depends on N: reserve room for the longest (nothing kept); the N
	// of the prefix kept is no longer. keep stays inside body: the new marker is at least as
	// long as the old one.
	keep := max(limit-markerLen(len(body)+before), 0)
	for keep > 0 && !utf8.RuneStart(body[keep]) {
		keep--
	}
	n := len(body) - keep + before
	buf := make([]byte, 0, keep+markerLen(n))
	buf = append(buf, body[:keep]...)
	buf = append(buf, markerHead...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, markerTail...)
	return string(buf)
}

// maxMarked is the largest N read back from a marker (a petabyte): a longer number is a
// text's own, and summing it could overflow.
const maxMarked = 1 << 50

// cutBefore splits a text that ends in a marker into the text before it and the marker's N;
// any other text is all body, with N 0.
func cutBefore(s string) (body string, n int) {
	head, ok := strings.CutSuffix(s, markerTail)
	if !ok {
		return s, 0
	}
	i := strings.LastIndex(head, markerHead)
	if i < 0 {
		return s, 0
	}
	digits := head[i+len(markerHead):]
	if len(digits) == 0 || len(digits) > 16 || strings.Trim(digits, "0123456789") != "" {
		return s, 0
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > maxMarked {
		return s, 0
	}
	return head[:i], n
}

// MaxMarker is the length of the longest marker Cut reads back from the end of a text (its N
// of 16 digits): whether a text ends in a marker, and which, depends on its last MaxMarker
// bytes only.
const MaxMarker = len(markerHead) + 16 + len(markerTail)

// Marker reports the marker that tail, the end of a text (its last MaxMarker bytes or all of
// it), ends in as Cut reads it: its length in bytes and its N; size 0 when it ends in none. Cut
// cuts such a text as if it were the text before the marker, N bytes longer.
func Marker(tail string) (size, n int) {
	body, n := cutBefore(tail)
	return len(tail) - len(body), n
}

// markerLen is the length of the marker for n bytes left out.
func markerLen(n int) int {
	return len(markerHead) + len(strconv.Itoa(n)) + len(markerTail)
}

// CutList cuts each of names to Name bytes and keeps them while their total is at most Names
// bytes; when some are left out, a last entry "…[N more]" counts them. It returns names itself
// when nothing is cut.
func CutList(names []string) []string {
	total, ok := 0, true
	for _, n := range names {
		total += len(n)
		if len(n) > Name || total > Names {
			ok = false
			break
		}
	}
	if ok {
		return names
	}
	out := make([]string, 0, min(len(names), Names/8))
	total = 0
	for i, n := range names {
		n = Cut(n, Name)
		if total+len(n) > Names {
			out = append(out, "…["+strconv.Itoa(len(names)-i)+" more]")
			break
		}
		total += len(n)
		out = append(out, n)
	}
	return out
}

// Valid returns s with each byte that is not part of a UTF-8 character replaced by U+FFFD, as
// encoding/json writes such a string: a text from a database (SQLite keeps any bytes as TEXT)
// then reads the same wherever it is kept, in JSON, in Parquet or as token ids. A valid s is
// returned as it is.
func Valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
