package teachers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// longText is a text of n bytes or a little more: mostly ASCII, with two-, three- and four-byte
// characters and white space throughout, so that a cut at any length can land inside a
// character.
func longText(n int, seed string) string {
	var b strings.Builder
	unit := seed + " é€🤔\n"
	for b.Len() < n {
		b.WriteString(unit)
		b.WriteString(strings.Repeat("x", b.Len()%97))
	}
	return b.String()
}

// asciiJSON is s as a JSON string with every character past ASCII escaped (\uXXXX, surrogate
// pairs for the rest), as ensure_ascii encoders write it.
func asciiJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r >= 0x80:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestReplyTextCutAsStored: a reply whose content or reasoning is longer than textcap.Reply is
// a reply, as it was before the reply was read as it arrives: each text comes back as the
// Stepper stored it then (textcap.Cut of the whole text at textcap.Reply, byte for byte), the
// finish reason and the endpoint's on_length policy (keep) apply, and it is not retried. Plain
// and streamed, in one piece and in many, as UTF-8 and escaped.
func TestReplyTextCutAsStored(t *testing.T) {
	const sql = "<sql>SELECT 1</sql>"
	for _, tc := range []struct {
		name          string
		field         string // the long text's field
		size          int
		stream        bool
		pieces        int
		escaped       bool
		finish        string
		wantReasoning string // the reasoning field the reply's reasoning comes from
	}{
		{name: "plain content", field: "content", size: maxReplyText + 1, finish: "length"},
		{name: "plain content escaped", field: "content", size: 3 << 20, escaped: true, finish: "stop"},
		{name: "plain reasoning_content", field: "reasoning_content", size: 2 << 20, finish: "length", wantReasoning: "reasoning_content"},
		{name: "plain reasoning escaped", field: "reasoning", size: maxReplyText + 7, escaped: true, finish: "length", wantReasoning: "reasoning"},
		{name: "stream content", field: "content", size: 2 << 20, stream: true, pieces: 1, finish: "length"},
		{name: "stream content in chunks", field: "content", size: maxReplyText + 3, stream: true, pieces: 300, finish: "stop"},
		{name: "stream reasoning_content in chunks", field: "reasoning_content", size: 3 << 20, stream: true, pieces: 700, escaped: true, finish: "length", wantReasoning: "reasoning_content"},
		{name: "stream reasoning", field: "reasoning", size: maxReplyText + 1, stream: true, pieces: 1, finish: "length", wantReasoning: "reasoning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := longText(tc.size, tc.name)
			content, reasoning := long, ""
			if tc.field != "content" {
				content, reasoning = sql, long
			}
			enc := func(s string) string {
				if tc.escaped {
					return asciiJSON(s)
				}
				b, _ := json.Marshal(s)
				return string(b)
			}
			srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
				if !tc.stream {
					w.Header().Set("Content-Type", "application/json")
					msg := `{"role":"assistant","content":` + enc(content)
					if reasoning != "" {
						msg += `,"` + tc.field + `":` + enc(reasoning)
					}
					fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"message":%s},"finish_reason":%q}]}`, msg, tc.finish)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				step := (len(long) + tc.pieces - 1) / tc.pieces
				for i := 0; i < len(long); {
					j := min(len(long), i+step)
					for j < len(long) && !utfStart(long[j]) {
						j++ // a delta holds whole characters
					}
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{%q:%s}}]}\n\n", tc.field, enc(long[i:j]))
					i = j
				}
				if tc.field != "content" {
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s}}]}\n\n", enc(sql))
				}
				fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%q}]}\n\ndata: [DONE]\n\n", tc.finish)
			})
			c := hostileClient(t, srv)
			c.ep.Stream = tc.stream
			c.ep.Timeout = 20 * time.Second
			rep, err := chatWithin(t, c, 30*time.Second)
			if err != nil {
				t.Fatalf("%v (stats %+v)", err, c.Stats())
			}
			if want := textcap.Cut(content, textcap.Reply); rep.Content != want {
				t.Errorf("content: %d bytes ending %q, want %d ending %q", len(rep.Content), tail(rep.Content), len(want), tail(want))
			}
			if want := textcap.Cut(reasoning, textcap.Reply); rep.Reasoning != want || rep.ReasoningSource != tc.wantReasoning {
				t.Errorf("reasoning from %q: %d bytes ending %q, want %q: %d ending %q", rep.ReasoningSource, len(rep.Reasoning),
					tail(rep.Reasoning), tc.wantReasoning, len(want), tail(want))
			}
			wantFinish := chat.FinishStop
			if tc.finish == "length" {
				wantFinish = chat.FinishLength
			}
			st := c.Stats()
			if rep.FinishReason != wantFinish || rep.Attempts != 1 || st.Retries != 0 {
				t.Errorf("finish %q after %d attempts (retries %v), want %q at once", rep.FinishReason, rep.Attempts, st.RetriesByReason, wantFinish)
			}
			if kept := st.Kept[ReasonLength]; (tc.finish == "length") != (kept == 1) {
				t.Errorf("kept by on_length: %d", kept)
			}
		})
	}
}

func utfStart(b byte) bool { return b&0xC0 != 0x80 }

func tail(s string) string { return s[max(0, len(s)-40):] }

// TestReplyBlankTextCut: a text over textcap.Reply that is all white space is blank, as the
// whole text was before the client cut it: content of 1.5 MiB of white space is empty content
// (on_empty: retried by default, kept and counted under keep, kept as the Stepper cut it), and
// a reasoning field of white space is passed over for the next field of the profile's order,
// though what is kept of either ends in the (non-blank) marker.
func TestReplyBlankTextCut(t *testing.T) {
	blank := strings.Repeat(" \n\t\u3000\u00a0\u2028", maxReplyText/8)
	for _, keep := range []bool{false, true} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			w.Header().Set("Content-Type", "application/json")
			b, _ := json.Marshal(blank)
			fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"message":{"content":%s},"finish_reason":"stop"}]}`, b)
		})
		c := hostileClient(t, srv)
		if keep {
			c.ep.OnEmpty = OnKeep
		}
		rep, err := chatWithin(t, c, 30*time.Second)
		switch {
		case !keep && (Reason(err) != ReasonEmpty || c.Stats().RetriesByReason[ReasonEmpty] != 2):
			t.Errorf("blank content, on_empty retry: %v (retries %v), want %s after 2 retries", err, c.Stats().RetriesByReason, ReasonEmpty)
		case keep && (err != nil || rep.Content != textcap.Cut(blank, textcap.Reply) || c.Stats().Kept[ReasonEmpty] != 1):
			t.Errorf("blank content, on_empty keep: %v, %d bytes, kept %v", err, len(rep.Content), c.Stats().Kept)
		}
	}
	srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
		w.Header().Set("Content-Type", "text/event-stream")
		b, _ := json.Marshal(blank)
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":%s}}]}\n\n", b)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"r\",\"content\":\"<sql>SELECT 1</sql>\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	c := hostileClient(t, srv)
	c.ep.Stream = true
	rep, err := chatWithin(t, c, 30*time.Second)
	if err != nil || rep.Reasoning != "r" || rep.ReasoningSource != "reasoning" {
		t.Errorf("blank reasoning_content, then reasoning: %v, %d bytes from %q", err, len(rep.Reasoning), rep.ReasoningSource)
	}
}

