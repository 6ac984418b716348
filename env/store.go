package env

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
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

// errClientBytesFull is store.add's and store.reserve's refusal when the episodes of the
// client, with the room held for their steps in flight, leave no room within its share of the
// store's bytes.
var errClientBytesFull = errors.New("env: the client's episodes' memory is at its share of the store")

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
// in all and clientBytes of them per client: a new episode only while they hold under three
// quarters of either (startBytes, clientStartBytes), so that the episodes in play have the last
// quarter to grow in; a step only with room in both for what it may add (reserve). To make room
// it drops finished episodes, closest to expiry first: for the store's count any client's; for
// a client's share the client's own; for the store's bytes the client's own, then other
// clients' but none of a client whose stored episodes hold its fair part (fairBytes) or less
// (planRoomLocked); and only when all of that makes the room (roomPlan): a start or step it
// refuses drops none but the expired. Safe for concurrent use.
type store struct {
	ttl         time.Duration
	max         int
	perClient   int
	maxBytes    int64
	clientBytes int64
	now         func() time.Time

	mu sync.Mutex
	m  map[string]*liveEpisode
	// clients holds what each client's stored episodes count for; a client whose counts are all
	// zero has no entry.
	clients map[string]*clientUse
	// bytes is the stored episodes' sizes; reserved the room held for the steps in flight.
	bytes, reserved int64
}

// clientUse is what one client's stored episodes count for.
type clientUse struct {
	// inPlay counts the client's stored episodes that are not done.
	inPlay int
	// bytes is their sizes, done ones included; reserved the room held for their steps in
	// flight.
	bytes, reserved int64
}

func newStore(ttl time.Duration, max, perClient int, maxBytes, clientBytes int64) *store {
	return &store{ttl: ttl, max: max, perClient: perClient, maxBytes: maxBytes, clientBytes: clientBytes, now: time.Now,
		m: make(map[string]*liveEpisode), clients: map[string]*clientUse{}}
}

// startBytes is the bytes below which the store takes a new episode.
func (s *store) startBytes() int64 { return s.maxBytes - s.maxBytes/4 }

// clientStartBytes is the bytes of a client's below which the store takes a new episode of it.
func (s *store) clientStartBytes() int64 { return s.clientBytes - s.clientBytes/4 }

// shared reports whether a client's share is a bound of its own, below the store's: a share of
// the whole store is the store's bound, and a refusal names that.
func (s *store) shared() bool { return s.clientBytes < s.maxBytes }

// useLocked is client's entry, made when it has none.
func (s *store) useLocked(client string) *clientUse {
	u := s.clients[client]
	if u == nil {
		u = &clientUse{}
		s.clients[client] = u
	}
	return u
}

// tidyLocked drops client's entry once its counts are all zero.
func (s *store) tidyLocked(client string) {
	if u := s.clients[client]; u != nil && u.inPlay <= 0 && u.bytes == 0 && u.reserved == 0 {
		delete(s.clients, client)
	}
}

// inPlayLocked is how many of client's stored episodes are in play.
func (s *store) inPlayLocked(client string) int {
	if u := s.clients[client]; u != nil {
		return u.inPlay
	}
	return 0
}

// heldLocked is what the stored episodes of client ("": of every client) hold, with the room
// reserved for their steps in flight.
func (s *store) heldLocked(client string) int64 {
	if client == "" {
		return s.bytes + s.reserved
	}
	if u := s.clients[client]; u != nil {
		return u.bytes + u.reserved
	}
	return 0
}

// newID returns a random episode id: 128 bits, so one trainer cannot guess another's episodes.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("env: crypto/rand: " + err.Error()) // rand.Read does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// add stores e (its size set) under a new id. With e's client at its cap of episodes in play,
// the store full, or the bytes of the store or of e's client at three quarters of their bound,
// it first drops the expired episodes. Still at the client's cap it returns errClientFull.
// Then it plans the finished episodes to drop (roomPlan): as planRoomLocked does for e to fit
// under clientStartBytes and startBytes; then, when those leave the store's count full, the
// finished episode closest to expiry that the plan lacks, whoever's. It drops them only when the
// whole plan makes the room, else none, and returns errClientBytesFull, errBytesFull or errFull
// (every slot in play); retry is how long until the
// first episode in the way expires: any in play, for the count; of the client in play, for its
// cap and share; any in play, or another client's finished one, for the store's bytes
// (blockingExpiryLocked).
func (s *store) add(e *liveEpisode) (retry time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max || s.inPlayLocked(e.client) >= s.perClient || s.heldLocked("")+e.size > s.startBytes() ||
		s.shared() && s.heldLocked(e.client)+e.size > s.clientStartBytes() {
		s.sweepLocked(now)
	}
	if s.inPlayLocked(e.client) >= s.perClient {
		return s.firstExpiryLocked(now, e.client), errClientFull
	}
	// The room for the episode's bytes first (planRoomLocked's rules); when its drops leave the
	// count full, the count takes one more of its own, the finished episode closest to expiry,
	// whoever's, as --max-episodes forces. The count's drop never makes room for bytes that the
	// rules cannot make (a client within its fair part would lose an episode to them).
	var p roomPlan
	if err := s.planRoomLocked(&p, e.client, e.size, s.clientStartBytes(), s.startBytes()); err != nil {
		return s.refusalExpiryLocked(now, e.client, err), err
	}
	if len(s.m)-len(p.drop) >= s.max {
		oldest := s.oldestDoneLocked(p.in)
		if oldest == nil {
			return s.firstExpiryLocked(now, ""), errFull
		}
		p.add(oldest)
	}
	p.dropLocked(s)
	e.id = newID()
	e.expires = now.Add(s.ttl)
	s.m[e.id] = e
	u := s.useLocked(e.client)
	u.inPlay++
	u.bytes += e.size
	s.bytes += e.size
	return 0, nil
}

