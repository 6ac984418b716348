package teachers

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Generated replies for TestReduceMatchesGenerated: JSON built from the names of the shapes
// (and a few no shape names), each name written as encoding/json still matches it (any case,
// escaped, a letter's Unicode fold: the Kelvin sign, the long s) or as it no longer does (the
// dotted and dotless i), values of every kind at every member, JSON white space between
// tokens, event streams with comments, blank lines and CRLF, and now and then one byte
// broken. Byte mutation (FuzzReduceMatchesWholeRead) seldom writes a whole matching name.

// genNames are the member names the generator writes.
var genNames = []string{"id", "object", "created", "model", "system_fingerprint", "choices", "usage", "error",
	"index", "message", "delta", "finish_reason", "logprobs", "role", "content", "reasoning_content", "reasoning",
	"reasoning_details", "type", "text", "summary", "format", "prompt_tokens", "completion_tokens", "total_tokens",
	"completion_tokens_details", "prompt_tokens_details", "reasoning_tokens", "cached_tokens",
	"prompt_cache_hit_tokens", "cost", "is_byok", "cost_details", "upstream_inference_cost", "x", "tool_calls",
	"error", "message", "choices", "content"} // the ones that matter most, again

// genScalars are the scalar values the generator writes, with empty containers.
var genScalars = []string{`"a"`, `""`, `"reasoning.text"`, `"reasoning.summary"`, `"stop"`, `"length"`, `"error"`,
	`null`, `true`, `false`, `0`, `1`, `-1`, `1.5`, `1e2`, `-0`, `2e-3`, `1E+2`, `99999999999999999999`,
	`"\ud83e\udd14"`, `"\ud800"`, `"x\"y"`, `"\u0041"`, "\"\xff\"", `"é"`, `[]`, `{}`}

type replyGen struct{ r *rand.Rand }

