package env

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
)

// errFull is store.add's refusal when every slot holds an episode still in play.
var errFull = errors.New("env: episode store full")

// errClientFull is store.add's refusal when the episode's client already has its cap of
// episodes in play.
var errClientFull = errors.New("env: the client's episodes are at its cap")

// errBytesFull is store.add's and store.reserve's refusal when the episodes stored, with the
// room held for the steps in flight, leave no room within the store's bytes.
var errBytesFull = errors.New("env: the episodes' memory is at the store's bound")

// liveEpisode is one episode in play.
type liveEpisode struct {
	id      string
	task    *datasets.Task
	dialect datasets.Dialect
	// client is who started it (httpguard.Client), for the per-client cap.
	client string

	// mu is held by the step in flight; a second step of the same episode is refused rather
	// than queued, since its reply was generated without the first one's observation.
	mu sync.Mutex
	st *episode.Stepper

	// Guarded by store.mu.
	expires time.Time
	done    bool
	size    int64 // episodeSize as last counted (before add: as it starts)
}

// store keeps the live episodes in memory, each until ttl passes without a step, at most max of
// them, at most perClient in play (not done) per client, and at most maxBytes by episodeSize
// in all: a new episode only while they hold under startBytes, three quarters of it, so that
// the episodes in play have the last quarter to grow in; a step only with room for what it may
// add (reserve). To make room it drops finished episodes, closest to expiry first. Safe for
// concurrent use.
type store struct {
	ttl       time.Duration
	max       int
	perClient int
	maxBytes  int64
	now       func() time.Time

	mu sync.Mutex
	m  map[string]*liveEpisode
	// inPlay counts each client's stored episodes that are not done.
	inPlay map[string]int
	// bytes is the stored episodes' sizes; reserved the room held for the steps in flight.
	bytes, reserved int64
}

func newStore(ttl time.Duration, max, perClient int, maxBytes int64) *store {
	return &store{ttl: ttl, max: max, perClient: perClient, maxBytes: maxBytes, now: time.Now, m: make(map[string]*liveEpisode), inPlay: map[string]int{}}
}

// startBytes is the bytes below which the store takes a new episode.
func (s *store) startBytes() int64 { return s.maxBytes - s.maxBytes/4 }

// newID returns a random episode id: 128 bits, so one trainer cannot guess another's episodes.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("env: crypto/rand: " + err.Error()) // rand.Read does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// add stores e (its size set) under a new id. With e's client at its cap of episodes in play,
// the store full, or its bytes at startBytes, it first drops the expired episodes; then a full
// store drops the finished one closest to expiry, and so do the bytes until e fits under
// startBytes. Still at the client's cap it returns errClientFull, with every slot in play
// errFull, without room errBytesFull; retry is how long until the first episode in the way
// expires.
func (s *store) add(e *liveEpisode) (retry time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max || s.inPlay[e.client] >= s.perClient || s.bytes+s.reserved+e.size > s.startBytes() {
		s.sweepLocked(now)
	}
	if s.inPlay[e.client] >= s.perClient {
		return s.firstExpiryLocked(now, e.client), errClientFull
	}
	if len(s.m) >= s.max {
		oldest := s.oldestDoneLocked()
		if oldest == nil {
			return s.firstExpiryLocked(now, ""), errFull
		}
		s.dropLocked(oldest)
	}
	if !s.roomLocked(e.size, s.startBytes()) {
		return s.firstExpiryLocked(now, ""), errBytesFull
	}
	e.id = newID()
	e.expires = now.Add(s.ttl)
	s.m[e.id] = e
	s.inPlay[e.client]++
	s.bytes += e.size
	return 0, nil
}

// reserve holds n bytes for a step in flight, which touch or unreserve gives back: when the
// stored episodes and the steps in flight leave no room for them within maxBytes, it drops the
// expired episodes, then finished ones closest to expiry first, and without room still it
// returns errBytesFull and how long until the first episode in play expires.
func (s *store) reserve(n int64) (retry time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.bytes+s.reserved+n > s.maxBytes {
		s.sweepLocked(now)
	}
	if !s.roomLocked(n, s.maxBytes) {
		return s.firstExpiryLocked(now, ""), errBytesFull
	}
	s.reserved += n
	return 0, nil
}