// reserve holds n bytes for a step in flight of an episode of client, which touch or unreserve
// gives back: when the stored episodes and the steps in flight leave no room for them within
// the client's share (clientBytes) or the store's maxBytes, it drops the expired episodes, then
// the finished ones planRoomLocked plans, only when that plan makes the room; without it, it
// drops none and returns errClientBytesFull or errBytesFull and how long until the first
// episode in the way expires, as add does.
func (s *store) reserve(client string, n int64) (retry time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.heldLocked("")+n > s.maxBytes || s.shared() && s.heldLocked(client)+n > s.clientBytes {
		s.sweepLocked(now)
	}
	var p roomPlan
	if err := s.planRoomLocked(&p, client, n, s.clientBytes, s.maxBytes); err != nil {
		return s.refusalExpiryLocked(now, client, err), err
	}
	p.dropLocked(s)
	s.reserved += n
	s.useLocked(client).reserved += n
	return 0, nil
}

// unreserve gives back n bytes reserve held for a step of client's that did not play.
func (s *store) unreserve(client string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreserveLocked(client, n)
}

func (s *store) unreserveLocked(client string, n int64) {
	s.reserved -= n
	if u := s.clients[client]; u != nil {
		u.reserved -= n
		s.tidyLocked(client)
	}
}

// roomPlan is the finished episodes a start or step would drop to make its room, none dropped
// until the whole plan is known to make it (dropLocked).
type roomPlan struct {
	drop  []*liveEpisode
	in    map[*liveEpisode]bool // drop's episodes
	freed int64                 // their sizes
	of    map[string]int64      // their sizes by client
}

// add adds e to the plan.
func (p *roomPlan) add(e *liveEpisode) {
	if p.in == nil {
		p.in, p.of = map[*liveEpisode]bool{}, map[string]int64{}
	}
	p.drop = append(p.drop, e)
	p.in[e] = true
	p.freed += e.size
	p.of[e.client] += e.size
}

// take adds to the plan, in order, the episodes of done that it lacks and that ok (nil: every
// one) reports true for, until their sizes reach over; it returns what is left of over
// (positive: they did not reach it).
func (p *roomPlan) take(done []*liveEpisode, over int64, ok func(*liveEpisode) bool) int64 {
	for _, e := range done {
		if over <= 0 {
			break
		}
		if p.in[e] || ok != nil && !ok(e) {
			continue
		}
		p.add(e)
		over -= e.size
	}
	return over
}

// dropLocked drops the plan's episodes from s.
func (p *roomPlan) dropLocked(s *store) {
	for _, e := range p.drop {
		s.dropLocked(e)
	}
}

// fairBytes is a client's fair part of the store: half its share (clientBytes, at most
// maxBytes). A client whose stored episodes hold no more than it loses no finished episode to
// another's room in the store's bytes.
func (s *store) fairBytes() int64 { return min(s.clientBytes, s.maxBytes) / 2 }

