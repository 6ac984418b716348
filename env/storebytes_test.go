package env

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
)

// maxReply is a reply as large as the finding's: a 70 KB think block and a 65 KB statement in
// the content, 70 KB of reasoning beside; k makes the statement its own.
func maxReply(k int) map[string]string {
	sql := fmt.Sprintf("SELECT %d -- ", k) + strings.Repeat("x", 64980)
	return map[string]string{"content": "<think>" + strings.Repeat("t", 70000) + "</think>\n<sql>" + sql + "</sql>", "reasoning": strings.Repeat("r", 70000)}
}

// TestEpisodeSize: what the store counts for an episode (episodeSize) is what it holds in the
// heap, within a margin: never much less (the bound would not hold), and not much more where
// the texts are most of it; each step adds at most what was reserved for it (stepGrowth).
func TestEpisodeSize(t *testing.T) {
	tasks := tasksOf(t)[:1]
	for _, shape := range []struct {
		name  string
		turns int
		reply func(k int) map[string]string
		over  float64 // the most counted / heap
	}{
		{"started", 0, nil, 3},
		{"five small turns", 5, func(k int) map[string]string {
			return map[string]string{"content": answer(fmt.Sprintf("SELECT %d FROM book", k))}
		}, 2}, // small records: the safe side, counted above their 5.4 KB of live objects
		{"five maximal turns", 5, maxReply, 1.5},
	} {
		// Enough that the spans' fill, and what the process beside it frees or allocates while
		// this measures, move the heap in use by little an episode: at 300, a loaded 2-core
		// machine read 4.5 to 9 KB an episode for the same five small turns.
		n := 1500
		if shape.name == "five maximal turns" {
			n = 30
		}
		// What earlier tests left running (a shared gold outlives its step) may allocate or free
		// while this measures: a shape passes if one of three fresh servers measures within the
		// margin; a wrong count fails all three.
		for attempt := 1; ; attempt++ {
			s, url := testServer(t, Config{Tasks: tasks})
			start(t, url, tasks[0].ID, "") // the shared schema prompt, before measuring
			before := heapInUse()
			for i := range n {
				ep := start(t, url, tasks[0].ID, "")
				for k := range shape.turns {
					s.store.mu.Lock()
					e := s.store.m[ep.EpisodeID]
					was := e.size
					s.store.mu.Unlock()
					rp := shape.reply(i*10 + k)
					var out wireStep
					if err := post(http.DefaultClient, url+"/v1/episodes/"+ep.EpisodeID+"/step", rp, &out); err != nil || out.Error != nil {
						t.Fatalf("step: %v %+v", err, out.Error)
					}
					content := rp["content"]
					growth := stepGrowth(reply{Content: &content, Reasoning: rp["reasoning"]}, k, s.cfg.Episode.Caps, s.cfg.Episode.ReplyCap)
					s.store.mu.Lock()
					now := e.size
					s.store.mu.Unlock()
					if now-was > growth {
						t.Errorf("%s: a step added %d bytes, over the %d reserved for it", shape.name, now-was, growth)
					}
				}
			}
			heap := float64(heapInUse()-before) / float64(n)
			bytes, reserved := s.store.held()
			counted := float64(bytes) / float64(n+1)
			t.Logf("%s: %.0f bytes of heap an episode, %.0f counted", shape.name, heap, counted)
			if raceEnabled && shape.name != "five maximal turns" {
				break // small records: the race detector's heap is not the one measured
			}
			if counted >= 0.8*heap && counted <= shape.over*heap && reserved == 0 {
				break
			}
			if attempt == 3 {
				t.Errorf("%s: %.0f bytes counted an episode for %.0f in the heap (want 0.8 to %g times; %d reserved)", shape.name, counted, heap, shape.over, reserved)
				break
			}
		}
	}
}

