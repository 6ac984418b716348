package teachers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// hugeReply is a reply near maxResponseBytes, written as it is generated (the server holds no
// copy of it, so the heap the test measures is the client's): head, then fill repeated until
// the body is about size bytes, then tail.
type hugeReply struct {
	name       string
	stream     bool
	head, tail string
	fill       string
	// The reply Chat returns: its content (or its reasoning, field "reasoning") is huge, huge
	// times the fill's count then after, textcap.Cut at textcap.Reply; its other text is sql
	// (reasoning: none).
	field, huge, after string
}

const sql1 = "<sql>SELECT 1</sql>"

// want is the reply's content and reasoning when it is about size bytes, as the Stepper keeps
// them (textcap.Cut at textcap.Reply).
func (h hugeReply) want(size int) (content, reasoning string) {
	text := ""
	if h.huge != "" {
		text = strings.Repeat(h.huge, (size-len(h.head)-len(h.tail))/len(h.fill))
	}
	text = textcap.Cut(text+h.after, textcap.Reply)
	if h.field == "reasoning" {
		return sql1, text
	}
	return text, ""
}

// write sends the reply on w within size bytes.
func (h hugeReply) write(w io.Writer, size int) {
	bw := make([]byte, 0, 64<<10)
	room := size - len(h.head) - len(h.tail)
	_, _ = io.WriteString(w, h.head)
	for room >= len(h.fill) {
		bw = bw[:0]
		for room >= len(h.fill) && len(bw)+len(h.fill) <= cap(bw) {
			bw = append(bw, h.fill...)
			room -= len(h.fill)
		}
		if _, err := w.Write(bw); err != nil {
			return // the client gave up on the reply
		}
	}
	_, _ = io.WriteString(w, h.tail)
}

// hugeSize is the size of a huge reply: near maxResponseBytes, 16 MiB under the race detector
// (still four times maxUnit, and over 100 MB for two such replies read whole).
func hugeSize() int {
	if raceEnabled {
		return 16 << 20
	}
	return maxResponseBytes - 1024
}

// hugeReplies are the shapes of a reply near maxResponseBytes: one huge text (content,
// reasoning), one huge field no reader reads, deep nesting inside such a field, and many small
// chunks, as plain completions and as event streams.
func hugeReplies() []hugeReply {
	x4000 := strings.Repeat("x", 4000)
	const ok = `"choices":[{"index":0,"message":{"role":"assistant","content":"<sql>SELECT 1</sql>"},"finish_reason":"stop"}]}`
	chunk := func(delta string) string {
		return `data: {"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	const okChunks = `data: {"model":"m","choices":[{"index":0,"delta":{"content":"<sql>SELECT 1</sql>"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	nest := strings.Repeat("[", 500) + strings.Repeat("]", 500) + ","
	return []hugeReply{
		{name: "plain content", head: `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"`, fill: "abcdefgh",
			tail: `"},"finish_reason":"stop"}]}`, huge: "abcdefgh"},
		{name: "plain reasoning", head: `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"<sql>SELECT 1</sql>","reasoning_content":"`,
			fill: "abcdefgh", tail: `"},"finish_reason":"stop"}]}`, field: "reasoning", huge: "abcdefgh"},
		{name: "plain unknown field", head: `{"model":"m","x_trace":"`, fill: "abcdefgh", tail: `",` + ok, after: sql1},
		{name: "plain deep nesting", head: `{"model":"m","x_trace":[`, fill: nest, tail: `[]],` + ok, after: sql1},
		{name: "stream content", stream: true, head: chunk(`{"role":"assistant","content":""}`) + `data: {"model":"m","choices":[{"index":0,"delta":{"content":"`,
			fill: "abcdefgh", tail: `"},"finish_reason":null}]}` + "\n\n" + okChunks, huge: "abcdefgh", after: sql1},
		{name: "stream reasoning", stream: true, head: `data: {"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"`,
			fill: "abcdefgh", tail: `"},"finish_reason":null}]}` + "\n\n" + okChunks, field: "reasoning", huge: "abcdefgh"},
		{name: "stream many chunks", stream: true, head: chunk(`{"role":"assistant","content":""}`),
			fill: chunk(`{"content":"` + x4000 + `"}`), tail: okChunks, huge: x4000, after: sql1},
		{name: "stream unknown field", stream: true, head: `data: {"model":"m","x_trace":"`, fill: "abcdefgh",
			tail: `","choices":[]}` + "\n\n" + okChunks, after: sql1},
	}
}

// heapObjects is the heap its objects occupy, live or not yet swept.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peakHeap runs f while sampling the heap every millisecond and returns the most the heap's
// objects grew above what they were before f (after a GC).
func peakHeap(f func()) uint64 {
	runtime.GC()
	base := heapObjects()
	var peak uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if h := heapObjects(); h > peak {
				peak = h
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	if h := heapObjects(); h > peak {
		peak = h
	}
	if peak < base {
		return 0
	}
	return peak - base
}

// TestReplyMemoryBounded: n replies near maxResponseBytes at once, of every shape
// (hugeReplies), cost the client's heap at most replyHeapBound above what it held before,
// whatever their size: the unread fields are scanned without being kept, each text of the reply
// keeps its first maxReplyText bytes and comes back as textcap.Cut cuts it, and a reply of a
// normal size inside a huge field comes back as it is. Before, each reply cost 130-380 MB
// (io.ReadAll of the body, its decoded copy, the assembly's copy; an event stream's line held
// whole, twice).
func TestReplyMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("sends several 64 MiB replies")
	}
	const n = 2
	const replyHeapBound = 48 << 20 // for the n replies together
	for _, h := range hugeReplies() {
		t.Run(h.name, func(t *testing.T) {
			start := time.Now()
			reps, errs, peak := chatHuge(t, h, n)
			t.Logf("%s: %d replies at once: heap peak %.1f MiB above the start (%.1f MiB a reply), %v",
				h.name, n, float64(peak)/(1<<20), float64(peak)/n/(1<<20), time.Since(start).Round(time.Millisecond))
			content, reasoning := h.want(hugeSize())
			for i := range n {
				if errs[i] != nil || reps[i].Content != content || reps[i].Reasoning != reasoning {
					t.Errorf("reply %d: %v, content %d bytes ending %q, reasoning %d bytes; want %d ending %q and %d",
						i, errs[i], len(reps[i].Content), tail(reps[i].Content), len(reps[i].Reasoning), len(content), tail(content), len(reasoning))
				}
			}
			if peak > replyHeapBound {
				t.Errorf("%d replies took %.1f MiB of heap at once, over %d MiB", n, float64(peak)/(1<<20), replyHeapBound>>20)
			}
		})
	}
}

// chatHuge sends n requests at once to a server answering each with h near maxResponseBytes,
// through one client with no retries, and returns their replies and errors and the heap's peak
// while they were read (peakHeap).
func chatHuge(t *testing.T, h hugeReply, n int) ([]chat.Reply, []error, uint64) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if h.stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		h.write(w, hugeSize())
	}))
	defer srv.Close()
	c, err := New(Endpoint{Name: "huge", BaseURL: srv.URL, Model: "m", MaxConcurrency: n, MaxRetries: 0,
		Timeout: time.Minute, Stream: h.stream})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reps, errs := make([]chat.Reply, n), make([]error, n)
	peak := peakHeap(func() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				reps[i], errs[i] = c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
			})
		}
		wg.Wait()
	})
	return reps, errs, peak
}

