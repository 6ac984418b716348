package teachers

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/chainedsql/chainedsql/internal/textcap"
)

// What one reply may hold while it is read (docs/DESIGN.md, "Bounded texts"). A reply is read
// as it arrives: the fields no reader reads are scanned and dropped (scan.go), and each text
// the reply assembles (its content, each reasoning field) keeps its first maxReplyText bytes,
// the rest counted and dropped as it arrives (the text then ends as textcap.Cut ends it). What
// one completion or stream chunk keeps (its JSON, less the texts, and the texts' first bytes)
// is at most maxUnit bytes: past it, or past maxResponseBytes, the attempt fails with
// ReasonTooLong, retried.
const (
	// maxReplyText is textcap.Reply, what a trajectory keeps of each text of a reply: a longer
	// one is cut there, as the Stepper cut it when the client returned it whole.
	maxReplyText = textcap.Reply
	// maxUnit bounds what one completion or stream chunk keeps: four texts of maxReplyText (the
	// content and three reasoning fields), or members the client reads that hold that much.
	maxUnit = 4 * maxReplyText
)

// ReplyBudget bounds the bytes that all of the process's replies hold together while they are
// read and assembled (their kept JSON and texts' first bytes, its decoding, their texts),
// whatever the teachers' max_concurrency: a reply that finds no room left fails its attempt at once with
// ReasonReplyBudget, retried after the backoff.
const ReplyBudget = 256 << 20

// budget is a count of bytes held against a limit, shared by every client of the process.
type budget struct {
	limit int64
	used  atomic.Int64
}

// replyBudget is the process's reply budget; tests lower its limit.
var replyBudget = &budget{limit: ReplyBudget}

// take holds n more bytes when they fit within the limit.
func (b *budget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns n bytes.
func (b *budget) give(n int64) { b.used.Add(-n) }

// errReplyBudget fails an attempt whose reply found no room in the reply budget.
var errReplyBudget = errors.New("the replies being read hold the whole reply budget")

// A meter is what one attempt holds of the reply budget, as the high-water mark of each of its
// uses (slot*): the kept JSON and its decoding are reserved before they grow, the texts just
// after a completion or chunk grew them, and all of it is given back when the attempt ends. A
// nil meter holds nothing and refuses nothing.
type meter struct {
	b    *budget
	held [slots]int64
}

// The uses of a meter.
const (
	slotUnit   = iota // the kept JSON of the completion or chunk being read (its buffer's capacity)
	slotPieces        // that completion's or chunk's texts (their buffers' capacity)
	slotDecode        // its decoding: twice its kept JSON
	slotText          // the reply's texts (their builders' capacity)
	slotHead          // the first bytes of a failure response's body
	slots
)

func newMeter(b *budget) *meter { return &meter{b: b} }

// need holds n bytes for slot (more than it held), or fails with errReplyBudget.
func (m *meter) need(slot int, n int) error {
	if m == nil || int64(n) <= m.held[slot] {
		return nil
	}
	more := int64(n) - m.held[slot]
	if !m.b.take(more) {
		return fmt.Errorf("%w (%d MiB; %d more bytes wanted)", errReplyBudget, m.b.limit>>20, more)
	}
	m.held[slot] = int64(n)
	return nil
}

// release gives back everything m holds.
func (m *meter) release() {
	if m == nil {
		return
	}
	var n int64
	for i, h := range m.held {
		n += h
		m.held[i] = 0
	}
	m.b.give(n)
}

// tooLongError is a reply past the limits on what one reply may hold.
type tooLongError struct{ msg string }

func (e *tooLongError) Error() string { return e.msg }