// TestStoreBytes: the store holds at most Config.MaxStoreBytes: a new episode is refused (429,
// Retry-After) once they hold three quarters of it, after finished episodes are dropped to make
// room; a step that may pass the bound is refused (429), the episode unchanged; a delete gives
// the room back.
func TestStoreBytes(t *testing.T) {
	const maxBytes = 1_000_000
	task := tasksOf(t)[0]
	cfg := Config{Tasks: []datasets.Task{task}, MaxStoreBytes: maxBytes, MaxClientStoreBytes: maxBytes} // the store's own bound: one client may fill it
	cfg.Episode.MaxTurns = 20
	s, url := testServer(t, cfg)
	within := func(when string) {
		t.Helper()
		if b, r := s.store.held(); b+r > maxBytes || b < 0 || r != 0 {
			t.Fatalf("%s: the store holds %d bytes and reserves %d, bound %d", when, b, r, maxBytes)
		}
	}
	stepOK := func(id string, rp map[string]string) wireStep {
		t.Helper()
		var st wireStep
		if code := call(t, "POST", url+"/v1/episodes/"+id+"/step", rp, &st); code != 200 {
			t.Fatalf("step: %d %+v", code, st.Error)
		}
		within("after a step")
		return st
	}
	refused := func(what string, code int, retry string, e *apiError) {
		t.Helper()
		if n, err := strconv.Atoi(retry); code != 429 || err != nil || n < 1 || e == nil || !strings.Contains(e.Message, "--max-store-mib") {
			t.Fatalf("%s: %d, Retry-After %q, %+v; want 429 naming --max-store-mib", what, code, retry, e)
		}
	}
	// A: four maximal turns, the last two one statement: done, about 790 KB.
	a := start(t, url, task.ID, "")
	for k := range 4 {
		if st := stepOK(a.EpisodeID, maxReply(min(k, 2))); *st.Done != (k == 3) {
			t.Fatalf("A's step %d: done %v", k+1, *st.Done)
		}
	}
	// B starts: A, finished, is dropped to make room.
	b := start(t, url, task.ID, "")
	if code := call(t, "GET", url+"/v1/episodes/"+a.EpisodeID, nil, nil); code != 404 {
		t.Fatalf("the finished episode was kept over a new one: %d", code)
	}
	for k := range 4 {
		stepOK(b.EpisodeID, maxReply(k))
	}
	// B in play holds past three quarters: no new episode, and no room for B's fifth step.
	var e wireErr
	code, retry := callRetry(t, "POST", url+"/v1/episodes", map[string]string{"task_id": task.ID}, &e)
	refused("a new episode", code, retry, e.Error)
	e = wireErr{}
	code, retry = callRetry(t, "POST", url+"/v1/episodes/"+b.EpisodeID+"/step", maxReply(9), &e)
	refused("B's fifth step", code, retry, e.Error)
	var got wireEpisode
	if code := call(t, "GET", url+"/v1/episodes/"+b.EpisodeID, nil, &got); code != 200 || len(got.Messages) != 2+2*4 {
		t.Fatalf("B after the refused step: %d, %d messages, want 10 (unchanged)", code, len(got.Messages))
	}
	within("after the refusals")
	if code := call(t, "DELETE", url+"/v1/episodes/"+b.EpisodeID, nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if bytes, _ := s.store.held(); bytes != 0 {
		t.Fatalf("an empty store counts %d bytes", bytes)
	}
	start(t, url, task.ID, "")
}

// callRetry is call that also returns the Retry-After header.
func callRetry(t *testing.T, method, url string, body, out any) (int, string) {
	t.Helper()
	var retry string
	code := callHeader(t, method, url, body, out, func(h http.Header) { retry = h.Get("Retry-After") })
	return code, retry
}

// checkClientCounts fails t unless the store's per-client counts add up to its totals and to
// its episodes: each client's bytes the sizes of its stored episodes, its in-play count theirs
// not done; the reservations of all clients the store's.
func checkClientCounts(t *testing.T, s *store, when string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]clientUse{}
	var bytes int64
	for _, e := range s.m {
		u := want[e.client]
		u.bytes += e.size
		if !e.done {
			u.inPlay++
		}
		want[e.client] = u
		bytes += e.size
	}
	var reserved int64
	for c, u := range s.clients {
		w := want[c]
		if u.bytes != w.bytes || u.inPlay != w.inPlay || u.reserved < 0 || *u == (clientUse{}) {
			t.Errorf("%s: client %s counted %+v, its episodes %+v", when, c, *u, w)
		}
		reserved += u.reserved
	}
	for c, w := range want {
		if s.clients[c] == nil {
			t.Errorf("%s: client %s not counted, its episodes %+v", when, c, w)
		}
	}
	if bytes != s.bytes || reserved != s.reserved {
		t.Errorf("%s: the store counts %d bytes and %d reserved, its clients %d and %d", when, s.bytes, s.reserved, bytes, reserved)
	}
}