// planRoomLocked adds to p the finished episodes to drop, beyond those p holds, so that n more
// bytes of client's fit, with p dropped: under share in what client's episodes hold, with the
// room reserved for their steps in flight (when the share is a bound of its own), client's own
// finished episodes, closest to expiry first; then under limit in what every client's episodes
// hold, with the reservations, first client's own, then other clients', closest to expiry
// first, each only while its client's stored episodes (not its reservations) less those p
// drops hold more than fairBytes, so that a client whose episodes hold its fair part or less
// loses none to another. It returns errClientBytesFull or errBytesFull, for the first bound
// that dropping all those would not make room in; p then holds part of a plan, to be dropped
// unused.
func (s *store) planRoomLocked(p *roomPlan, client string, n, share, limit int64) error {
	own := func(e *liveEpisode) bool { return e.client == client }
	if s.shared() {
		if over := s.heldLocked(client) - p.of[client] + n - share; over > 0 && p.take(s.finishedLocked(own), over, nil) > 0 {
			return errClientBytesFull
		}
	}
	over := s.heldLocked("") - p.freed + n - limit
	if over <= 0 {
		return nil
	}
	if over = p.take(s.finishedLocked(own), over, nil); over <= 0 {
		return nil
	}
	fair := s.fairBytes()
	others := s.finishedLocked(func(e *liveEpisode) bool { return e.client != client })
	if p.take(others, over, func(e *liveEpisode) bool { return s.storedLocked(e.client)-p.of[e.client] > fair }) > 0 {
		return errBytesFull
	}
	return nil
}

// storedLocked is what client's stored episodes hold, without the room reserved for its steps
// in flight.
func (s *store) storedLocked(client string) int64 {
	if u := s.clients[client]; u != nil {
		return u.bytes
	}
	return 0
}

// refusalExpiryLocked is the retry of a start or step of client's refused with err by
// planRoomLocked: for errClientBytesFull until the client's first episode in play expires
// (firstExpiryLocked), for errBytesFull until the first one in the way does
// (blockingExpiryLocked).
func (s *store) refusalExpiryLocked(now time.Time, client string, err error) time.Duration {
	if errors.Is(err, errClientBytesFull) {
		return s.firstExpiryLocked(now, client)
	}
	return s.blockingExpiryLocked(now, client)
}

// finishedLocked returns the finished episodes that keep reports true for, closest to expiry
// first.
func (s *store) finishedLocked(keep func(*liveEpisode) bool) []*liveEpisode {
	var done []*liveEpisode
	for _, e := range s.m {
		if e.done && keep(e) {
			done = append(done, e)
		}
	}
	slices.SortFunc(done, func(a, b *liveEpisode) int {
		if c := a.expires.Compare(b.expires); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return done
}

// oldestDoneLocked is the finished episode closest to expiry that skip (a plan's drops) lacks, or
// nil.
func (s *store) oldestDoneLocked(skip map[*liveEpisode]bool) *liveEpisode {
	var oldest *liveEpisode
	for _, o := range s.m {
		if o.done && !skip[o] && (oldest == nil || o.expires.Before(oldest.expires)) {
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

// blockingExpiryLocked is how long until the first episode that planRoomLocked could not drop
// for client expires: one in play, or another client's finished one.
func (s *store) blockingExpiryLocked(now time.Time, client string) time.Duration {
	var first time.Time
	for _, o := range s.m {
		if (!o.done || o.client != client) && (first.IsZero() || o.expires.Before(first)) {
			first = o.expires
		}
	}
	if first.IsZero() {
		return 0
	}
	return first.Sub(now)
}

// dropLocked removes e from the store, its bytes and its client's counts.
func (s *store) dropLocked(e *liveEpisode) {
	delete(s.m, e.id)
	s.bytes -= e.size
	if u := s.clients[e.client]; u != nil {
		u.bytes -= e.size
	}
	if !e.done {
		s.doneLocked(e)
	}
	s.tidyLocked(e.client)
}

// doneLocked takes e out of its client's count of episodes in play.
func (s *store) doneLocked(e *liveEpisode) {
	if u := s.clients[e.client]; u != nil {
		u.inPlay--
		s.tidyLocked(e.client)
	}
}

// get returns the episode id when it is stored, not expired and, with owner not "", started by
// client owner (another's is not found, as an unknown id).
func (s *store) get(id, owner string) (*liveEpisode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok || (owner != "" && e.client != owner) {
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
	if s.m[e.id] == e { // not dropped (expired, deleted) while it played
		s.bytes += size - e.size
		s.useLocked(e.client).bytes += size - e.size
	}
	s.unreserveLocked(e.client, reserved)
	e.size = size
	e.expires = s.now().Add(s.ttl)
	if done && !e.done && s.m[e.id] == e { // a dropped episode left its client's count then
		s.doneLocked(e)
	}
	e.done = done
}

// remove drops episode id and reports whether it was there (with owner not "", only one that
// client owner started).
func (s *store) remove(id, owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if ok && owner != "" && e.client != owner {
		return false
	}
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

// clientHeld returns the bytes of client's stored episodes and those reserved for their steps
// in flight.
func (s *store) clientHeld(client string) (bytes, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.clients[client]; u != nil {
		return u.bytes, u.reserved
	}
	return 0, 0
}
