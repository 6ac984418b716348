package teachers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/chainedsql/chainedsql/internal/textcap"
)

// What one reply may hold while it is read (docs/DESIGN.md, "Bounded texts"). A reply is read
// as it arrives: the fields no reader reads are scanned and dropped (scan.go), and each text
// the reply assembles (its content, each reasoning field) keeps its first maxReplyText bytes,
// the rest counted and dropped as it arrives (the text then ends as textcap.Cut ends it); each
// string that may feed one keeps its own first maxReplyText bytes. What one completion or
// stream chunk keeps of its JSON, less the texts, of its texts past maxReplyText each, and what
// what decoding its values allocates, is at most maxUnit bytes: past maxUnit, or past maxResponseBytes, the attempt fails with
// ReasonTooLong, retried.
const (
	// maxReplyText is textcap.Reply, what a trajectory keeps of each text of a reply: a longer
	// one is cut there, as the Stepper cut it when the client returned it whole.
	maxReplyText = textcap.Reply
	// maxUnit bounds what one completion or stream chunk keeps of its JSON, its texts aside
	// (the members the client reads, far less in any reply, and a number for each text's
	// string), with what its texts hold past maxReplyText each (strings repeated or joined)
	// and what decoding its values allocates past their JSON (valueBytes: "{}" in a list is a
	// 56-byte Choice in a growing slice, a message an oai.Message).
	maxUnit = 4 * maxReplyText
)

// ReplyBudget bounds the bytes that all of the process's replies hold together while they are
// read and assembled (the completion or chunk being read, its decoding, the reply's texts),
// whatever the teachers' max_concurrency. Each attempt takes ReplyFloor of it before its
// request is sent, waiting for room if need be; past its floor it takes more as it needs it,
// from all but ReplyReserve of the budget, or fails at once with ReasonReplyBudget (retried,
// its retry waiting, before it sends, for the room it needed past its floor, from all but
// ReplyReserve too).
const ReplyBudget = 256 << 20

// ReplyFloor is the room an attempt takes before its request is sent: an ordinary reply (its
// texts up to about 200 KiB) is read within it and never fails for want of room.
const ReplyFloor = 256 << 10

// ReplyReserve is the part of ReplyBudget that only floors may take: replies that hold all the
// room they may cannot keep the next attempts (ReplyReserve / ReplyFloor of them, 256, at the
// least) from being sent.
const ReplyReserve = ReplyBudget / 4

// budget is the room that the attempts of the process hold, shared by every client. An
// attempt takes a floor before it sends its request (admit), waiting in turn for room; the
// retry of an attempt refused room then takes, also before it sends, the room it will need
// past its floor (await), waiting in turn for it within all but the reserve, so that no retry
// takes the reserve the next attempts' floors need. Neither wait can deadlock: an attempt
// waiting for its floor holds nothing, one waiting for room past its floor holds only its
// floor, which no one waits for past floors, and every byte held past floors belongs to an
// attempt reading its reply, which ends within its timeout. While it reads, an attempt takes
// room past its floor (grow) at once or not at all, never waiting while it reads.
type budget struct {
	limit   int64 // all that attempts hold together
	reserve int64 // the last bytes of limit, which only floors take
	floor   int64 // the floor of every attempt

	mu      sync.Mutex
	floors  int64     // held as floors
	grown   int64     // held past floors
	waiters []*waiter // attempts waiting for their floor, in arrival order
	extras  []*waiter // attempts holding their floor, waiting for room past it, in arrival order
}

// waiter is an attempt waiting for its floor n; ready is closed once it holds it.
type waiter struct {
	n     int64
	ready chan struct{}
}

// replyBudget is the process's reply budget; tests change its limits.
var replyBudget = &budget{limit: ReplyBudget, reserve: ReplyReserve, floor: ReplyFloor}

// used is what the attempts hold.
func (b *budget) used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.floors + b.grown
}

// maxFloor is the largest floor an attempt may ask for: all of the reserve (and never more than
// the limit), so that it is admitted once the floors before it leave that much.
func (b *budget) maxFloor() int64 { return min(b.reserve, b.limit) }

// admit takes a floor of n bytes (at most maxFloor), waiting while the room held leaves less
// and while attempts that came first wait; the context's error when it ends first.
func (b *budget) admit(ctx context.Context, n int64) error {
	return b.wait(ctx, &b.waiters, &b.floors, min(n, b.maxFloor()))
}

// await takes n bytes past a floor the attempt holds (at most all but the reserve), waiting
// while they do not fit (growFits) and while attempts that came first wait; the context's
// error when it ends first.
func (b *budget) await(ctx context.Context, n int64) error {
	return b.wait(ctx, &b.extras, &b.grown, min(n, b.limit-b.reserve))
}