// withBudget sets the reply budget's limit, reserve and first floor for the test.
func withBudget(t *testing.T, limit, reserve, floor int64) {
	t.Helper()
	if u := replyBudget.used(); u != 0 {
		t.Fatalf("%d bytes of the budget held before the test", u)
	}
	l, r, f := replyBudget.limit, replyBudget.reserve, replyBudget.floor
	replyBudget.limit, replyBudget.reserve, replyBudget.floor = limit, reserve, floor
	t.Cleanup(func() { replyBudget.limit, replyBudget.reserve, replyBudget.floor = l, r, f })
}

// TestReplyBudgetBounds: the replies being read hold at most ReplyBudget together, whatever
// their number: n huge replies at once under a budget that holds three of them cost the heap
// about that budget, those that found no room failed with ReasonReplyBudget (retried like a
// provider fault; here there are no retries), the others came back cut, and every byte was
// given back. Without the budget the n replies took n times as much.
func TestReplyBudgetBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("sends several 64 MiB replies")
	}
	const n = 16
	withBudget(t, 3*maxUnit, maxUnit, ReplyFloor)
	h := hugeReplies()[0] // plain content
	reps, errs, peak := chatHuge(t, h, n)
	t.Logf("%d replies at once under a %d MiB budget: heap peak %.1f MiB", n, replyBudget.limit>>20, float64(peak)/(1<<20))
	content, _ := h.want(hugeSize())
	refused := 0
	for i, err := range errs {
		switch {
		case Reason(err) == ReasonReplyBudget:
			refused++
		case err != nil || reps[i].Content != content:
			t.Errorf("reply %d: %v, content %d bytes; want %d or %s", i, err, len(reps[i].Content), len(content), ReasonReplyBudget)
		}
	}
	if refused == 0 || refused == n {
		t.Errorf("%d of %d replies were refused room", refused, n)
	}
	if bound := uint64(3*replyBudget.limit) + 8<<20; peak > bound {
		t.Errorf("%d replies took %.1f MiB of heap under a %d MiB budget, over %d MiB", n, float64(peak)/(1<<20), replyBudget.limit>>20, bound>>20)
	}
	if u := replyBudget.used(); u != 0 {
		t.Errorf("%d bytes of the budget still held", u)
	}
}

