package teachers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"golang.org/x/sync/semaphore"
)

// TestBudgetRules: floors are admitted in arrival order while they fit the limit, and wait
// otherwise; a wait ends with its context, leaving nothing held and letting those behind it
// in; room past the floors is taken at once or refused, and never from the reserve.
func TestBudgetRules(t *testing.T) {
	ctx := context.Background()
	if b := (&budget{limit: 100, reserve: 30}); b.admit(ctx, 35) != nil || b.used() != 30 {
		t.Fatalf("a floor of 35 is cut to the reserve, 30: used %d", b.used())
	}
	b := &budget{limit: 100, reserve: 30, floor: 10}
	// Past the floors, room is taken from all but the reserve: 70 at most.
	if err := b.admit(ctx, 20); err != nil || !b.grow(70) || b.grow(1) || b.used() != 90 {
		t.Fatalf("20 of floors and 70 past them, then 1 more: %v, used %d", err, b.used())
	}
	if err := b.admit(ctx, 10); err != nil || b.used() != 100 {
		t.Fatalf("a floor of 10 in the last 10: %v, used %d", err, b.used())
	}
	// None left: a floor of 20 waits, and one of 5 behind it waits too.
	order := make(chan int64, 2)
	wait := func(n int64) {
		k := b.waitersLen()
		go func() {
			if err := b.admit(ctx, n); err != nil {
				t.Error(err)
			}
			order <- n
		}()
		for deadline := time.Now().Add(5 * time.Second); b.waitersLen() == k; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a floor of %d did not wait", n)
			}
		}
	}
	wait(20)
	wait(5)
	cctx, cancel := context.WithCancel(ctx)
	waitErr := make(chan error)
	go func() { waitErr <- b.admit(cctx, 1) }()
	for deadline := time.Now().Add(5 * time.Second); b.waitersLen() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a third floor did not wait")
		}
	}
	cancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) || b.waitersLen() != 2 || b.used() != 100 {
		t.Fatalf("a canceled wait: %v, %d waiting, used %d", err, b.waitersLen(), b.used())
	}
	b.give(0, 10) // 10 free: the 5 would fit, but the 20 came first
	time.Sleep(10 * time.Millisecond)
	if b.waitersLen() != 2 || b.used() != 90 {
		t.Fatalf("after 10 given back: %d waiting, used %d", b.waitersLen(), b.used())
	}
	b.give(0, 10) // 20 free: the 20 is admitted, the 5 waits for more
	if n := <-order; n != 20 || b.waitersLen() != 1 {
		t.Fatalf("after 20 given back: %d admitted, %d waiting", n, b.waitersLen())
	}
	b.give(0, 50)
	if n := <-order; n != 5 || b.used() != 55 {
		t.Fatalf("then %d admitted, used %d", n, b.used())
	}
	b.give(55, 0)
	if b.used() != 0 || b.waitersLen() != 0 {
		t.Fatalf("used %d, %d waiting", b.used(), b.waitersLen())
	}

	// A retry's room past its floor (meter.admit of more than the floor) comes from all but
	// the reserve: with that held, it waits holding its floor alone, and a wait that ends
	// gives the floor back.
	if !b.grow(70) {
		t.Fatal("70 past the floors")
	}
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer tcancel()
	if err := newMeter(b).admit(tctx, 30); !errors.Is(err, context.DeadlineExceeded) || b.used() != 70 || b.waitersLen() != 0 {
		t.Fatalf("a retry's 30 with 70 held past the floors: %v, used %d, %d waiting", err, b.used(), b.waitersLen())
	}
	m := newMeter(b)
	admitted := make(chan error)
	go func() { admitted <- m.admit(ctx, 30) }()
	for deadline := time.Now().Add(5 * time.Second); b.waitersLen() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a retry's room did not wait")
		}
	}
	if err := b.admit(ctx, 10); err != nil || b.used() != 90 {
		t.Fatalf("a floor beside the waiting retry: %v, used %d", err, b.used())
	}
	b.give(10, 70)
	if err := <-admitted; err != nil || m.floor != 10 || m.pre != 20 || b.used() != 30 {
		t.Fatalf("the retry once 70 came back: %v, floor %d and %d past it, used %d", err, m.floor, m.pre, b.used())
	}
	if err := m.set(slotUnit, 25); err != nil || b.used() != 30 {
		t.Fatalf("25 used within the retry's 30: %v, used %d", err, b.used())
	}
	m.release()
	if b.used() != 0 || b.waitersLen() != 0 {
		t.Fatalf("used %d, %d waiting", b.used(), b.waitersLen())
	}
}