// unreserve gives back n bytes reserve held for a step that did not play.
func (s *store) unreserve(n int64) {
	s.mu.Lock()
	s.reserved -= n
	s.mu.Unlock()
}

// roomLocked reports whether n more bytes fit under limit, dropping finished episodes, closest
// to expiry first, as far as needed; where dropping them all would not make the room, it drops
// none.
func (s *store) roomLocked(n, limit int64) bool {
	over := s.bytes + s.reserved + n - limit
	if over <= 0 {
		return true
	}
	var done []*liveEpisode
	var doneBytes int64
	for _, e := range s.m {
		if e.done {
			done = append(done, e)
			doneBytes += e.size
		}
	}
	if doneBytes < over {
		return false
	}
	slices.SortFunc(done, func(a, b *liveEpisode) int { return a.expires.Compare(b.expires) })
	for _, e := range done {
		if over <= 0 {
			break
		}
		s.dropLocked(e)
		over -= e.size
	}
	return true
}

// oldestDoneLocked is the finished episode closest to expiry, or nil.
func (s *store) oldestDoneLocked() *liveEpisode {
	var oldest *liveEpisode
	for _, o := range s.m {
		if o.done && (oldest == nil || o.expires.Before(oldest.expires)) {
			oldest = o
		}
	}
	return oldest
}

// firstExpiryLocked is how long until the first episode in play of client ("": of any client)
// expires.
func (s *store) firstExpiryLocked(now time.Time, client string) time.Duration {
	var first time.Time
	for _, o := range s.m {
		if !o.done && (client == "" || o.client == client) && (first.IsZero() || o.expires.Before(first)) {
			first = o.expires
		}
	}
	if first.IsZero() {
		return 0
	}
	return first.Sub(now)
}

// dropLocked removes e from the store, its bytes and its client's count.
func (s *store) dropLocked(e *liveEpisode) {
	delete(s.m, e.id)
	s.bytes -= e.size
	if !e.done {
		s.doneLocked(e)
	}
}

// doneLocked takes e out of its client's count of episodes in play.
func (s *store) doneLocked(e *liveEpisode) {
	if s.inPlay[e.client]--; s.inPlay[e.client] <= 0 {
		delete(s.inPlay, e.client)
	}
}

// get returns the episode id when it is stored and not expired.
func (s *store) get(id string) (*liveEpisode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok {
		return nil, false
	}
	if !s.now().Before(e.expires) {
		s.dropLocked(e)
		return nil, false
	}
	return e, true
}

// touch restarts e's TTL after a step, records whether it is done and its size now, and gives
// back the reserved bytes reserve held for the step.
func (s *store) touch(e *liveEpisode, done bool, size, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved -= reserved
	if s.m[e.id] == e { // not dropped (expired, deleted) while it played
		s.bytes += size - e.size
	}
	e.size = size
	e.expires = s.now().Add(s.ttl)
	if done && !e.done && s.m[e.id] == e { // a dropped episode left its client's count then
		s.doneLocked(e)
	}
	e.done = done
}

// remove drops episode id and reports whether it was there.
func (s *store) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if ok {
		s.dropLocked(e)
	}
	return ok
}

// sweep drops the expired episodes and returns how many it dropped.
func (s *store) sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(s.now())
}

func (s *store) sweepLocked(now time.Time) int {
	n := 0
	for _, e := range s.m {
		if !now.Before(e.expires) {
			s.dropLocked(e)
			n++
		}
	}
	return n
}

// counts returns the number of stored episodes and of those still in play.
func (s *store) counts() (stored, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.m {
		if !e.done {
			live++
		}
	}
	return len(s.m), live
}

// held returns the stored episodes' bytes (by episodeSize) and the bytes reserved for the
// steps in flight.
func (s *store) held() (bytes, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, s.reserved
}