// TestReplyBudgetRefusal: a reply that finds no room in the budget fails its attempt as
// ReasonReplyBudget, retried, and holds nothing after; with room, the same reply comes back. A
// failure response without room is still its status (a 401 is not retried), its body unread.
func TestReplyBudgetRefusal(t *testing.T) {
	withBudget(t, ReplyBudget, ReplyReserve, ReplyFloor)
	old := replyBudget.limit
	for _, stream := range []bool{false, true} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: "+hostileOK+"\n\ndata: [DONE]\n\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, hostileOK)
		})
		c := hostileClient(t, srv)
		c.ep.Stream = stream
		replyBudget.limit = 1 << 10 // a floor of 1 KiB, and none of it to grow into
		_, err := chatWithin(t, c, 10*time.Second)
		if Reason(err) != ReasonReplyBudget || c.Stats().RetriesByReason[ReasonReplyBudget] != 2 {
			t.Errorf("stream=%v: %v (retries %v), want %s after 2 retries", stream, err, c.Stats().RetriesByReason, ReasonReplyBudget)
		}
		replyBudget.limit = old
		if rep, err := chatWithin(t, c, 10*time.Second); err != nil || rep.Content != "<sql>SELECT 1</sql>" {
			t.Errorf("stream=%v: with room: %+v, %v", stream, rep, err)
		}
		if u := replyBudget.used(); u != 0 {
			t.Errorf("stream=%v: %d bytes of the budget still held", stream, u)
		}
	}
	// A failure response is still its status without room: a 401 stays permanent.
	srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"bad key"}}`)
	})
	c := hostileClient(t, srv)
	replyBudget.limit = 1 << 10
	_, err := chatWithin(t, c, 10*time.Second)
	if te := (*Error)(nil); !errors.As(err, &te) || te.Reason != ReasonAuth || te.Attempts != 1 {
		t.Errorf("a 401 without room: %v, want %s at once", err, ReasonAuth)
	}
	replyBudget.limit = old
	if _, err := chatWithin(t, c, 10*time.Second); !strings.Contains(fmt.Sprint(err), "bad key") {
		t.Errorf("a 401 with room: %v, want its message", err)
	}
	if u := replyBudget.used(); u != 0 {
		t.Errorf("%d bytes of the budget still held", u)
	}
}

// TestReplyTextBound: each text of a reply is kept whole up to maxReplyText bytes (what a
// trajectory keeps); one byte more and it comes back as textcap.Cut cuts it, at once, for
// content and reasoning, plain and streamed, in one piece or across many chunks. (Before, one
// byte more failed the attempt as too_long.)
func TestReplyTextBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		field  string
		stream bool
		pieces int
	}{
		{"plain content", "content", false, 1},
		{"plain reasoning", "reasoning_content", false, 1},
		{"stream content", "content", true, 1},
		{"stream content in chunks", "content", true, 256},
		{"stream reasoning in chunks", "reasoning", true, 256},
	} {
		for _, size := range []int{maxReplyText, maxReplyText + 1} {
			text := strings.Repeat("é", size/2) + strings.Repeat("x", size%2)
			srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
				var b strings.Builder
				if !tc.stream {
					w.Header().Set("Content-Type", "application/json")
					msg := map[string]string{"content": "<sql>SELECT 1</sql>"}
					msg[tc.field] = text
					m, _ := json.Marshal(map[string]any{"model": "m", "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}}})
					w.Write(m)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				step := (len(text) + tc.pieces - 1) / tc.pieces
				for i, j := 0, 0; i < len(text); i = j {
					j = min(len(text), i+step)
					for j < len(text) && !utfStart(text[j]) {
						j++ // a delta holds whole characters
					}
					piece := text[i:j]
					d, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]string{tc.field: piece}}}})
					b.WriteString("data: " + string(d) + "\n\n")
				}
				if tc.field != "content" {
					b.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"<sql>SELECT 1</sql>"}}]}` + "\n\n")
				}
				b.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
				w.Write([]byte(b.String()))
			})
			c := hostileClient(t, srv)
			c.ep.Stream = tc.stream
			rep, err := chatWithin(t, c, 20*time.Second)
			got := rep.Content
			if tc.field != "content" {
				got = rep.Reasoning
			}
			if want := textcap.Cut(text, textcap.Reply); err != nil || got != want || c.Stats().Retries != 0 {
				t.Errorf("%s, %d bytes: %v (retries %v), %d bytes back ending %q, want %d ending %q",
					tc.name, size, err, c.Stats().RetriesByReason, len(got), tail(got), len(want), tail(want))
			}
		}
	}
}

// TestReplyUnitBound: the bound on one completion (maxUnit) is on what it keeps less its texts,
// each text of the reply cut at maxReplyText: texts escaped as \u00e9 (6 bytes of JSON for 2 of
// text, as ensure_ascii encoders write them) come back as the same texts written as UTF-8, even
// where their JSON is over maxUnit (before, it failed as too long); a completion whose members
// the client reads keep more (a model name of maxUnit bytes) fails as too long, and so does one
// whose texts hold more than maxUnit past the limit of each (six reasoning_details entries of
// maxReplyText: each string keeps up to the limit, see scan.go).
func TestReplyUnitBound(t *testing.T) {
	for _, escaped := range []bool{false, true} {
		e := "é"
		if escaped {
			e = `\u00e9`
		}
		content, reasoning := strings.Repeat(e, maxReplyText/2+10), strings.Repeat(e, maxReplyText/4)
		body := `{"model":"m","choices":[{"index":0,"message":{"content":"` + content + `","reasoning_content":"` +
			reasoning + `"},"finish_reason":"stop"}]}`
		a := assembly{limit: maxReplyText}
		err := readPlain(strings.NewReader(body), &capture{status: 200}, &a)
		wantContent := textcap.Cut(strings.Repeat("é", maxReplyText/2+10), maxReplyText)
		if err != nil || a.content.String() != wantContent || a.reasoning[0].String() != strings.Repeat("é", maxReplyText/4) {
			t.Errorf("escaped %v (%d bytes of JSON): %v, content %d bytes, reasoning %d bytes", escaped, len(body), err, a.content.Len(), a.reasoning[0].Len())
		}
	}
	text := `"` + strings.Repeat("x", maxReplyText) + `"`
	for _, body := range []string{
		`{"model":"` + strings.Repeat("m", maxUnit) + `","choices":[{"index":0,"message":{"content":"a"}}]}`,
		`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":[` +
			strings.Repeat(`{"type":"reasoning.text","text":`+text+`},`, 5) + `{"type":"reasoning.text","text":` + text + `}]}}]}`,
	} {
		a := assembly{limit: maxReplyText}
		var tl *tooLongError
		if err := readPlain(strings.NewReader(body), &capture{status: 200}, &a); !errors.As(err, &tl) {
			t.Errorf("%.80s: %v, want a *tooLongError", body, err)
		}
	}
}