func (b *budget) waitersLen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters) + len(b.extras)
}

// slowHog is a server whose every reply is a stream that sends a chunk keeping maxUnit of
// JSON, then maxReplyText of each of the four texts, then waits for release before it ends:
// a slow or hostile provider holding what a reply may hold for as long as it likes. blocked
// counts the replies waiting.
func slowHog(t *testing.T, release <-chan struct{}, blocked *atomic.Int64) *Client {
	t.Helper()
	srv := hostileServer(t, func(w http.ResponseWriter, n int64) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[]}\n\n", strings.Repeat("m", maxUnit-1024))
		text := strings.Repeat("t", maxReplyText)
		for _, delta := range []string{`"content":%q`, `"reasoning_content":%q`, `"reasoning":%q`,
			`"reasoning_details":[{"type":"reasoning.text","text":%q}]`} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{"+delta+"}}]}\n\n", text)
		}
		w.(http.Flusher).Flush()
		blocked.Add(1)
		<-release
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	c, err := New(Endpoint{Name: "hog", BaseURL: srv.URL, Model: "m", MaxConcurrency: 64, Timeout: time.Minute, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// streamServer answers a request for a stream with stream(w), any other with plain(w).
func streamServer(t *testing.T, plain, stream func(w http.ResponseWriter)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Stream bool }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		if req.Stream {
			stream(w)
			return
		}
		plain(w)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestReplyHeldBetweenChunks: between its chunks a stream holds its floor and its texts, not
// its largest chunk: one that sent a chunk keeping maxUnit of JSON and then maxReplyText of
// each of its four texts holds at most those texts, its floor and its first buffers while it
// waits. Before, it held 16 MiB (the chunk's buffer at maxUnit, twice it for the decoding,
// the texts) until its attempt ended.
func TestReplyHeldBetweenChunks(t *testing.T) {
	withBudget(t, ReplyBudget, ReplyReserve, ReplyFloor)
	release := make(chan struct{})
	var blocked atomic.Int64
	hog := slowHog(t, release, &blocked)
	done := make(chan error)
	go func() {
		_, err := hog.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		done <- err
	}()
	for blocked.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// The client reads what is in transit, its four texts last: once it holds them it holds
	// what it will hold until the release.
	bound := int64(4*maxReplyText + ReplyFloor + 3*unitKeptInitial)
	held := replyBudget.used()
	for deadline := time.Now().Add(10 * time.Second); (held < 4*maxReplyText || held > bound) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		held = replyBudget.used()
	}
	close(release)
	t.Logf("a stream waiting after its chunks holds %.2f MiB", float64(held)/(1<<20))
	if held > bound {
		t.Errorf("a stream waiting after its chunks holds %d bytes, over %d", held, bound)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// ordinaryServer answers every request with an ordinary reply: 20 KB of reasoning and a short
// content, streamed in 100 chunks or plain.
func ordinaryServer(t *testing.T) (*Client, *Client, string, string) {
	t.Helper()
	reasoning := strings.Repeat("Let me think about the schema. ", 700)[:20000]
	content := "<sql>SELECT count(*) FROM t</sql>"
	srv := streamServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"model": "m", "choices": []any{map[string]any{"index": 0,
			"message": map[string]string{"content": content, "reasoning_content": reasoning}, "finish_reason": "stop"}}})
		w.Write(b)
	}, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(reasoning); i += 200 {
			d, _ := json.Marshal(reasoning[i:min(len(reasoning), i+200)])
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":%s}}]}\n\n", d)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", content)
	})
	plain, streamed := hostileClient(t, srv), hostileClient(t, srv)
	streamed.ep.Stream = true
	return plain, streamed, content, reasoning
}

// chatAll makes n Chat calls at once, every other one through streamed, each within d, and
// hands each result to check (called concurrently).
func chatAll(t *testing.T, plain, streamed *Client, n int, d time.Duration, check func(i int, rep chat.Reply, err error)) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		c := plain
		if i%2 == 1 {
			c = streamed
		}
		wg.Go(func() {
			rep, err := chatWithin(t, c, d)
			check(i, rep, err)
		})
	}
	wg.Wait()
}

