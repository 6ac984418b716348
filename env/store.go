package env

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
)

// errFull is store.add's refusal when every slot holds an episode still in play.
var errFull = errors.New("env: episode store full")

// episode is one live episode.
type episode struct {
	id      string
	task    *datasets.Task
	dialect datasets.Dialect

	// mu is held by the step in flight; a second step of the same episode is refused rather
	// than queued, since its reply was generated without the first one's observation.
	mu sync.Mutex
	st *distill.Stepper

	// Guarded by store.mu.
	expires time.Time
	done    bool
}

// store keeps the live episodes in memory, each until ttl passes without a step, at most max of
// them. Safe for concurrent use.
type store struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[string]*episode
}

func newStore(ttl time.Duration, max int) *store {
	return &store{ttl: ttl, max: max, now: time.Now, m: make(map[string]*episode)}
}

// newID returns a random episode id: 128 bits, so one trainer cannot guess another's episodes.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("env: crypto/rand: " + err.Error()) // rand.Read does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// add stores e under a new id. When the store is full it first drops the expired episodes, then
// the finished one closest to expiry; with every slot in play it returns errFull.
func (s *store) add(e *episode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max {
		s.sweepLocked(now)
	}
	if len(s.m) >= s.max {
		var oldest *episode
		for _, o := range s.m {
			if o.done && (oldest == nil || o.expires.Before(oldest.expires)) {
				oldest = o
			}
		}
		if oldest == nil {
			return errFull
		}
		delete(s.m, oldest.id)
	}
	e.id = newID()
	e.expires = now.Add(s.ttl)
	s.m[e.id] = e
	return nil
}

// get returns the episode id when it is stored and not expired.
func (s *store) get(id string) (*episode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok {
		return nil, false
	}
	if !s.now().Before(e.expires) {
		delete(s.m, id)
		return nil, false
	}
	return e, true
}

// touch restarts e's TTL after a step and records whether it is done.
func (s *store) touch(e *episode, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.expires = s.now().Add(s.ttl)
	e.done = done
}

// remove drops episode id and reports whether it was there.
func (s *store) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	delete(s.m, id)
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
	for id, e := range s.m {
		if !now.Before(e.expires) {
			delete(s.m, id)
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