// TestReplyTextsHeldWithinBound: a completion whose strings under one text hold all that
// maxUnit leaves past that text's limit (content, reasoning_content, reasoning of maxReplyText
// each, and five reasoning_details entries, or five choices' contents, of nearly as much), read
// from a net/http server, comes back under a reply budget of what the docs say it may hold: its
// texts' first bytes (maxReplyText each and maxUnit past them, with its JSON), the reply's
// texts (maxReplyText each), a little more for its JSON and decoding. Before, a text's buffer
// doubled past what it may hold (8 MiB for 5 MiB): the reply needed 15 MiB and failed as
// reply_budget.
func TestReplyTextsHeldWithinBound(t *testing.T) {
	const bound = 4*maxReplyText + maxUnit + 4*maxReplyText + 512<<10
	withBudget(t, bound, ReplyFloor, ReplyFloor)
	x := strings.Repeat("x", maxReplyText)
	last := x[:maxReplyText-8192] // leaves room for the JSON and its decoding within maxUnit
	three := `"content":"` + x + `","reasoning_content":"` + x + `","reasoning":"` + x + `"`
	for _, tc := range []struct{ name, body string }{
		{"five reasoning_details", `{"model":"m","choices":[{"index":0,"message":{` + three + `,"reasoning_details":[` +
			strings.Repeat(`{"type":"reasoning.text","text":"`+x+`"},`, 4) + `{"type":"reasoning.text","text":"` + last + `"}]},"finish_reason":"stop"}]}`},
		{"five contents", `{"model":"m","choices":[{"index":0,"message":{` + three + `},"finish_reason":"stop"},` +
			strings.Repeat(`{"index":1,"message":{"content":"`+x+`"}},`, 3) + `{"index":1,"message":{"content":"` + last + `"}}]}`},
	} {
		srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, tc.body)
		})
		c := hostileClient(t, srv)
		c.ep.MaxRetries = 0
		rep, err := chatWithin(t, c, 30*time.Second)
		if want := textcap.Cut(x, textcap.Reply); err != nil || rep.Content != want {
			t.Errorf("%s under a %.1f MiB budget: %v, content %d bytes", tc.name, float64(bound)/(1<<20), err, len(rep.Content))
		}
		if u := replyBudget.used(); u != 0 {
			t.Errorf("%s: %d bytes of the budget still held", tc.name, u)
		}
	}
}

// TestReplyListsDecodeBounded: a completion or chunk whose kept lists ("choices", a message's
// "reasoning_details") hold many empty objects, three bytes of JSON each that decode to a
// Choice or Detail of 56 or 72 bytes, fails as too long once what they decode to passes
// maxUnit with the JSON, before it is decoded; the reply budget counted 2 bytes of decoding per
// byte kept. Before, 4 MiB of them were decoded: over 100 MB allocated per completion or chunk,
// outside the budget. A reply of a few thousand entries is read.
func TestReplyListsDecodeBounded(t *testing.T) {
	many := strings.Repeat("{},", (maxUnit-1024)/3) + "{}"
	few := strings.Repeat(`{"type":"reasoning.text","text":"t"},`, 4000) + "{}"
	for _, tc := range []struct {
		name, body string
		fail       bool
	}{
		{"choices", `{"model":"m","choices":[` + many + `]}`, true},
		{"reasoning_details", `{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":[` + many + `]}}]}`, true},
		{"a few thousand entries", `{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":[` + few + `]}}]}`, false},
	} {
		readBothWays(tc.body, func(stream bool, a *assembly, err error) {}) // warm
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		readBothWays(tc.body, func(stream bool, a *assembly, err error) {
			var tl *tooLongError
			if errors.As(err, &tl) != tc.fail || (!tc.fail && (err != nil || a.content.String() != "a" || a.reasoning[2].n != 4000)) {
				t.Errorf("%s (stream %v): %v, want too long %v", tc.name, stream, err, tc.fail)
			}
		})
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %.1f MiB allocated, plain and streamed", tc.name, float64(alloc)/(1<<20))
		if tc.fail && alloc > 48<<20 {
			t.Errorf("%s: %d bytes allocated, over %d", tc.name, alloc, 48<<20)
		}
	}
}