// TestStoreClientBytes: a client's episodes hold at most its share of the store's bytes: a new
// episode of its own past three quarters of the share, or a reservation past the share, is
// refused (errClientBytesFull, Retry-After its own first episode's expiry) while another client
// still has room; the client's own finished episodes, not another's, are dropped to make room;
// every path that adds or drops bytes (a step, a delete or an expiry during a step, the
// reservations given back, the sweep) keeps each client's count equal to its episodes'.
func TestStoreClientBytes(t *testing.T) {
	s := newStore(time.Hour, 100, 100, 1000, 500)
	advance := fakeClock(s)
	add := func(client string, size int64) (*liveEpisode, error) {
		e := &liveEpisode{client: client, size: size}
		_, err := s.add(e)
		return e, err
	}
	must := func(e *liveEpisode, err error) *liveEpisode {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	c1 := must(add("c", 200))
	advance(time.Minute)
	c2 := must(add("c", 150))
	if _, err := add("c", 50); !errors.Is(err, errClientBytesFull) { // 400 > 375
		t.Fatalf("c past three quarters of its share: %v, want errClientBytesFull", err)
	}
	if retry, err := s.reserve("c", 200); !errors.Is(err, errClientBytesFull) || retry != time.Hour-time.Minute {
		t.Fatalf("a step of c's past its share: %v, retry %s; want errClientBytesFull in 59m", err, retry)
	}
	d1 := must(add("d", 300)) // the store holds 650 of 1000: d is not locked out
	checkClientCounts(t, s, "after the starts")
	if _, err := s.reserve("c", 150); err != nil { // 500: c's share, whole
		t.Fatal(err)
	}
	if _, err := s.reserve("d", 100); err != nil {
		t.Fatal(err)
	}
	checkClientCounts(t, s, "two steps in flight")
	// c1 is deleted while its step runs, which then ends it; d1's step ends.
	if !s.remove(c1.id, "") {
		t.Fatal("c1 not stored")
	}
	s.touch(c1, true, 320, 150)
	s.touch(d1, false, 380, 100)
	checkClientCounts(t, s, "after a delete during a step")
	if b, r := s.clientHeld("c"); b != 150 || r != 0 {
		t.Fatalf("c holds %d bytes, %d reserved; want c2's 150", b, r)
	}
	// d1 finishes, then c2; c's next episode makes room in c's share by dropping c2, not d1
	// (closer to expiry, but d's).
	if _, err := s.reserve("d", 90); err != nil {
		t.Fatal(err)
	}
	s.touch(d1, true, 400, 90)
	advance(time.Minute)
	if _, err := s.reserve("c", 100); err != nil {
		t.Fatal(err)
	}
	s.touch(c2, true, 250, 100) // c: 250, the store 650
	c3 := must(add("c", 200))   // c: 450 > 375
	if _, ok := s.get(c2.id, ""); ok {
		t.Error("c2, done, kept past c's share")
	}
	if _, ok := s.get(d1.id, ""); !ok {
		t.Error("d1, done, dropped for c's share")
	}
	checkClientCounts(t, s, "after dropping a finished episode")
	// c3's step is in flight when c3 expires; the sweep drops it, then the step ends.
	if _, err := s.reserve("c", 100); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Hour)
	if _, ok := s.get(c3.id, ""); ok {
		t.Fatal("c3 not expired")
	}
	s.sweep()
	checkClientCounts(t, s, "after the expiry, the step in flight")
	s.touch(c3, false, 400, 100)
	checkClientCounts(t, s, "after the expiry")
	if b, r := s.held(); b != 0 || r != 0 || len(s.clients) != 0 {
		t.Errorf("an empty store holds %d bytes, %d reserved, %d clients counted", b, r, len(s.clients))
	}
}