// TestReplyBudgetHogs: a handful of slow streams holding all a reply may hold cannot make the
// ordinary replies read beside them fail. Six hogs, each holding its four texts of
// maxReplyText after a chunk of maxUnit, stay open while 32 ordinary replies (plain and
// streamed, 20 KB of reasoning each) are read under a 32 MiB budget: every ordinary reply comes
// back, and all is given back once the hogs end. Before, a stream held 16 MiB (its chunk's
// buffer, twice it for the decoding, its texts) until it ended, two hogs held the whole budget
// and every ordinary reply failed as reply_budget after its retries.
func TestReplyBudgetHogs(t *testing.T) {
	withBudget(t, 32<<20, 8<<20, ReplyFloor)
	const hogs, ordinary = 6, 32
	release := make(chan struct{})
	var blocked atomic.Int64
	hog := slowHog(t, release, &blocked)
	hogErrs := make(chan error, hogs)
	var hogsDone []error
	for i := range hogs { // one after the other, each holding all it can before the next starts
		go func() {
			_, err := hog.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
			hogErrs <- err
		}()
		for deadline := time.Now().Add(30 * time.Second); blocked.Load()+int64(len(hogsDone)) <= int64(i); time.Sleep(10 * time.Millisecond) {
			select {
			case err := <-hogErrs:
				hogsDone = append(hogsDone, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("hog %d did not settle: %d blocked, %d done", i, blocked.Load(), len(hogsDone))
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the client reads what the hogs' last writes left in transit
	t.Logf("%d hogs hold %.1f MiB of the %d MiB budget (%d of them ended: %v)", blocked.Load(),
		float64(replyBudget.used())/(1<<20), replyBudget.limit>>20, len(hogsDone), hogsDone)

	plain, streamed, content, reasoning := ordinaryServer(t)
	plain.sem, streamed.sem = semaphore.NewWeighted(16), semaphore.NewWeighted(16)
	errs := make([]error, ordinary)
	chatAll(t, plain, streamed, ordinary, 30*time.Second, func(i int, rep chat.Reply, err error) {
		if err == nil && (rep.Content != content || rep.Reasoning != reasoning) {
			err = fmt.Errorf("content %q, reasoning %d bytes", rep.Content, len(rep.Reasoning))
		}
		errs[i] = err
	})
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 3 {
				t.Errorf("ordinary reply %d: %v", i, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d ordinary replies failed beside %d hogs", failed, ordinary, hogs)
	}
	close(release)
	for len(hogsDone) < hogs {
		hogsDone = append(hogsDone, <-hogErrs)
	}
	if u := replyBudget.used(); u != 0 {
		t.Errorf("%d bytes of the budget still held", u)
	}
}

// TestReplyBudgetNoDeadlock: many replies at once that each want more than their floor, under
// a budget that holds a few of them, all end: each comes back (its texts cut as textcap.Cut
// cuts them) or fails as reply_budget, none waits past its attempt's timeout, and nothing is
// held or waiting after. Refused attempts retry with a floor of twice what they wanted, so
// some wait for their floor before their request is sent (the test sees them wait); a
// waiting attempt holds nothing, so the waits cannot deadlock.
func TestReplyBudgetNoDeadlock(t *testing.T) {
	withBudget(t, 16<<20, 6<<20, ReplyFloor)
	const calls = 24
	long := longText(maxReplyText+maxReplyText/2, "no deadlock")
	enc, _ := json.Marshal(long)
	srv := streamServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"message":{"content":%s,"reasoning_content":%s},"finish_reason":"length"}]}`, enc, enc)
	}, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(long); {
			j := min(len(long), i+64<<10)
			for j < len(long) && !utfStart(long[j]) {
				j++
			}
			d, _ := json.Marshal(long[i:j])
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s,\"reasoning_content\":%s}}]}\n\n", d, d)
			i = j
			time.Sleep(time.Millisecond)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	})
	plain, streamed := hostileClient(t, srv), hostileClient(t, srv)
	streamed.ep.Stream = true
	for _, c := range []*Client{plain, streamed} {
		c.ep.MaxRetries, c.ep.Timeout = 3, 20*time.Second
		c.sem = semaphore.NewWeighted(calls)
	}
	stop := make(chan struct{})
	var mostWaiting atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n := int64(replyBudget.waitersLen()); n > mostWaiting.Load() {
				mostWaiting.Store(n)
			}
		}
	}()
	var ok, refused atomic.Int64
	want := textcap.Cut(long, textcap.Reply)
	chatAll(t, plain, streamed, calls, 90*time.Second, func(_ int, rep chat.Reply, err error) {
		switch {
		case err == nil && rep.Content == want && rep.Reasoning == want:
			ok.Add(1)
		case Reason(err) == ReasonReplyBudget:
			refused.Add(1)
		default:
			t.Errorf("%v, content %d bytes", err, len(rep.Content))
		}
	})
	close(stop)
	t.Logf("%d came back, %d refused room; at most %d attempts waited for their floor at once; retries %v and %v",
		ok.Load(), refused.Load(), mostWaiting.Load(), plain.Stats().RetriesByReason, streamed.Stats().RetriesByReason)
	if ok.Load() == 0 {
		t.Error("no reply came back")
	}
	if mostWaiting.Load() == 0 {
		t.Error("no attempt waited for its floor: the test did not reach the waits")
	}
	if u, w := replyBudget.used(), replyBudget.waitersLen(); u != 0 || w != 0 {
		t.Errorf("%d bytes still held, %d attempts still waiting", u, w)
	}
}

// TestReplyBudgetRetryKeepsReserve: the retry of an attempt refused room does not take the
// reserve. With the room past the floors held (by slow streams, as TestReplyBudgetHogs makes
// them hold it), an attempt refused at a chunk keeping maxUnit retries wanting twice that;
// its retry, whose provider then stalls, must not hold the reserve while it reads, or every
// ordinary reply beside it waits for its floor until its timeout and fails as reply_budget.
// Before, the retry took its floor of the whole reserve from the reserve itself: 8 of 8
// ordinary replies failed.
func TestReplyBudgetRetryKeepsReserve(t *testing.T) {
	withBudget(t, 32<<20, 8<<20, ReplyFloor)
	hogs := replyBudget.limit - replyBudget.reserve - 6<<20 // room for the greedy reply's chunk
	if !replyBudget.grow(hogs) {
		t.Fatal("the room past the floors is not free")
	}
	release := make(chan struct{})
	greedySrv := hostileServer(t, func(w http.ResponseWriter, n int64) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 { // refused room: its retry wants twice the chunk
			fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[]}\n\n", strings.Repeat("m", maxUnit-1024))
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	greedy := hostileClient(t, greedySrv)
	greedy.ep.Stream, greedy.ep.MaxRetries, greedy.ep.Timeout = true, 1, time.Minute
	greedyErr := make(chan error, 1)
	go func() {
		_, err := greedy.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		greedyErr <- err
	}()
	defer func() { // the slow streams end, then the greedy reply's provider
		replyBudget.give(0, hogs)
		close(release)
		if err := <-greedyErr; err != nil && Reason(err) != ReasonReplyBudget {
			t.Errorf("the greedy reply: %v", err)
		}
		if u, w := replyBudget.used(), replyBudget.waitersLen(); u != 0 || w != 0 {
			t.Errorf("%d bytes still held, %d attempts still waiting", u, w)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); greedy.Stats().Retries == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the greedy reply was not refused room")
		}
	}
	time.Sleep(300 * time.Millisecond) // its retry takes its floor and reads until the release
	// More slow streams take what is left past the floors.
	replyBudget.mu.Lock()
	rest := min(replyBudget.limit-replyBudget.reserve-replyBudget.grown, replyBudget.limit-replyBudget.floors-replyBudget.grown)
	replyBudget.grown += rest
	hogs += rest
	t.Logf("held: %.2f MiB as floors, %.2f MiB past them", float64(replyBudget.floors)/(1<<20), float64(replyBudget.grown)/(1<<20))
	replyBudget.mu.Unlock()

	plain, streamed, content, _ := ordinaryServer(t)
	for _, c := range []*Client{plain, streamed} {
		c.ep.MaxRetries, c.ep.Timeout = 0, 2*time.Second
	}
	failed := 0
	var mu sync.Mutex
	chatAll(t, plain, streamed, 8, 30*time.Second, func(i int, rep chat.Reply, err error) {
		if err == nil && rep.Content != content {
			err = fmt.Errorf("content %q", rep.Content)
		}
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			if failed++; failed <= 2 {
				t.Errorf("ordinary reply %d: %v", i, err)
			}
		}
	})
	if failed > 0 {
		t.Errorf("%d of 8 ordinary replies failed beside a retry of a refused reply", failed)
	}
}