// wait takes n bytes into *held when they fit, else waits in q for admitWaiting to take them.
func (b *budget) wait(ctx context.Context, q *[]*waiter, held *int64, n int64) error {
	b.mu.Lock()
	if len(*q) == 0 && b.fits(q, n) {
		*held += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	*q = append(*q, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // admitted meanwhile: give it back
		*held -= n
	default:
		*q = slices.DeleteFunc(*q, func(x *waiter) bool { return x == w })
	}
	b.admitWaiting()
	return ctx.Err()
}

// fits reports whether n more bytes fit for the waiters of q: a floor anywhere in the limit,
// room past floors within all but the reserve (growFits). b.mu is held.
func (b *budget) fits(q *[]*waiter, n int64) bool {
	if q == &b.extras {
		return b.growFits(n)
	}
	return b.floors+b.grown+n <= b.limit
}

// admitWaiting gives the waiting attempts their floors, then the room past them, in order,
// while they fit. b.mu is held.
func (b *budget) admitWaiting() {
	for len(b.waiters) > 0 && b.fits(&b.waiters, b.waiters[0].n) {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.floors += w.n
		close(w.ready)
	}
	for len(b.extras) > 0 && b.growFits(b.extras[0].n) {
		w := b.extras[0]
		b.extras = b.extras[1:]
		b.grown += w.n
		close(w.ready)
	}
}

// growFits reports whether n bytes past the floors fit, all but the reserve counted. b.mu is
// held.
func (b *budget) growFits(n int64) bool {
	return b.grown+n <= b.limit-b.reserve && b.floors+b.grown+n <= b.limit
}

// grow takes n bytes past a floor when they fit (growFits).
func (b *budget) grow(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.growFits(n) {
		return false
	}
	b.grown += n
	return true
}

// give returns a floor and room taken past it.
func (b *budget) give(floor, grown int64) {
	if floor == 0 && grown == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.floors -= floor
	b.grown -= grown
	b.admitWaiting()
}

// errReplyBudget fails an attempt that found no room in the reply budget.
var errReplyBudget = errors.New("the replies being read hold the reply budget")

// budgetError is an attempt refused room: it held, or asked to hold, want bytes in all.
type budgetError struct {
	want  int64
	limit int64
	more  int64 // what it asked for past what it held
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("%v (%d MiB; %d more bytes wanted)", errReplyBudget, e.limit>>20, e.more)
}

func (e *budgetError) Is(target error) bool { return target == errReplyBudget }

// A meter is what one attempt holds of the reply budget: its floor and, for the retry of an
// attempt refused room, the room past it that it took before the request was sent (pre); what
// it took past them while it read; within them all, what each of its uses (slot*) holds now.
// A use grows as its buffers grow (the completion or chunk being read before it grows, the
// texts just after a completion or chunk grew them) and falls back when a completion or chunk
// has been folded in: what the meter took past its floor and pre while it read is given back
// as its uses fall, the floor and pre when the attempt ends (release). A nil meter holds
// nothing and refuses nothing.
type meter struct {
	b      *budget
	floor  int64
	pre    int64
	grown  int64
	held   [slots]int64
	refuse *budgetError // the refusal, once the attempt was refused room
}

// The uses of a meter.
const (
	slotUnit   = iota // the kept JSON of the completion or chunk being read (its buffer's capacity)
	slotPieces        // that completion's or chunk's texts (their buffers' capacity)
	slotDecode        // its decoding: twice its kept JSON and what its values allocate (reducer.decoded)
	slotText          // the reply's texts (their buffers' capacity)
	slotHead          // the first bytes of a failure response's body
	slots
)

func newMeter(b *budget) *meter { return &meter{b: b} }

// admit takes n bytes for the attempt before its request is sent: the budget's floor (see
// budget.admit), then, when n is more (a retry's: retryFloor), the rest past it (see
// budget.await), at most maxFloor in all.
func (m *meter) admit(ctx context.Context, n int64) error {
	if m == nil {
		return nil
	}
	n = min(n, m.b.maxFloor())
	floor := min(n, m.b.floor)
	if err := m.b.admit(ctx, floor); err != nil {
		return err
	}
	if n > floor {
		if err := m.b.await(ctx, n-floor); err != nil {
			m.b.give(floor, 0)
			return err
		}
	}
	m.floor, m.pre = floor, n-floor
	return nil
}

// total is what the meter's uses hold.
func (m *meter) total() int64 {
	var n int64
	for _, h := range m.held {
		n += h
	}
	return n
}

// need makes slot hold at least n bytes, or fails with a *budgetError (errReplyBudget).
func (m *meter) need(slot int, n int) error {
	if m == nil || int64(n) <= m.held[slot] {
		return nil
	}
	return m.set(slot, n)
}

// set makes slot hold n bytes: more room is taken past the floor at once or refused (a
// *budgetError); room taken past the floor that the uses no longer fill is given back.
func (m *meter) set(slot int, n int) error {
	if m == nil {
		return nil
	}
	want := m.total() - m.held[slot] + int64(n)
	if more := want - m.floor - m.pre - m.grown; more > 0 {
		if !m.b.grow(more) {
			m.refuse = &budgetError{want: want, limit: m.b.limit, more: more}
			return m.refuse
		}
		m.grown += more
	} else if spare := min(m.grown, -more); spare > 0 {
		m.b.give(0, spare)
		m.grown -= spare
	}
	m.held[slot] = int64(n)
	return nil
}

// retryFloor is the room for the attempt after this one to take before it sends its request
// (meter.admit) when this one was refused room: twice what it wanted (so that the retry waits
// for that room rather than being refused again where it was), at most maxFloor; 0 when it
// was not refused.
func (m *meter) retryFloor() int64 {
	if m == nil || m.refuse == nil {
		return 0
	}
	return min(max(2*m.refuse.want, m.b.floor), m.b.maxFloor())
}

// release gives back everything m holds.
func (m *meter) release() {
	if m == nil {
		return
	}
	m.b.give(m.floor, m.pre+m.grown)
	m.floor, m.pre, m.grown, m.held = 0, 0, 0, [slots]int64{}
}

// tooLongError is a reply past the limits on what one reply may hold.
type tooLongError struct{ msg string }

func (e *tooLongError) Error() string { return e.msg }