// TestReplyDecodeCounted: what decoding a completion or stream chunk allocates (TotalAlloc,
// garbage included: json.Unmarshal into internal/oai's types and the fold into the reply) is at
// most what the reply budget counts for it (twice its kept JSON and reducer.decoded, the room
// slotDecode takes), and its texts' room, for hostile replies of thousands of values that each
// allocate far more than their JSON: empty choices and reasoning_details entries (the slice's
// growth), a choice's message or delta set to null and to an object again (a new struct each
// time; counted at their JSON alone before, 1.4 to 1.7 times under), usage repeated (its
// UnmarshalJSON decodes it again: 18 times under), its counts past int64 (strconv's errors copy
// them), values of the wrong type (a *json.UnmarshalTypeError each, though only the first is
// returned).
func TestReplyDecodeCounted(t *testing.T) {
	rep := func(s string, n int) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }
	const n = 5000
	long := "1" + strings.Repeat("0", 64<<10)
	bad := strings.Repeat("\xff", 64<<10)
	deep := strings.Repeat("[", maxDepth-10) + strings.Repeat("]", maxDepth-10)
	for _, tc := range []struct{ name, body string }{
		{"empty choices", `{"choices":[` + rep(`{}`, n) + `]}`},
		{"choices with a message and a delta", `{"choices":[` + rep(`{"message":{},"delta":{}}`, n) + `]}`},
		{"message null and again", `{"choices":[{` + rep(`"message":null,"message":{}`, n) + `}]}`},
		{"delta null and again", `{"choices":[{` + rep(`"delta":null,"delta":{}`, n) + `}]}`},
		{"message with content, null and again", `{"choices":[{` + rep(`"message":null,"message":{"content":"a"}`, n) + `}]}`},
		{"content null and again", `{"choices":[{"message":{` + rep(`"content":null,"content":""`, n) + `}}]}`},
		{"finish_reason null and again", `{"choices":[{` + rep(`"finish_reason":null,"finish_reason":""`, n) + `}]}`},
		{"reasoning_details", `{"choices":[{"index":0,"message":{"reasoning_details":[` + rep(`{}`, n) + `]}}]}`},
		{"usage repeated", `{` + rep(`"usage":{}`, n/5) + `}`},
		{"usage null and again", `{` + rep(`"usage":null,"usage":{}`, n/5) + `}`},
		{"usage with every pointer", `{` + rep(`"usage":{"prompt_cache_hit_tokens":1,"prompt_cache_miss_tokens":1,"reasoning_tokens":1,"cost":1,"is_byok":true,"cost_details":{"upstream_inference_cost":1}}`, n/5) + `}`},
		{"usage details repeated", `{"usage":{` + rep(`"completion_tokens_details":{},"prompt_tokens_details":{}`, n/5) + `}}`},
		{"usage counts past int64", `{"usage":{` + rep(`"prompt_tokens":1e999`, n) + `}}`},
		{"usage long counts", `{"usage":{"prompt_tokens":` + long + `,"completion_tokens":` + long + `,"cost":` + long + `,"completion_tokens_details":{"reasoning_tokens":` + long + `}}}`},
		{"index of the wrong type", `{"choices":[{` + rep(`"index":"a"`, n) + `}]}`},
		{"choices of the wrong type", `{"choices":[` + rep(`0`, n) + `]}`},
		{"message of the wrong type", `{"choices":[{` + rep(`"message":null,"message":0`, n) + `}]}`},
		{"content of the wrong type", `{"choices":[{"message":{` + rep(`"content":0`, n) + `}}]}`},
		{"details of the wrong type", `{"choices":[{"message":{"reasoning_details":[` + rep(`{"index":"a","type":0}`, n) + `]}}]}`},
		{"model of the wrong type", `{` + rep(`"model":0`, n) + `}`},
		// A leaf kept as it came: a byte that is not UTF-8 decodes to three (U+FFFD) in a
		// buffer that doubles (5 times the count before leafBytes; 6 for an error event's
		// message, decoded twice), a number past its field's type is copied into strconv's
		// error and the message (3 times, plain), a container nested deep takes the scanner a
		// state for each level (8.9 times).
		{"model not UTF-8", `{"model":"` + bad + `"}`},
		{"finish_reason not UTF-8", `{"choices":[{"finish_reason":"` + bad + `"}]}`},
		{"detail type not UTF-8", `{"choices":[{"message":{"reasoning_details":[{"type":"` + bad + `"}]}}]}`},
		{"error message not UTF-8", `{"error":{"message":"` + bad + `"}}`},
		// An error event's object was copied (json.RawMessage), its message copied again, then
		// decoded (1.8 times the count with escapes).
		{"error message with escapes", `{"error":{"message":"` + strings.Repeat(`E\n`, 32<<10) + `"}}`},
		{"created long", `{"created":` + long + `}`},
		{"index long", `{"choices":[{"index":` + long + `}]}`},
		{"detail index long", `{"choices":[{"message":{"reasoning_details":[{"index":` + long + `.5}]}}]}`},
		{"model nested deep", `{"model":` + deep + `}`},
		// decoded again: four times an error event's message (the chunk, the error object,
		// as a string, as a list: 2.75 times with 48 bytes a level counted), twice a usage's
		// count (1.36)
		{"error message nested deep", `{"error":{"message":` + deep + `}}`},
		{"usage count nested deep", `{"usage":{"prompt_tokens":` + deep + `}}`},
		// reasoningText decodes each choice's reasoning again (1.09 times the count before).
		{"reasoning objects", `{"choices":[` + rep(`{"message":{"reasoning":{"summary":0}}}`, n/2) + `]}`},
	} {
		for _, stream := range []bool{false, true} {
			d := reducer{s: newSrc(strings.NewReader(tc.body), maxResponseBytes, stream), out: []byte{}, limit: maxReplyText}
			if err := d.reduce(completionShape); err != nil {
				t.Fatalf("%s: reduced: %v", tc.name, err)
			}
			counted := 2*len(d.out) + d.decoded
			fold := func(a *assembly) error {
				if stream {
					return foldChunk(d.out, &d, nil, a)
				}
				return foldCompletion(&d, nil, a)
			}
			_ = fold(&assembly{limit: maxReplyText}) // encoding/json caches each type's fields once
			a := assembly{limit: maxReplyText}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := fold(&a)
			runtime.ReadMemStats(&after)
			alloc := int(after.TotalAlloc - before.TotalAlloc)
			texts := cap(a.content.head)
			for i := range a.reasoning {
				texts += cap(a.reasoning[i].head)
			}
			if alloc > counted+texts {
				t.Errorf("%s (stream %v): decoding %d bytes of kept JSON allocated %d bytes, %.2f times the %d counted (%v)",
					tc.name, stream, len(d.out), alloc, float64(alloc)/float64(counted+texts), counted+texts, err)
			} else {
				t.Logf("%s (stream %v): %d bytes allocated, %d counted (%.2f)", tc.name, stream, alloc, counted+texts, float64(alloc)/float64(counted+texts))
			}
		}
	}
}

