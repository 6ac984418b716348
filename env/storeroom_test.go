package env

import (
	"errors"
	"math/rand"
	"testing"
	"time"
)

// These tests check what TestStoreFairPartRandom (accepted starts and steps only, the fair
// part) does not: the client's own finished episodes go first for the store's bytes
// (TestStoreRoomOwnFirst), the retry of a start refused at the store's bytes
// (TestStoreRoomWithinShare), and that a refused start or step drops nothing
// (TestStoreRefusedOwnDropsNone, TestStoreAccountingRandom, which also checks the per-client
// counts). b380ae8 deleted them with the tests of the count's old drop order; they pass on the
// store since.

// The stores of these tests: 4000 bytes (new episodes below 3000), a share of 2000 per client
// (new episodes below 1500), so a fair part of 1000 per client.
const fairStoreBytes, fairShare = 4000, 2000

// fairStore is a store of fairStoreBytes and fairShare on a fake clock, with helpers that
// build its episodes: play adds one of client's episodes and grows it to size in play; done
// does the same and finishes it. Each episode is added at size 1, so that building the store
// drops nothing; the clock advances a second after each, so that they expire in that order.
type fairStore struct {
	t       *testing.T
	s       *store
	advance func(time.Duration)
}

func newFairStore(t *testing.T) *fairStore {
	s := newStore(time.Hour, 1000, 1000, fairStoreBytes, fairShare)
	return &fairStore{t: t, s: s, advance: fakeClock(s)}
}

func (f *fairStore) episode(client string, size int64, done bool) *liveEpisode {
	f.t.Helper()
	e := &liveEpisode{client: client, size: 1}
	if _, err := f.s.add(e); err != nil {
		f.t.Fatalf("building the store: %s's episode: %v", client, err)
	}
	f.s.touch(e, done, size, 0)
	f.advance(time.Second)
	return e
}

func (f *fairStore) play(client string, size int64) *liveEpisode {
	f.t.Helper()
	return f.episode(client, size, false)
}

func (f *fairStore) done(client string, sizes ...int64) []*liveEpisode {
	f.t.Helper()
	var es []*liveEpisode
	for _, size := range sizes {
		es = append(es, f.episode(client, size, true))
	}
	return es
}

// add adds a new episode of client of size, as a start does.
func (f *fairStore) add(client string, size int64) (time.Duration, error) {
	return f.s.add(&liveEpisode{client: client, size: size})
}

// holds checks what each client named in want holds.
func (f *fairStore) holds(when string, want map[string]int64) {
	f.t.Helper()
	for c, w := range want {
		if b, r := f.s.clientHeld(c); b+r != w {
			f.t.Errorf("%s: client %s holds %d bytes (%d reserved), want %d", when, c, b+r, r, w)
		}
	}
	checkClientCounts(f.t, f.s, when)
}

// stored reports which of es are still stored.
func (f *fairStore) stored(es ...*liveEpisode) []bool {
	var ok []bool
	for _, e := range es {
		_, in := f.s.get(e.id, "")
		ok = append(ok, in)
	}
	return ok
}

func sizes(n int, size int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = size
	}
	return s
}

// TestStoreRoomOwnFirst: to make room within the store's bound for a client's new episode, the
// client's own finished episodes are dropped first, closest to expiry first, even where
// another client over its fair part has finished episodes closer to expiry; then the other's.
func TestStoreRoomOwnFirst(t *testing.T) {
	f := newFairStore(t)
	bs := f.done("b", sizes(7, 200)...) // 1400: over b's fair part, expiring first
	as := f.done("a", 200, 200, 200)
	f.play("a", 200)
	f.play("a", 200)
	f.play("c", 600) // 3000 in all
	if _, err := f.add("a", 200); err != nil {
		t.Fatal(err)
	}
	if got := f.stored(as...); got[0] || !got[1] || !got[2] {
		t.Errorf("a's finished episodes after a's start needing 200: stored %v, want its first dropped", got)
	}
	f.holds("a's first start", map[string]int64{"a": 1000, "b": 1400, "c": 600})
	if _, err := f.add("a", 400); err != nil {
		t.Fatal(err)
	}
	f.holds("a's second start", map[string]int64{"a": 1000, "b": 1400, "c": 600})
	// a has no finished episode left: b's, over its fair part, make the room.
	if _, err := f.add("a", 200); err != nil {
		t.Fatal(err)
	}
	if got := f.stored(bs[:2]...); got[0] || !got[1] {
		t.Errorf("b's finished episodes after a's third start: stored %v, want b's first dropped", got)
	}
	f.holds("a's third start", map[string]int64{"a": 1200, "b": 1200, "c": 600})
}

