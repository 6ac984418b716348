package env

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
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
}

// store keeps the live episodes in memory, each until ttl passes without a step, at most max of
// them and at most perClient in play (not done) per client. Safe for concurrent use.
type store struct {
	ttl       time.Duration
	max       int
	perClient int
	now       func() time.Time

	mu sync.Mutex
	m  map[string]*liveEpisode
	// inPlay counts each client's stored episodes that are not done.
	inPlay map[string]int
}

func newStore(ttl time.Duration, max, perClient int) *store {
	return &store{ttl: ttl, max: max, perClient: perClient, now: time.Now, m: make(map[string]*liveEpisode), inPlay: map[string]int{}}
}

// newID returns a random episode id: 128 bits, so one trainer cannot guess another's episodes.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("env: crypto/rand: " + err.Error()) // rand.Read does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// add stores e under a new id. With e's client at its cap of episodes in play, or the store
// full, it first drops the expired episodes; then a full store drops the finished one closest
// to expiry. Still at the client's cap it returns errClientFull, with every slot in play
// errFull; retry is how long until the first episode in the way expires.
func (s *store) add(e *liveEpisode) (retry time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max || s.inPlay[e.client] >= s.perClient {
		s.sweepLocked(now)
	}
	if s.inPlay[e.client] >= s.perClient {
		return s.firstExpiryLocked(now, e.client), errClientFull
	}
	if len(s.m) >= s.max {
		var oldest *liveEpisode
		for _, o := range s.m {
			if o.done && (oldest == nil || o.expires.Before(oldest.expires)) {
				oldest = o
			}
		}
		if oldest == nil {
			return s.firstExpiryLocked(now, ""), errFull
		}
		s.dropLocked(oldest)
	}
	e.id = newID()
	e.expires = now.Add(s.ttl)
	s.m[e.id] = e
	s.inPlay[e.client]++
	return 0, nil
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

// dropLocked removes e from the store and from its client's count.
func (s *store) dropLocked(e *liveEpisode) {
	delete(s.m, e.id)
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

// touch restarts e's TTL after a step and records whether it is done.
func (s *store) touch(e *liveEpisode, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.expires = s.now().Add(s.ttl)
	if done && !e.done {
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