// TestReplyManyLongTexts: a completion or chunk carrying every text of a reply long (content,
// reasoning_content, reasoning and reasoning_details in one, as OpenRouter and vLLM send them;
// two details, which the reply joins into one text) is a reply: each text comes back as the
// Stepper stored it (textcap.Cut of the whole text at textcap.Reply), plain and streamed, 1 MiB
// and 2 MiB each, in JSON past the 4 MiB a completion kept before. Before, four texts of 1 MiB
// failed as too_long (their keys past the 4 MiB), and so did five.
func TestReplyManyLongTexts(t *testing.T) {
	for _, size := range []int{maxReplyText, 2 << 20} {
		for _, details := range []int{1, 2} {
			for _, stream := range []bool{false, true} {
				texts := make([]string, 3+details)
				enc := make([]string, len(texts))
				for i := range texts {
					texts[i] = longText(size, fmt.Sprintf("text %d", i))
					b, _ := json.Marshal(texts[i])
					enc[i] = string(b)
				}
				var ds []string
				for _, e := range enc[3:] {
					ds = append(ds, `{"type":"reasoning.text","text":`+e+`,"format":"unknown","index":0}`)
				}
				msg := `{"role":"assistant","content":` + enc[0] + `,"reasoning_content":` + enc[1] + `,"reasoning":` + enc[2] +
					`,"reasoning_details":[` + strings.Join(ds, ",") + `]}`
				var body string
				h := http.Header{"Content-Type": {"application/json"}}
				if stream {
					h.Set("Content-Type", "text/event-stream")
					body = `data: {"model":"m","choices":[{"index":0,"delta":` + msg + `,"finish_reason":null}]}` + "\n\n" +
						`data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\ndata: [DONE]\n\n"
				} else {
					body = `{"model":"m","choices":[{"index":0,"message":` + msg + `,"finish_reason":"length"}]}`
				}
				a := assembly{limit: maxReplyText}
				err := readStream(h, strings.NewReader(body), &capture{status: 200}, &a)
				name := fmt.Sprintf("%d texts of %d bytes (stream %v, %d bytes of JSON)", len(texts), size, stream, len(body))
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				got := []string{a.content.String(), a.reasoning[0].String(), a.reasoning[1].String(), a.reasoning[2].String()}
				want := []string{texts[0], texts[1], texts[2], strings.Join(texts[3:], "")}
				for i := range want {
					if w := textcap.Cut(want[i], textcap.Reply); got[i] != w {
						t.Errorf("%s: text %d is %d bytes ending %q, want %d ending %q", name, i, len(got[i]), tail(got[i]), len(w), tail(w))
					}
				}
			}
		}
	}
}

// readBothWays reads body as a plain completion and, its "message" members as "delta", as a
// one-chunk stream, each text cut at maxReplyText, and calls check with each assembly.
func readBothWays(body string, check func(stream bool, a *assembly, err error)) {
	for _, stream := range []bool{false, true} {
		b, h := body, http.Header{"Content-Type": {"application/json"}}
		if stream {
			b, h = "data: "+strings.ReplaceAll(body, `"message"`, `"delta"`)+"\n\ndata: [DONE]\n\n", http.Header{"Content-Type": {"text/event-stream"}}
		}
		a := assembly{limit: maxReplyText}
		err := readStream(h, strings.NewReader(b), &capture{status: 200}, &a)
		check(stream, &a, err)
	}
}

// TestReplyTextRoomGivenBack: the strings a reply does not read never take the room of the
// ones it reads (each keeps its own first bytes), and a value that replaces one gives its room
// back at once: a member repeated in its object (the last one is read, as encoding/json reads
// it), a choice whose index is not 0, its index after its texts, a message before a delta, a
// delta merged into the one before it, the strings of a reasoning object or a
// reasoning_details entry but the one the reply reads (reasoning's text before its content, a
// detail's type after its texts). Each reply comes back as read whole, its texts cut as the
// Stepper cut them; when the strings shared their text's room, the string read kept nothing
// and the attempt failed as too long.
func TestReplyTextRoomGivenBack(t *testing.T) {
	a, b := longText(2<<20, "a"), longText(2<<20, "b")
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	for _, tc := range []struct{ name, body, content, reasoning string }{
		{"repeated content", `{"model":"m","choices":[{"index":0,"message":{"content":` + string(ja) + `,"reasoning_content":"r","Content":` + string(jb) + `}}]}`, b, "r"},
		{"repeated reasoning", `{"model":"m","choices":[{"index":0,"message":{"content":"c","reasoning":` + string(ja) + `,"reasoning":` + string(jb) + `}}]}`, "c", b},
		{"choice 1 first", `{"model":"m","choices":[{"message":{"content":` + string(ja) + `,"reasoning":` + string(ja) + `},"index":1},{"index":0,"message":{"content":` + string(jb) + `,"reasoning":"r"}}]}`, b, "r"},
		{"message before delta", `{"model":"m","choices":[{"index":0,"message":{"content":` + string(ja) + `},"delta":{"content":` + string(jb) + `,"reasoning":"r"}}]}`, b, "r"},
		{"delta merged into the one before it", `{"model":"m","choices":[{"index":0,"delta":{"content":` + string(ja) + `,"reasoning":` + string(jb) + `},"delta":{"content":` + string(jb) + `}}]}`, b, b},
		{"delta null, then message", `{"model":"m","choices":[{"index":0,"delta":{"content":` + string(ja) + `},"delta":null,"message":{"content":` + string(jb) + `,"reasoning":"r"}}]}`, b, "r"},
		{"reasoning's content before its text", `{"model":"m","choices":[{"index":0,"message":{"content":"c","reasoning":{"content":` + string(ja) + `,"summary":` + string(ja) + `,"text":` + string(jb) + `}}}]}`, "c", b},
		{"detail's summary before its text", `{"model":"m","choices":[{"index":0,"message":{"content":"c","reasoning_details":[{"summary":` + string(ja) + `,"text":` + string(jb) + `,"type":"reasoning.text"},{"text":` + string(ja) + `,"type":"reasoning.summary","summary":"s"}]}}]}`, "c", b + "s"},
		{"detail's text repeated past its summary", `{"model":"m","choices":[{"index":0,"message":{"content":"c","reasoning_details":[{"type":"reasoning.text","text":` + string(ja) + `,"summary":` + string(ja) + `,"text":` + string(jb) + `}]}}]}`, "c", b},
	} {
		readBothWays(tc.body, func(stream bool, as *assembly, err error) {
			reasoning, _ := as.pickReasoning(fieldOrder)
			if want := textcap.Cut(tc.content, textcap.Reply); err != nil || as.content.String() != want || reasoning != textcap.Cut(tc.reasoning, textcap.Reply) {
				t.Errorf("%s (stream %v): %v; content %d bytes ending %q, want %d ending %q; reasoning %d bytes", tc.name, stream, err,
					len(as.content.String()), tail(as.content.String()), len(want), tail(want), len(reasoning))
			}
		})
	}
}

// TestReplyRepeatedValuesBounded: values that replace the ones before them (a delta merged into
// the one before it and its content, a reasoning, a detail's text past a null) give back the
// room of those at once, so a choice's texts hold a few times the limit each, not the limit for
// every string the reply may read: 32 repeats of a limit-long string held 32 times the limit.
// The texts come back as read whole.
func TestReplyRepeatedValuesBounded(t *testing.T) {
	const limit, repeats = 16 << 10, 32
	a := `"` + strings.Repeat("a", limit) + `"`
	var b strings.Builder
	b.WriteString(`{"model":"m","choices":[{"index":0`)
	for range repeats {
		b.WriteString(`,"delta":{"content":` + a + `,"reasoning":{"text":` + a + `,"content":` + a + `}}`)
	}
	b.WriteString(`,"delta":{"reasoning_details":[{"type":"reasoning.text"`)
	for range repeats {
		b.WriteString(`,"text":` + a + `,"text":null`)
	}
	b.WriteString(`}]}}]}`)
	body := b.String()
	d := reducer{s: newSrc(strings.NewReader(body), int64(len(body)), false), out: []byte{}, limit: limit}
	if err := d.reduce(completionShape); err != nil {
		t.Fatal(err)
	}
	for out, h := range d.heads {
		if cap(h) > 8*limit {
			t.Errorf("text %d: %d bytes held for a %d-byte limit", out, cap(h), limit)
		}
	}
	compareReads(t, "", []byte(body))
}

// TestReplyRepeatedLists: a completion or chunk that repeats its "choices", or a message its
// "reasoning_details", reads as encoding/json reads it whole: each element of the later list
// is merged into the one at its index in the list before it (its members replace those they
// name, the others stay), and the list is as long as the later one. Texts of 2 MiB come back
// as the Stepper stored them, plain and streamed. Before, the later list's strings found
// their text's room taken by the earlier list's and the attempt failed as too_long.
func TestReplyRepeatedLists(t *testing.T) {
	a, b, c := longText(2<<20, "a"), longText(2<<20, "b"), longText(2<<20, "c")
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	choice := func(msg string) string { return `{"index":0,"message":` + msg + `}` }
	detail := func(typ, text string) string { return `{"type":"` + typ + `","text":` + q(text) + `}` }
	for _, tc := range []struct{ name, body, content, details string }{
		{"choices repeated", `{"model":"m","choices":[` + choice(`{"content":`+q(a)+`}`) + `],"choices":[` + choice(`{"content":`+q(b)+`}`) + `]}`, b, ""},
		{"choices repeated, merged", `{"model":"m","choices":[` + choice(`{"content":`+q(a)+`,"reasoning_details":[`+detail("reasoning.text", c)+`]}`) + `],"choices":[{"message":{"content":` + q(b) + `}}]}`, b, c},
		{"choices repeated, shorter", `{"model":"m","choices":[` + choice(`{"content":`+q(a)+`}`) + `,` + choice(`{"content":`+q(c)+`}`) + `],"Choices":[` + choice(`{"content":`+q(b)+`}`) + `]}`, b, ""},
		{"choices repeated, longer", `{"model":"m","choices":[` + choice(`{"content":`+q(a)+`}`) + `],"choices":[{"index":1},` + choice(`{"content":`+q(b)+`}`) + `]}`, b, ""},
		{"choices repeated, index 0 later", `{"model":"m","choices":[{"index":1,"message":{"content":` + q(a) + `}}],"choices":[{"index":0}]}`, a, ""},
		{"reasoning_details repeated", `{"model":"m","choices":[` + choice(`{"content":"x","reasoning_details":[`+detail("reasoning.text", a)+`],"reasoning_details":[`+detail("reasoning.text", b)+`]}`) + `]}`, "x", b},
		{"reasoning_details repeated, type kept", `{"model":"m","choices":[` + choice(`{"content":"x","reasoning_details":[`+detail("reasoning.text", a)+`],"reasoning_details":[{"text":`+q(b)+`}]}`) + `]}`, "x", b},
		{"reasoning_details repeated, type after", `{"model":"m","choices":[` + choice(`{"content":"x","reasoning_details":[{"text":`+q(a)+`}],"reasoning_details":[{"type":"reasoning.text"}]}`) + `]}`, "x", a},
	} {
		readBothWays(tc.body, func(stream bool, as *assembly, err error) {
			want := textcap.Cut(tc.content, textcap.Reply)
			wantDetails := textcap.Cut(tc.details, textcap.Reply)
			if err != nil || as.content.String() != want || as.reasoning[2].String() != wantDetails {
				t.Errorf("%s (stream %v): %v; content %d bytes ending %q, want %d ending %q; details %d bytes, want %d", tc.name, stream, err,
					len(as.content.String()), tail(as.content.String()), len(want), tail(want), len(as.reasoning[2].String()), len(wantDetails))
			}
		})
	}
}

// TestReplyRepeatedListsBound pins what a completion or chunk may hold of its texts (scan.go):
// each string under a text shape keeps its own first maxReplyText bytes, and what the strings
// of one text hold past maxReplyText counts toward maxUnit with the JSON. A repeated "choices"
// is merged into the list before it as encoding/json merges it, and the earlier list's strings
// stay held (encoding/json reuses its elements, even past a shorter later list's end: a longer
// list after it reads them again): four lists of a 1 MiB content are read, the last one's
// content kept; five hold 4 MiB past the limit, with the JSON over maxUnit, and fail as
// too_long. No provider sends that: a reply is one "choices" list, and one text of a real
// reply is one string (reasoning_details a few entries), so its texts hold no more than
// maxReplyText each however long they are.
func TestReplyRepeatedListsBound(t *testing.T) {
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	for _, lists := range []int{4, 5} {
		var body strings.Builder
		body.WriteString(`{"model":"m"`)
		var last string
		for i := range lists {
			last = longText(maxReplyText, fmt.Sprintf("list %d", i))
			body.WriteString(`,"choices":[{"index":0,"message":{"content":` + q(last) + `}}]`)
		}
		body.WriteString(`}`)
		readBothWays(body.String(), func(stream bool, a *assembly, err error) {
			var tl *tooLongError
			switch {
			case lists < 5 && (err != nil || a.content.String() != textcap.Cut(last, textcap.Reply)):
				t.Errorf("%d lists (stream %v): %v; content %d bytes ending %q", lists, stream, err, len(a.content.String()), tail(a.content.String()))
			case lists >= 5 && !errors.As(err, &tl):
				t.Errorf("%d lists (stream %v): %v, want too long", lists, stream, err)
			}
		})
	}
	// The element past the shorter list's end is read again by the longer list after it.
	r := longText(2<<20, "kept past the end")
	body := `{"model":"m","choices":[{"index":1},{"index":1,"message":{"content":"a","reasoning_content":` + q(r) + `}}],` +
		`"choices":[{"index":1}],"choices":[{"index":1},{"index":0,"message":{"content":"c"}}]}`
	readBothWays(body, func(stream bool, a *assembly, err error) {
		if err != nil || a.content.String() != "c" || a.reasoning[0].String() != textcap.Cut(r, textcap.Reply) {
			t.Errorf("list after a shorter one (stream %v): %v; content %q, reasoning %d bytes", stream, err, a.content.String(), len(a.reasoning[0].String()))
		}
	})
}

// TestReplyNamesHeldCut: a reply's model id and finish reason are kept cut at textcap.Name as
// they are folded, as the Stepper keeps them (it cuts them again to the same bytes), so a
// stream holds 256 bytes of each between its chunks, outside the reply budget (its chunks'
// room is given back once folded), not what a chunk sent: up to the 4 MiB a chunk keeps, held
// until the stream ends. Plain and streamed.
func TestReplyNamesHeldCut(t *testing.T) {
	model, finish := longText(3<<19, "model"), longText(3<<19, "finish")
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	body := `{"model":` + q(model) + `,"choices":[{"index":0,"message":{"content":"a"},"finish_reason":` + q(finish) + `}]}`
	readBothWays(body, func(stream bool, a *assembly, err error) {
		if err != nil || a.model != textcap.Cut(model, textcap.Name) || a.finish != textcap.Cut(finish, textcap.Name) {
			t.Errorf("stream %v: %v; model held %d bytes, finish reason %d, want them cut at %d", stream, err, len(a.model), len(a.finish), textcap.Name)
		}
	})
}