// TestStoreRoomWithinShare: client a, within its share, starts episodes while b's finished
// episodes are stored: b's are dropped only while b holds more than its fair part, and with b
// and c at their fair parts a is refused (errBytesFull) before its share, dropping none of theirs,
// its retry the first expiry of an episode in the way (b's finished one, blockingExpiryLocked).
func TestStoreRoomWithinShare(t *testing.T) {
	f := newFairStore(t)
	f.done("b", sizes(7, 270)...) // 1890, within b's share, over its fair part
	fair := f.s.fairBytes()
	var err error
	for i := 0; err == nil; i++ {
		before, _ := f.s.clientHeld("b")
		_, err = f.add("a", 200)
		after, _ := f.s.clientHeld("b")
		if after < before && before <= fair {
			t.Fatalf("a's start %d dropped b's finished episodes at b's fair part: %d to %d", i, before, after)
		}
	}
	if !errors.Is(err, errClientBytesFull) {
		t.Errorf("a's last start: %v, want errClientBytesFull (its own share)", err)
	}
	f.holds("a at its share", map[string]int64{"a": 1400, "b": 1350})

	g := newFairStore(t)
	g.done("b", sizes(5, 200)...)
	g.done("c", sizes(5, 200)...)
	for i := range 5 {
		if _, err := g.add("a", 200); err != nil {
			t.Fatalf("a's start %d: %v", i, err)
		}
	}
	if retry, err := g.add("a", 200); !errors.Is(err, errBytesFull) || retry != time.Hour-10*time.Second {
		t.Errorf("a's start with the store at its bound, b and c at their fair parts: %v, retry %s; want errBytesFull until b's first finished episode expires (59m50s)", err, retry)
	}
	g.holds("a refused", map[string]int64{"a": 1000, "b": 1000, "c": 1000})
}