// key writes a member name.
func (g replyGen) key() string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range genNames[g.r.IntN(len(genNames))] {
		switch g.r.IntN(12) {
		case 0:
			fmt.Fprintf(&b, `\u%04x`, c)
		case 1:
			fmt.Fprintf(&b, `\u%04X`, strings.ToUpper(string(c))[0])
		case 2:
			b.WriteString(strings.ToUpper(string(c)))
		case 3:
			b.WriteString(map[rune]string{'k': "\u212a", 's': "\u017f", 'i': "\u0130", 'e': "\u0131"}[c])
			if !strings.ContainsRune("kesi", c) {
				b.WriteRune(c)
			}
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ws writes JSON white space; in an event stream's line, no newline.
func (g replyGen) ws(line bool) string {
	ws := " \t\r\n"
	if line {
		ws = " \t\r"
	}
	var b strings.Builder
	for g.r.IntN(3) == 0 {
		b.WriteByte(ws[g.r.IntN(len(ws))])
	}
	return b.String()
}

// value writes a value depth containers deep.
func (g replyGen) value(depth int, line bool) string {
	kind := g.r.IntN(4)
	if depth == 0 && g.r.IntN(4) != 0 {
		kind = 0 // most replies are objects
	}
	if depth > 6 || kind > 1 {
		return genScalars[g.r.IntN(len(genScalars))]
	}
	open, end := "{", "}"
	if kind == 1 {
		open, end = "[", "]"
	}
	var b strings.Builder
	b.WriteString(open + g.ws(line))
	for i := range g.r.IntN(5) {
		if i > 0 {
			b.WriteString("," + g.ws(line))
		}
		if kind == 0 {
			b.WriteString(g.key() + g.ws(line) + ":" + g.ws(line))
		}
		b.WriteString(g.value(depth+1, line) + g.ws(line))
	}
	return b.String() + end
}

// stream writes an event stream of a few data lines.
func (g replyGen) stream() string {
	var b strings.Builder
	for range 1 + g.r.IntN(4) {
		b.WriteString([]string{"", "", "", ": keep-alive\n", "\n", "event: message\n"}[g.r.IntN(6)])
		b.WriteString("data:" + g.ws(true) + g.value(0, true) + g.ws(true) + []string{"\n", "\r\n", "\n\n", "\r\n\r\n"}[g.r.IntN(4)])
	}
	if g.r.IntN(2) == 0 {
		b.WriteString("data: [DONE]\n")
	}
	return b.String()
}

// breakByte replaces, inserts or deletes one byte of s, one time in eight.
func (g replyGen) breakByte(s string) string {
	if g.r.IntN(8) != 0 || s == "" {
		return s
	}
	i, c := g.r.IntN(len(s)), string("{}[],:\"\\ \nx0-e."[g.r.IntN(15)])
	switch g.r.IntN(3) {
	case 0:
		return s[:i] + c + s[i+1:]
	case 1:
		return s[:i] + c + s[i:]
	}
	return s[:i] + s[i+1:]
}

// members writes an object of the members some of fields write, now and then one of them
// again (encoding/json reads the last, merged into the one before it where both are objects
// or lists of objects), in any order.
func (g replyGen) members(fields map[string]func() string) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	var parts []string
	for range g.r.IntN(len(names) + 3) {
		name := names[g.r.IntN(len(names))]
		parts = append(parts, `"`+name+`":`+fields[name]())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// list writes a list of up to three elems, or null, or an empty list.
func (g replyGen) list(elem func() string) string {
	switch g.r.IntN(8) {
	case 0:
		return "null"
	case 1:
		return "[]"
	}
	var parts []string
	for range 1 + g.r.IntN(3) {
		parts = append(parts, elem())
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// textValue writes a text of up to 30 characters (white space, ASCII, two- to four-byte
// characters, escapes), now and then null.
func (g replyGen) textValue() string {
	if g.r.IntN(10) == 0 {
		return "null"
	}
	var b strings.Builder
	b.WriteByte('"')
	for range g.r.IntN(31) {
		b.WriteString([]string{"a", "b", "x", " ", `\n`, "é", "€", "🤔", `\u00e9`, `\ud83e\udd14`}[g.r.IntN(10)])
	}
	b.WriteByte('"')
	return b.String()
}

// reply writes a completion or chunk whose members the client reads, each of them now and
// then again: choices (indexes 0 and 1, message and delta, null), texts of every field, a
// reasoning object, reasoning_details entries of each type; so repeated keys, lists merged
// element by element into the ones before them and texts cut by the limit meet.
func (g replyGen) reply() string {
	pick := func(vs ...string) func() string { return func() string { return vs[g.r.IntN(len(vs))] } }
	detail := func() string {
		return g.members(map[string]func() string{"type": pick(`"reasoning.text"`, `"reasoning.summary"`, `"reasoning.encrypted"`, "null"),
			"text": g.textValue, "summary": g.textValue})
	}
	message := func() string {
		if g.r.IntN(8) == 0 {
			return "null"
		}
		return g.members(map[string]func() string{"content": g.textValue, "reasoning_content": g.textValue,
			"reasoning": func() string {
				if g.r.IntN(2) == 0 {
					return g.textValue()
				}
				return g.members(map[string]func() string{"text": g.textValue, "content": g.textValue, "summary": g.textValue})
			},
			"reasoning_details": func() string { return g.list(detail) }})
	}
	choice := func() string {
		return g.members(map[string]func() string{"index": pick("0", "0", "1", "null"), "message": message, "delta": message,
			"finish_reason": pick(`"stop"`, `"length"`, "null")})
	}
	return g.members(map[string]func() string{"model": pick(`"m"`), "choices": func() string { return g.list(choice) }})
}

// TestReduceMatchesGenerated: generated replies (see replyGen), plain and streamed, read
// reduced as they read whole (compareReads). It found providerError looking for the error
// member by its text, which a reduced body lacks where the text was in a dropped member, and
// (replyGen.reply) a repeated "choices" or "reasoning_details" failing as too long where
// encoding/json merges it into the one before it.
func TestReduceMatchesGenerated(t *testing.T) {
	n := 20000 // the providerError difference showed at the 14,804th
	if testing.Short() || raceEnabled {
		n = 2000
	}
	g := replyGen{rand.New(rand.NewPCG(1, 2))}
	for i := range n {
		switch g.r.IntN(4) {
		case 0:
			compareReads(t, "", []byte(g.breakByte(g.ws(false)+g.value(0, false)+g.ws(false))))
		case 1:
			compareReads(t, "text/event-stream", []byte(g.breakByte(g.stream())))
		case 2:
			compareReads(t, "", []byte(g.reply()))
		default:
			compareReads(t, "text/event-stream", []byte("data: "+g.reply()+"\n\ndata: "+g.reply()+"\n\ndata: [DONE]\n\n"))
		}
		if t.Failed() {
			t.Logf("generated reply %d", i)
			return
		}
	}
}