// A providerStream is a provider's stream of a reasoning model's reply, one token per chunk, in
// the provider's chunk shape (teachers/provider.go): reasoning and content are a chunk carrying
// one token of each (%[1]s: the token as a JSON string), finish the last chunk.
type providerStream struct {
	name, reasoning, content, finish string
}

// providerStreams are the chunk shapes of the providers that send the reasoning of gpt-oss,
// DeepSeek, GLM and Qwen, as they send them: OpenRouter's (the heaviest: its envelope, and
// the token in reasoning and again in reasoning_details), vLLM's, SGLang's, DeepSeek's and
// Z.ai's.
var providerStreams = []providerStream{
	{name: "openrouter",
		reasoning: `{"id":"gen-1765155600-Xq3vR8tLm2KpZ9wYc4Hd","provider":"DeepInfra","model":"openai/gpt-oss-120b","object":"chat.completion.chunk","created":1765155600,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":%[1]s,"reasoning_details":[{"type":"reasoning.text","text":%[1]s,"format":"unknown","index":0}]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}`,
		content:   `{"id":"gen-1765155600-Xq3vR8tLm2KpZ9wYc4Hd","provider":"DeepInfra","model":"openai/gpt-oss-120b","object":"chat.completion.chunk","created":1765155600,"choices":[{"index":0,"delta":{"role":"assistant","content":%[1]s,"reasoning":null,"reasoning_details":[]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}`,
		finish: `{"id":"gen-1765155600-Xq3vR8tLm2KpZ9wYc4Hd","provider":"DeepInfra","model":"openai/gpt-oss-120b","object":"chat.completion.chunk","created":1765155600,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":null,"reasoning_details":[]},"finish_reason":"stop","native_finish_reason":"stop","logprobs":null}]}` + "\n\n" +
			`data: {"id":"gen-1765155600-Xq3vR8tLm2KpZ9wYc4Hd","provider":"DeepInfra","model":"openai/gpt-oss-120b","object":"chat.completion.chunk","created":1765155600,"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":131072,"total_tokens":132272,"cost":0.0262,"is_byok":false,"prompt_tokens_details":{"cached_tokens":0},"cost_details":{"upstream_inference_cost":null},"completion_tokens_details":{"reasoning_tokens":126976}}}`},
	{name: "vllm",
		reasoning: `{"id":"chatcmpl-9f2c1a7e4b3d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1765155600,"model":"openai/gpt-oss-120b","choices":[{"index":0,"delta":{"reasoning":%[1]s},"logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":null}]}`,
		content:   `{"id":"chatcmpl-9f2c1a7e4b3d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1765155600,"model":"openai/gpt-oss-120b","choices":[{"index":0,"delta":{"content":%[1]s},"logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":null}]}`,
		finish:    `{"id":"chatcmpl-9f2c1a7e4b3d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1765155600,"model":"openai/gpt-oss-120b","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":1200,"total_tokens":132272,"completion_tokens":131072,"prompt_tokens_details":null}}`},
	{name: "sglang",
		reasoning: `{"id":"3c5e7a9b1d2f4a6c8e0b2d4f6a8c0e2b","object":"chat.completion.chunk","created":1765155600,"model":"qwen3.5-35b-a3b","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":%[1]s,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
		content:   `{"id":"3c5e7a9b1d2f4a6c8e0b2d4f6a8c0e2b","object":"chat.completion.chunk","created":1765155600,"model":"qwen3.5-35b-a3b","choices":[{"index":0,"delta":{"role":null,"content":%[1]s,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
		finish:    `{"id":"3c5e7a9b1d2f4a6c8e0b2d4f6a8c0e2b","object":"chat.completion.chunk","created":1765155600,"model":"qwen3.5-35b-a3b","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":1200,"total_tokens":132272,"completion_tokens":131072,"reasoning_tokens":126976}}`},
	{name: "deepseek",
		reasoning: `{"id":"5b8e2f1a-3c4d-4e6f-8a9b-0c1d2e3f4a5b","object":"chat.completion.chunk","created":1765155600,"model":"deepseek-v4-flash","system_fingerprint":"fp_3d5141a69a_prod0820_fp8_kvcache","choices":[{"index":0,"delta":{"content":null,"reasoning_content":%[1]s},"logprobs":null,"finish_reason":null}]}`,
		content:   `{"id":"5b8e2f1a-3c4d-4e6f-8a9b-0c1d2e3f4a5b","object":"chat.completion.chunk","created":1765155600,"model":"deepseek-v4-flash","system_fingerprint":"fp_3d5141a69a_prod0820_fp8_kvcache","choices":[{"index":0,"delta":{"content":%[1]s,"reasoning_content":null},"logprobs":null,"finish_reason":null}]}`,
		finish:    `{"id":"5b8e2f1a-3c4d-4e6f-8a9b-0c1d2e3f4a5b","object":"chat.completion.chunk","created":1765155600,"model":"deepseek-v4-flash","system_fingerprint":"fp_3d5141a69a_prod0820_fp8_kvcache","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":131072,"total_tokens":132272,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":126976},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":1200}}`},
	{name: "zai",
		reasoning: `{"id":"2025120801020304a1b2c3d4e5f6a7b8","created":1765155600,"object":"chat.completion.chunk","model":"glm-4.7-flash","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":%[1]s}}]}`,
		content:   `{"id":"2025120801020304a1b2c3d4e5f6a7b8","created":1765155600,"object":"chat.completion.chunk","model":"glm-4.7-flash","choices":[{"index":0,"delta":{"role":"assistant","content":%[1]s}}]}`,
		finish:    `{"id":"2025120801020304a1b2c3d4e5f6a7b8","created":1765155600,"object":"chat.completion.chunk","model":"glm-4.7-flash","choices":[{"index":0,"finish_reason":"stop","delta":{"role":"assistant","content":""}}],"usage":{"prompt_tokens":1200,"completion_tokens":131072,"total_tokens":132272}}`},
}

// streamTokens are the tokens of a long reply, in turn (gpt-oss's average token is about 4
// bytes).
var streamTokens = []string{" the", " table", " SELECT", " join", "ing", " of", " rows", ",", " count", "(*)", " we", " need"}

// write sends a reply of reasoning tokens of reasoning, then content tokens of content, one per
// chunk, as p's stream; it returns the reply's reasoning and content and the stream's size.
func (p providerStream) write(w io.Writer, reasoning, content int) (string, string, int64) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var n int64
	put := func(s string) {
		k, _ := bw.WriteString(s)
		n += int64(k)
	}
	var texts [2]strings.Builder
	for i := range reasoning + content {
		tok := streamTokens[i%len(streamTokens)]
		q, _ := json.Marshal(tok)
		f, text := p.reasoning, &texts[0]
		if i >= reasoning {
			f, text = p.content, &texts[1]
		}
		text.WriteString(tok)
		put("data: " + fmt.Sprintf(f, q) + "\n\n")
		if p.name == "openrouter" && i%4096 == 0 {
			put(": OPENROUTER PROCESSING\n\n")
		}
	}
	put("data: " + p.finish + "\n\ndata: [DONE]\n\n")
	_ = bw.Flush()
	return texts[0].String(), texts[1].String(), n
}

// streamLong sends one request to a server streaming p's reply of reasoning and content
// tokens, through a client whose endpoint sends maxTokens (0: none); it returns the reply, its
// error, the stream's size and the heap's peak while it was read (peakHeap).
func streamLong(t *testing.T, p providerStream, reasoning, content, maxTokens int) (chat.Reply, error, string, string, int64, uint64) {
	t.Helper()
	var think, text string
	var size int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		think, text, size = p.write(w, reasoning, content)
	}))
	defer srv.Close()
	c, err := New(Endpoint{Name: p.name, BaseURL: srv.URL, Model: "m", MaxRetries: 0, Timeout: 5 * time.Minute,
		Stream: true, MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rep chat.Reply
	peak := peakHeap(func() {
		rep, err = c.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
	})
	srv.Close() // the handler has returned: think, text and size are set
	return rep, err, think, text, size, peak
}

// TestStreamLongReasoning: a reasoning model's longest reply, streamed one token per chunk in
// each provider's chunk shape (providerStreams), comes back with margin, its texts cut as the
// Stepper keeps them, and the memory its reading takes does not grow with the stream: the
// stream's bound is on what its request allows (streamLimit), not on what the client keeps,
// which each text's limit and the reply budget bound. Gpt-oss's 131,072 tokens (126,976 of
// reasoning, then 4,096 of content) under max_tokens 131,072 fit each provider's stream at
// least four times over, and twice as many without max_tokens (262,144 tokens, OpenRouter's 110
// MB stream); a stream longer than its max_tokens allows still fails as too_long. Before, every
// stream was bounded at 64 MiB: OpenRouter's stream of gpt-oss's 131,072 tokens (55 MB) fit
// 1.2 times, its 262,144 tokens failed as too_long.
func TestStreamLongReasoning(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("streams over 100 MB")
	}
	const gptOSS, content = 131072, 4096
	for _, p := range providerStreams {
		rep, err, think, text, size, peak := streamLong(t, p, gptOSS-content, content, gptOSS)
		limit := streamLimit(gptOSS)
		t.Logf("%s: %d tokens, %.1f MB, %.0f bytes a token, under a bound %.1f times it; heap peak %.1f MiB",
			p.name, gptOSS, float64(size)/1e6, float64(size)/gptOSS, float64(limit)/float64(size), float64(peak)/(1<<20))
		if err != nil || rep.Reasoning != textcap.Cut(think, textcap.Reply) || rep.Content != text {
			t.Errorf("%s: %v; reasoning %d bytes of %d, content %d of %d", p.name, err, len(rep.Reasoning), len(think), len(rep.Content), len(text))
		}
		if limit < 4*size {
			t.Errorf("%s: a %d-token stream of %d bytes under a bound of %d: under four times it", p.name, gptOSS, size, limit)
		}
	}
	// Without max_tokens, twice as many tokens; OpenRouter's shape, the heaviest.
	rep, err, think, text, size, peak := streamLong(t, providerStreams[0], 2*gptOSS-content, content, 0)
	t.Logf("openrouter without max_tokens: %d tokens, %.1f MB; heap peak %.1f MiB", 2*gptOSS, float64(size)/1e6, float64(peak)/(1<<20))
	if err != nil || rep.Reasoning != textcap.Cut(think, textcap.Reply) || rep.Content != text {
		t.Errorf("openrouter, %d tokens without max_tokens: %v; reasoning %d bytes of %d, content %d of %d", 2*gptOSS, err, len(rep.Reasoning), len(think), len(rep.Content), len(text))
	}
	if peak > 32<<20 {
		t.Errorf("a %d-byte stream took %.1f MiB of heap", size, float64(peak)/(1<<20))
	}
	// A stream longer than its max_tokens allows: still too long.
	if _, err, _, _, size, _ := streamLong(t, providerStreams[0], 2*gptOSS-content, content, gptOSS/4); Reason(err) != ReasonTooLong {
		t.Errorf("a %d-byte stream under max_tokens %d: %v, want %s", size, gptOSS/4, err, ReasonTooLong)
	}
}

// TestStreamLimitFollowsMaxTokens: a stream's bound follows the completion budget its request
// sends, the larger of its max_tokens and max_completion_tokens as the body has them: the
// call's max_tokens in the provider's field, else the endpoint's, else extra_body's, and
// extra_body's other field beside the call's; else defaultStreamTokens; never under
// maxResponseBytes.
func TestStreamLimitFollowsMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ep    Endpoint
		opts  chat.Options
		want  int
		limit int64
	}{
		{"none", Endpoint{}, chat.Options{}, 0, defaultStreamTokens * streamTokenBytes},
		{"endpoint", Endpoint{MaxTokens: 131072}, chat.Options{}, 131072, 131072 * streamTokenBytes},
		{"call over endpoint", Endpoint{MaxTokens: 131072}, chat.Options{MaxTokens: 500000}, 500000, 500000 * streamTokenBytes},
		{"small", Endpoint{MaxTokens: 1000}, chat.Options{}, 1000, maxResponseBytes},
		{"extra_body max_completion_tokens", Endpoint{ExtraBody: map[string]any{"max_completion_tokens": 300000}}, chat.Options{}, 300000, 300000 * streamTokenBytes},
		{"extra_body both", Endpoint{ExtraBody: map[string]any{"max_tokens": 40000, "max_completion_tokens": 3e5}}, chat.Options{}, 300000, 300000 * streamTokenBytes},
		{"extra_body not a number", Endpoint{ExtraBody: map[string]any{"max_tokens": "many"}}, chat.Options{}, 0, defaultStreamTokens * streamTokenBytes},
		{"huge", Endpoint{MaxTokens: 1 << 62}, chat.Options{}, maxStreamTokens, maxStreamTokens * streamTokenBytes},
		// The call's max_tokens replaces the endpoint's field, not extra_body's other one,
		// which is sent beside it (and which vLLM reads first).
		{"call beside extra_body's other field", Endpoint{ExtraBody: map[string]any{"max_completion_tokens": 300000}}, chat.Options{MaxTokens: 1000}, 300000, 300000 * streamTokenBytes},
		{"call under extra_body's other field, OpenAI", Endpoint{Provider: "openai", ExtraBody: map[string]any{"max_tokens": 300000}}, chat.Options{MaxTokens: 1000}, 300000, 300000 * streamTokenBytes},
		{"call over extra_body's same field", Endpoint{ExtraBody: map[string]any{"max_tokens": 300000}}, chat.Options{MaxTokens: 1000}, 1000, maxResponseBytes},
	} {
		tc.ep.Name, tc.ep.BaseURL, tc.ep.Model = "t", "http://127.0.0.1:1", "m"
		c, err := New(tc.ep)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := c.requestTokens(tc.opts)
		if limit := streamLimit(got); got != tc.want || limit != tc.limit {
			t.Errorf("%s: %d tokens, bound %d; want %d and %d", tc.name, got, limit, tc.want, tc.limit)
		}
		// The body sends the budget counted, in one of its fields.
		body, _, f := c.request([]chat.Message{{Role: chat.RoleUser, Content: "q"}}, tc.opts)
		if f != nil {
			t.Fatalf("%s: %s", tc.name, f.msg)
		}
		var sent map[string]any
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		a, _ := sent["max_tokens"].(float64) // a string is no budget: the server's default
		b, _ := sent["max_completion_tokens"].(float64)
		if n := int(min(max(a, b), maxStreamTokens)); n != tc.want {
			t.Errorf("%s: the body sends a budget of %d tokens (%s), %d counted", tc.name, n, body, got)
		}
		c.Close()
	}
}