// TestStoreAccountingRandom: under random starts, reservations, steps, deletes, expiries and
// sweeps of three clients (300 seeds of 400 operations), the store's per-client counts add up
// to its totals and to its episodes, no empty entry is kept, a client holds at most its share
// and the store at most its bound, a refused start or step drops no episode but the expired,
// and every reservation is given back.
func TestStoreAccountingRandom(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		now := time.Unix(0, 0)
		s := newStore(10*time.Second, 20, 8, 4000, 2000)
		s.now = func() time.Time { return now }
		clients := []string{"a", "b", "c"}
		var live []*liveEpisode
		var steps []stepInFlight
		// unexpired is the stored episodes that have not expired; refusedKeeps checks that a
		// refused start or step dropped none of them.
		unexpired := func() []*liveEpisode {
			s.mu.Lock()
			defer s.mu.Unlock()
			var es []*liveEpisode
			for _, e := range s.m {
				if now.Before(e.expires) {
					es = append(es, e)
				}
			}
			return es
		}
		refusedKeeps := func(op int, what string, kept []*liveEpisode) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, e := range kept {
				if s.m[e.id] != e {
					t.Fatalf("seed %d op %d: a refused %s dropped %s's episode (done %v, %d bytes)", seed, op, what, e.client, e.done, e.size)
				}
			}
		}
		for op := 0; op < 400; op++ {
			switch rng.Intn(7) {
			case 0, 1:
				e := &liveEpisode{client: clients[rng.Intn(3)], size: int64(50 + rng.Intn(200))}
				kept := unexpired()
				if _, err := s.add(e); err == nil {
					live = append(live, e)
				} else {
					refusedKeeps(op, "start", kept)
				}
			case 2:
				if e := stepTarget(rng, s, live, steps); e != nil {
					g := int64(rng.Intn(300))
					kept := unexpired()
					if _, err := s.reserve(e.client, g); err == nil {
						steps = append(steps, stepInFlight{e, g})
					} else {
						refusedKeeps(op, "step", kept)
					}
				}
			case 3:
				if len(steps) > 0 {
					i := rng.Intn(len(steps))
					st := steps[i]
					steps = append(steps[:i], steps[i+1:]...)
					if rng.Intn(4) == 0 {
						s.unreserve(st.e.client, st.growth)
					} else {
						s.touch(st.e, rng.Intn(3) == 0, st.e.size+int64(rng.Int63n(st.growth+1)), st.growth)
					}
				}
			case 4:
				if len(live) > 0 {
					s.remove(live[rng.Intn(len(live))].id, "")
				}
			case 5:
				now = now.Add(time.Duration(rng.Intn(4000)) * time.Millisecond)
			case 6:
				s.sweep()
			}
			// invariants
			s.mu.Lock()
			var bytes, reserved int64
			inPlay := map[string]int{}
			cb := map[string]int64{}
			for _, e := range s.m {
				if !e.done {
					inPlay[e.client]++
				}
				cb[e.client] += e.size
			}
			for c, u := range s.clients {
				bytes += u.bytes
				reserved += u.reserved
				if u.inPlay != inPlay[c] || u.bytes != cb[c] {
					t.Fatalf("seed %d op %d client %s: counts %+v, stored: inPlay %d bytes %d", seed, op, c, *u, inPlay[c], cb[c])
				}
				if u.inPlay == 0 && u.bytes == 0 && u.reserved == 0 {
					t.Fatalf("seed %d op %d: empty entry %s kept", seed, op, c)
				}
				if u.bytes+u.reserved > s.clientBytes {
					t.Fatalf("seed %d op %d client %s holds %d+%d over its share %d", seed, op, c, u.bytes, u.reserved, s.clientBytes)
				}
			}
			for c := range inPlay {
				if s.clients[c] == nil {
					t.Fatalf("seed %d op %d: client %s has stored episodes, no entry", seed, op, c)
				}
			}
			if bytes != s.bytes || reserved != s.reserved || s.bytes+s.reserved > s.maxBytes {
				t.Fatalf("seed %d op %d: clients add to %d/%d, store %d/%d (max %d)", seed, op, bytes, reserved, s.bytes, s.reserved, s.maxBytes)
			}
			s.mu.Unlock()
		}
		for _, st := range steps {
			s.unreserve(st.e.client, st.growth)
		}
		if s.reserved != 0 {
			t.Fatalf("seed %d: %d reserved after every step ended", seed, s.reserved)
		}
	}
}

// TestStoreRefusedOwnDropsNone: a start or step that dropping the client's own finished
// episodes makes room for in its share, but not in the store's bytes (the others' episodes in
// play), is refused (errBytesFull) with the client's own finished episodes kept; one that both
// make room for drops them.
func TestStoreRefusedOwnDropsNone(t *testing.T) {
	for _, c := range []struct {
		name      string
		play      int64 // a's episode in play, beside its finished 600
		b, c      int64 // b's and c's episodes in play
		n, fits   int64 // a's refused need, a need that fits
		add       bool  // a start, else a step's reservation
		afterFits int64 // what a holds after the need that fits
	}{
		{name: "start", play: 800, b: 1500, c: 100, n: 700, fits: 600, add: true, afterFits: 1400},
		{name: "step", play: 1200, b: 1900, c: 200, n: 800, fits: 700, afterFits: 1900},
	} {
		f := newFairStore(t)
		own := f.done("a", 600)
		f.play("c", c.c)
		f.play("a", c.play)
		f.play("b", c.b)
		need := func(n int64) error {
			if c.add {
				_, err := f.add("a", n)
				return err
			}
			_, err := f.s.reserve("a", n)
			return err
		}
		if err := need(c.n); !errors.Is(err, errBytesFull) {
			t.Fatalf("%s: a's need of %d past the store's bytes: %v, want errBytesFull", c.name, c.n, err)
		}
		if got := f.stored(own...); !got[0] {
			t.Errorf("%s: a's finished episode after its refused need: dropped, want stored", c.name)
		}
		f.holds(c.name+": after the refused need", map[string]int64{"a": 600 + c.play, "b": c.b, "c": c.c})
		if err := need(c.fits); err != nil {
			t.Fatalf("%s: a's need of %d: %v", c.name, c.fits, err)
		}
		if got := f.stored(own...); got[0] {
			t.Errorf("%s: a's finished episode after a need it makes room for: stored, want dropped", c.name)
		}
		f.holds(c.name+": after the need that fits", map[string]int64{"a": c.afterFits, "b": c.b, "c": c.c})
	}
}