// TestClientStoreBytesHTTP: through the server, one client (an API key) filling the store's
// bytes with episodes in play is refused at its share (by default half the store: 429,
// Retry-After, naming --max-client-store-mib), its episode unchanged, while another client
// still starts and plays episodes; a delete gives the client its room back.
func TestClientStoreBytesHTTP(t *testing.T) {
	const maxBytes = 2_000_000
	task := tasksOf(t)[0]
	cfg := Config{Tasks: []datasets.Task{task}, MaxStoreBytes: maxBytes, TTL: time.Hour}
	cfg.Episode.MaxTurns = 20
	s, url := guarded(t, cfg, "a-key", "b-key")
	startAs := func(key string) (int, string, string, string) {
		var ep struct {
			EpisodeID string `json:"episode_id"`
		}
		code, msg, retry := send(t, "POST", url+"/v1/episodes", key, "application/json", `{"task_id": "`+task.ID+`"}`, &ep)
		return code, msg, retry, ep.EpisodeID
	}
	stepAs := func(key, id string, k int) (int, string, string) {
		body, _ := json.Marshal(maxReply(k))
		return send(t, "POST", url+"/v1/episodes/"+id+"/step", key, "application/json", string(body), nil)
	}
	refused := func(what string, code int, msg, retry string) {
		t.Helper()
		if n, err := strconv.Atoi(retry); code != 429 || err != nil || n < 1 || !strings.Contains(msg, "--max-client-store-mib") || !strings.Contains(msg, "client key 1") {
			t.Fatalf("%s: %d %q, Retry-After %q; want 429 naming --max-client-store-mib and the client", what, code, msg, retry)
		}
	}
	// a fills what it may: episodes in play, four maximal turns each, until refused.
	var aIDs []string
	var code int
	var msg, retry, id string
	for code, msg, retry, id = startAs("a-key"); code == 200; code, msg, retry, id = startAs("a-key") {
		aIDs = append(aIDs, id)
		for k := range 4 {
			if c, m, r := stepAs("a-key", id, len(aIDs)*10+k); c != 200 {
				code, msg, retry = c, m, r
				break
			}
		}
		if code == 429 {
			break
		}
	}
	refused(fmt.Sprintf("a, with %d episodes started", len(aIDs)), code, msg, retry)
	checkClientCounts(t, s.store, "a at its share")
	if b, r := s.store.clientHeld("key 1"); b+r > maxBytes/2 {
		t.Fatalf("a holds %d bytes and reserves %d, over its share %d", b, r, maxBytes/2)
	}
	// b is not locked out: it starts and plays as a did.
	bID := ""
	if code, msg, _, bID = startAs("b-key"); code != 200 {
		t.Fatalf("b beside a at its share: %d %s", code, msg)
	}
	for k := range 4 {
		if c, m, _ := stepAs("b-key", bID, 900+k); c != 200 {
			t.Fatalf("b's step %d: %d %s", k+1, c, m)
		}
	}
	checkClientCounts(t, s.store, "b playing")
	// a's first episode, in play, has no room for another maximal step in a's share.
	messages := func() int {
		t.Helper()
		var ep wireEpisode
		if c, m, _ := send(t, "GET", url+"/v1/episodes/"+aIDs[0], "a-key", "", "", &ep); c != 200 {
			t.Fatalf("get: %d %s", c, m)
		}
		return len(ep.Messages)
	}
	before := messages()
	code, msg, retry = stepAs("a-key", aIDs[0], 999)
	refused("a's step", code, msg, retry)
	if n := messages(); n != before {
		t.Fatalf("a's episode after the refused step: %d messages, want %d (unchanged)", n, before)
	}
	for _, id := range aIDs {
		if c, m, _ := send(t, "DELETE", url+"/v1/episodes/"+id, "a-key", "", "", nil); c != 200 {
			t.Fatalf("delete: %d %s", c, m)
		}
	}
	checkClientCounts(t, s.store, "after a's deletes")
	if b, r := s.store.clientHeld("key 1"); b != 0 || r != 0 {
		t.Errorf("a holds %d bytes, %d reserved after deleting its episodes", b, r)
	}
	if code, msg, _, _ := startAs("a-key"); code != 200 {
		t.Errorf("a after its deletes: %d %s", code, msg)
	}
}
