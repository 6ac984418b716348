package teachers

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A reply is read as it arrives, never whole: a plain body, and each data line of an event
// stream, is scanned once by a reducer, which checks that it is JSON (as encoding/json does:
// RFC 8259, nesting at most maxDepth deep) and keeps, in a buffer of at most maxUnit bytes
// with the texts aside, only what the client decodes: the members of the objects of a shape
// (wire.go), matched by name as encoding/json matches a struct's fields. A member no reader
// reads (logprobs, a provider's extras, anything a hostile server adds) is scanned and
// dropped, whatever its size. A text of the reply (content, a reasoning field) is decoded aside as it arrives: its
// first bytes are kept, the rest only counted, and it stands in the buffer as its number
// (text). The buffer is then decoded with encoding/json into internal/oai's types as before and
// each text looked up by its number (piece), so a reply decodes to what it did when it was read
// whole, each text cut as textcap.Cut cuts it.
//
// The limit on a text is on each text the reply assembles (its content, each reasoning field),
// not on each JSON string: each string under a text shape keeps its own first bytes, up to the
// limit, whether or not the reply reads it, so the assembly finds in every string it reads as
// many bytes as its text still has room for, whatever the reply reads before it. Which strings
// the reply reads is known only once the whole completion or chunk is decoded (a choice's index,
// or a delta after its message, may come after its texts; a reasoning_details entry's type after
// its texts; a repeated "choices" or "reasoning_details" is merged element by element into the
// one before it, as encoding/json decodes it, so a later index 0 makes an earlier choice's texts
// read). Nothing is given back on a guess: a value that replaces the one before it, as
// encoding/json decodes it (a string a text, anything a reasoning, null a list or a message),
// gives back that one's room at once, and what the texts hold past the limit of each counts
// toward the completion's or chunk's maxUnit with its JSON (reducer.kept): a reply's texts of a
// few times the limit each are read, a hostile one with more fails as too long. So does what
// encoding/json allocates to decode each value past twice its JSON (valueBytes): an element of
// a list the client decodes ("choices", "reasoning_details"), whose struct in the growing slice
// takes far more than the JSON of an empty object, the struct of a choice's message or delta,
// what usage's UnmarshalJSON allocates, a type error, and a leaf's numbers, bytes that are
// not UTF-8 and nesting (leafBytes).

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// src is a response body read through a bufio.Reader: it counts the bytes consumed and its
// input ends after limit bytes (over is set when the body had more). In line mode (an event
// stream) a '\n' between JSON tokens ends the value's input as well, left unread.
type src struct {
	r     *bufio.Reader
	limit int64
	n     int64
	line  bool
	err   error // the read error that ended the input, other than io.EOF
	over  bool
}

func newSrc(body io.Reader, limit int64, line bool) *src {
	return &src{r: bufio.NewReaderSize(io.LimitReader(body, limit+1), 32<<10), limit: limit, line: line}
}

// avail returns the bytes that can be consumed now, reading when none are buffered; empty at
// the end of the input (the body's end, a read error, the limit).
func (s *src) avail() []byte {
	if s.r.Buffered() == 0 {
		if s.err != nil {
			return nil
		}
		if _, err := s.r.Peek(1); err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			return nil
		}
	}
	b, _ := s.r.Peek(s.r.Buffered())
	if room := s.limit - s.n; int64(len(b)) > room {
		b = b[:room]
		if room == 0 {
			s.over = true
		}
	}
	return b
}

// skip consumes k bytes of what avail returned.
func (s *src) skip(k int) {
	_, _ = s.r.Discard(k)
	s.n += int64(k)
}

// peek returns the next byte without consuming it; false at the end of the input.
func (s *src) peek() (byte, bool) {
	if b := s.avail(); len(b) > 0 {
		return b[0], true
	}
	return 0, false
}

// has reports whether the input goes on with prefix (not consumed).
func (s *src) has(prefix string) bool {
	b, err := s.r.Peek(len(prefix))
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) && s.err == nil {
		s.err = err
	}
	return int64(len(prefix)) <= s.limit-s.n && string(b) == prefix
}

// peekUpTo returns up to n next bytes (fewer at the end of the input), not consumed.
func (s *src) peekUpTo(n int) []byte {
	b, err := s.r.Peek(n)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) && s.err == nil {
		s.err = err
	}
	return b[:min(int64(len(b)), s.limit-s.n)]
}

// ws skips JSON whitespace and returns the next byte, not consumed; false at the end of the
// input (in line mode, at the newline).
func (s *src) ws() (byte, bool) {
	for {
		b := s.avail()
		if len(b) == 0 {
			return 0, false
		}
		i := 0
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || (b[i] == '\n' && !s.line)) {
			i++
		}
		if i < len(b) {
			c := b[i]
			s.skip(i)
			if c == '\n' {
				return 0, false
			}
			return c, true
		}
		s.skip(i)
	}
}

// lineSpace skips what bytes.TrimSpace trims (Unicode white space) up to the end of the line,
// the '\n' left unread.
func (s *src) lineSpace() {
	for {
		b := s.avail()
		if len(b) == 0 {
			return
		}
		c := b[0]
		if c == '\n' {
			return
		}
		if c < utf8.RuneSelf {
			if c != ' ' && (c < '\t' || c > '\r') {
				return
			}
			s.skip(1)
			continue
		}
		if len(b) < utf8.UTFMax {
			b, _ = s.r.Peek(utf8.UTFMax) // a rune across the buffer's end
			b = b[:min(int64(len(b)), s.limit-s.n)]
		}
		r, size := utf8.DecodeRune(b)
		if (r == utf8.RuneError && size <= 1) || !unicode.IsSpace(r) {
			return
		}
		s.skip(size)
	}
}

// endLine consumes the rest of the line and its newline; false when the input ended first.
func (s *src) endLine() bool {
	for {
		b := s.avail()
		if len(b) == 0 {
			return false
		}
		for i, c := range b {
			if c == '\n' {
				s.skip(i + 1)
				return true
			}
		}
		s.skip(len(b))
	}
}

// errEnd is the input ending inside a JSON value.
var errEnd = errors.New("unexpected end of JSON input")

// Shape kinds.
const (
	shapeLeaf   = iota // kept as it is
	shapeBlank         // a string field nothing reads: a string is kept as "", its type is all that counts
	shapeText          // a text of the reply: a string is decoded aside (reducer.text)
	shapeObject        // an object, only the members named kept
	shapeArray         // an array of elem
)

// A shape is what the client decodes of a JSON value. A value of another kind than its shape's
// (an array where an object is read, an object for a string) is a type error to encoding/json
// whatever it holds, so a reducer keeps it as an empty container; a string, number or literal
// is kept as it is, but a string where text is set, which is a text of the reply.
type shape struct {
	kind    int
	text    bool
	out     int  // the text of the reply a string under it feeds (textContent...), where text
	raw     bool // decoded as json.RawMessage: any value replaces the one before it
	members []member
	elem    *shape
	// What encoding/json allocates to decode a value under the shape, past what its JSON's
	// bytes count (twice them: the strings and raw values it copies), garbage included, counted
	// toward maxUnit and the decoding's room (reducer.decoded, valueBytes): elemBytes for each
	// element of an array shape, the slice's growth (listShape); newBytes for a value other than
	// null, the struct a pointer member allocates (a choice's message or delta) or what an
	// UnmarshalJSON method allocates (usage); perByte for each byte of the value's kept JSON
	// (usage's numbers, copied into the errors of strconv that its method reads them through).
	elemBytes, newBytes, perByte int
}

// member is an object's member kept under a shape.
type member struct {
	name string
	sh   *shape
}

var (
	leafShape  = &shape{kind: shapeLeaf}
	blankShape = &shape{kind: shapeBlank}
	// The texts of a reply, by the text each feeds.
	contentShape          = &shape{kind: shapeText, text: true, out: textContent}
	reasoningContentShape = &shape{kind: shapeText, text: true, out: textReasoningContent}
	reasoningTextShape    = &shape{kind: shapeText, text: true, out: textReasoning}
	detailTextShape       = &shape{kind: shapeText, text: true, out: textDetails}
)

// The texts a reply assembles: its content, then its reasoning fields in fieldOrder.
const (
	textContent = iota
	textReasoningContent
	textReasoning
	textDetails
	textOuts
)

func objectShape(members ...member) *shape { return &shape{kind: shapeObject, members: members} }

// pointerShape is an object shape that encoding/json decodes into a pointer to a struct of
// size bytes, or through an UnmarshalJSON method that allocates at most size bytes, perByte
// more for each byte of the object's JSON: each value other than null under it counts them
// (a pointer set to null, then to an object again, allocates a new struct).
func pointerShape(size uintptr, perByte int, members ...member) *shape {
	sh := objectShape(members...)
	sh.newBytes, sh.perByte = allocBytes(int(size)), perByte
	return sh
}

// listShape is an array shape whose elements decode into a slice of a struct of size bytes:
// each element counts toward maxUnit what encoding/json allocates for it while the slice
// grows, however short its JSON ("{}" is two bytes, a Choice 56): the slice grows by a
// quarter at a time past 256 elements, so the slices it allocated and dropped on the way
// sum to up to 6.25 times the elements' size (6.15 measured, size classes included).
func listShape(elem *shape, size uintptr) *shape {
	return &shape{kind: shapeArray, elem: elem, elemBytes: 7 * int(size)}
}

// allocBytes is n rounded up to the size class of the Go allocator that holds it, or more: a
// multiple of 16 up to 256 bytes (the classes there are 8, then multiples of 16), of 256
// above.
func allocBytes(n int) int {
	if n <= 256 {
		return (n + 15) &^ 15
	}
	return (n + 255) &^ 255
}

// The allocations of decoding a value beside its shape's (valueBytes).
var (
	// typeErrorBytes is the *json.UnmarshalTypeError that a value of the wrong type allocates,
	// although encoding/json returns only the first one.
	typeErrorBytes = allocBytes(int(unsafe.Sizeof(json.UnmarshalTypeError{})))
	// textBytes is what a text's string allocates: the number it stands as (a few bytes) and,
	// for content and reasoning_content, the *string that holds it.
	textBytes = 2 * allocBytes(int(unsafe.Sizeof("")))
)

// What decoding a leaf's kept JSON allocates past twice its bytes (leafBytes), garbage included:
// a number that does not fit its field is copied into strconv's error, the type error's value
// and the message that error becomes (3.4 times a 64 KiB count in created or index, plain,
// against the 2 bytes a byte counted before); a byte of a string that is not UTF-8 becomes
// U+FFFD, three bytes, in a buffer that doubles as it fills (5.2 times a 64 KiB model or
// finish_reason, 6.3 times an error event's message); a container (an object or
// array where a number or string is read, or an error's list of messages) takes encoding/json's
// scanner a state for each level it nests, some 36 bytes, each time it is decoded (8.9 times a
// model nested 10,000 deep; an error event's message is decoded four times, a usage's count
// twice). A string's other bytes are copied once or twice, as counted.
const (
	leafNumberByte = 6   // for each byte of a number
	leafBadUTF8    = 12  // for each byte of a string that is not UTF-8
	leafContainer  = 160 // for each '{' or '['
)

// leafBytes is what encoding/json allocates to decode the kept JSON b of a leaf past twice its
// bytes (leafNumberByte...).
func leafBytes(b []byte) int {
	n, str := 0, false
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case str && c == '\\':
			i += 2 // an escape decodes to no more bytes than it takes: \uXXXX to at most three
			continue
		case c == '"':
			str = !str
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				n += leafBadUTF8
			}
			i += size
			continue
		case str:
		case c == '{' || c == '[':
			n += leafContainer
		case c == '-' || c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+':
			n += leafNumberByte
		}
		i++
	}
	return n
}

// valueBytes is what encoding/json allocates to decode a value under sh that begins with c,
// past twice its JSON's bytes: nothing for null, the pointer's struct or the method's
// allocations (newBytes) otherwise, and a type error for a value of the wrong type. A leaf
// (a number or string, by the member) always counts one.
func valueBytes(sh *shape, c byte) int {
	if c == 'n' {
		return 0
	}
	n := sh.newBytes
	switch {
	case sh.raw: // json.RawMessage takes any value, copying its bytes
	case sh.text && c == '"':
		n += textBytes
	case sh.kind == shapeBlank && c == '"', sh.kind == shapeObject && c == '{', sh.kind == shapeArray && c == '[':
	default:
		n += typeErrorBytes
	}
	return n
}

// find returns the shape of the member whose raw key is raw (see memberIndex), nil when it is
// not kept.
func (sh *shape) find(raw []byte, long bool) *shape {
	if i := sh.memberIndex(raw, long); i >= 0 {
		return sh.members[i].sh
	}
	return nil
}

// memberIndex returns the index of the member whose raw key (quoted, escaped as it came) is
// raw, -1 when it is not kept. A key matches a name as encoding/json matches a field's: equal
// under Unicode case folding (so every name of a member of any case is kept). long: the raw
// key was longer than maxKey, longer than any name can be.
func (sh *shape) memberIndex(raw []byte, long bool) int {
	if long || len(raw) < 2 {
		return -1
	}
	var key string
	if plain(raw[1 : len(raw)-1]) {
		key = string(raw[1 : len(raw)-1])
	} else if json.Unmarshal(raw, &key) != nil {
		return -1
	}
	for i, m := range sh.members {
		if key == m.name || strings.EqualFold(key, m.name) {
			return i
		}
	}
	return -1
}

// maxMembers bounds the members of an object shape (TestShapesCoverOAI).
const maxMembers = 16

// plain reports whether b is ASCII without escapes.
func plain(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// maxKey bounds the raw key a reducer matches: a name of at most 40 characters, each escaped
// as \uXXXX.
const maxKey = 2 + 6*40

// Sinks of the bytes a reducer scans.
const (
	sinkNone = iota // checked, dropped
	sinkOut         // kept
	sinkKey         // the object key being read
	sinkEsc         // the escape being decoded in a text
)

// A reducer reads one JSON value from a src under a shape and keeps, in out, the JSON the
// client decodes (compact: the whitespace between tokens is dropped), and in pieces the texts
// of the reply that value holds.
type reducer struct {
	s       *src
	out     []byte
	m       *meter
	key     []byte
	keyLong bool
	stack   []byte
	esc     []byte // the escape being decoded in a text
	// limit bounds what each string under a text shape keeps of the value (0 none). heads
	// holds, by the text they feed, the first bytes of those strings, pieces each such string,
	// numbered in the order they came.
	limit  int
	heads  [textOuts][]byte
	pieces []textPiece
	// tails holds the last bytes of each piece longer than what it kept (textcap.Cut reads
	// a marker there), cut those of the piece being read past the limit.
	tails []pieceTail
	cut   textTail
	// merge is the state of the object that the object read next is merged into
	// (encoding/json decodes a member repeated with an object into the one before it).
	merge *objState
	// decoded is what decoding the values read allocates past twice their JSON's bytes (the
	// elements of its lists, the structs its pointers take: shape.elemBytes, valueBytes).
	decoded int
}

// objState is what a reducer knows of an object's members while it reads it and the objects
// merged into it: the pieces of each member's last value that has any; the state of each
// member whose value is an object, into which a next one is merged.
type objState struct {
	spans [maxMembers]span
	sub   [maxMembers]*objState
}

// A span is pieces from to to-1 (none when to is 0).
type span struct{ from, to int }

// A textPiece is a string under a text shape in one completion or chunk as encoding/json
// decodes it: the text of the reply it feeds, out; its first bytes, heads[out][off:end], at
// most the limit; its length in all, n; whether any of it is not white space (what
// strings.TrimSpace trims).
type textPiece struct {
	out, off, end, n int
	nonBlank         bool
}

// pieceBytes is what a textPiece takes in pieces, counted toward the completion's or chunk's
// bound.
const pieceBytes = int(unsafe.Sizeof(textPiece{}))

// A pieceTail is the last bytes of piece k, a piece longer than its first bytes.
type pieceTail struct {
	k int
	t textTail
}

// tailBytes is what a pieceTail takes in tails, counted as pieceBytes is.
const tailBytes = int(unsafe.Sizeof(pieceTail{}))

// unitKeptInitial is the capacity of out and of heads that a reducer keeps from one
// completion or chunk to the next; a larger buffer is dropped once its value has been read.
const unitKeptInitial = 4 << 10

// reset empties out and the texts for the next value of s.
func (d *reducer) reset() {
	d.out, d.pieces, d.tails, d.merge, d.decoded = d.out[:0], d.pieces[:0], d.tails[:0], nil, 0
	for i := range d.heads {
		d.heads[i] = d.heads[i][:0]
	}
}

// done is called once the value read has been decoded and its texts folded: the buffers that
// grew past unitKeptInitial are dropped and the meter's uses fall to what is kept.
func (d *reducer) done() {
	d.reset()
	if cap(d.out) > unitKeptInitial {
		d.out = nil
	}
	for i := range d.heads {
		if cap(d.heads[i]) > unitKeptInitial {
			d.heads[i] = nil
		}
	}
	if cap(d.pieces)*pieceBytes > unitKeptInitial {
		d.pieces = nil
	}
	if cap(d.tails)*tailBytes > unitKeptInitial {
		d.tails = nil
	}
	_ = d.m.set(slotUnit, cap(d.out))            // a fall: never refused
	_ = d.m.set(slotPieces, d.piecesHeld(-1, 0)) // likewise
}

// piecesHeld is the capacity of heads and pieces, heads[out] grown to c bytes when it is less.
func (d *reducer) piecesHeld(out, c int) int {
	n := cap(d.pieces)*pieceBytes + cap(d.tails)*tailBytes
	for i := range d.heads {
		n += cap(d.heads[i])
		if i == out {
			n += max(0, c-cap(d.heads[i]))
		}
	}
	return n
}

// kept is what the value read so far keeps within maxUnit: its JSON and its pieces, what its
// values' decoding allocates (decoded), and of the texts' first bytes what each text holds past
// the limit (all of them where no limit bounds each string).
func (d *reducer) kept() int {
	n := len(d.out) + len(d.pieces)*pieceBytes + len(d.tails)*tailBytes + d.decoded
	for i := range d.heads {
		n += d.past(len(d.heads[i]))
	}
	return n
}

// past is what a text holding h first bytes holds past the limit, counted toward maxUnit.
func (d *reducer) past(h int) int {
	if d.limit == 0 {
		return h
	}
	return max(0, h-d.limit)
}

// room fails once the value would keep n more bytes past maxUnit.
func (d *reducer) room(n int) error {
	if d.kept()+n > maxUnit {
		return &tooLongError{fmt.Sprintf("a completion or stream chunk of the reply keeps over %d bytes once the fields the client does not read are dropped and its texts are cut", maxUnit)}
	}
	return nil
}

// grown is the capacity a buffer of capacity c grows to for n bytes: twice, at least 4 KiB, at
// most limit (0 none).
func grown(c, n, limit int) int {
	c = max(2*c, n, 4<<10)
	if limit > 0 {
		c = min(c, limit)
	}
	return c
}

// put appends p to out within maxUnit bytes, holding its buffer's growth in the meter.
func (d *reducer) put(p []byte) error {
	if err := d.room(len(p)); err != nil {
		return err
	}
	if n := len(d.out) + len(p); n > cap(d.out) {
		c := grown(cap(d.out), n, maxUnit)
		if err := d.m.need(slotUnit, c); err != nil {
			return err
		}
		d.out = append(make([]byte, 0, c), d.out...)
	}
	d.out = append(d.out, p...)
	return nil
}

// keep counts b, the next decoded bytes of the string p (the last of its text's), and keeps
// what the limit leaves of the string's room in heads.
func (d *reducer) keep(p *textPiece, b []byte) error {
	if !p.nonBlank && !spaceOnly(b) {
		p.nonBlank = true
	}
	p.n += len(b)
	h := &d.heads[p.out]
	if d.limit > 0 {
		k := max(0, min(len(b), d.limit-(p.end-p.off)))
		d.cut.push(b[k:])
		b = b[:k]
	}
	if len(b) == 0 {
		return nil
	}
	if err := d.room(d.past(len(*h)+len(b)) - d.past(len(*h))); err != nil {
		return err
	}
	if n := len(*h) + len(b); n > cap(*h) {
		// A text's strings hold at most the limit and, past it, what room leaves of maxUnit:
		// its buffer grows no further (doubling, 5 MiB held took 8 MiB).
		c := grown(cap(*h), n, d.limit)
		if n > c || d.limit == 0 {
			c = grown(cap(*h), n, d.limit+maxUnit)
		}
		if err := d.m.need(slotPieces, d.piecesHeld(p.out, c)); err != nil {
			return err
		}
		*h = append(make([]byte, 0, c), *h...)
	}
	*h = append(*h, b...)
	p.end = len(*h)
	return nil
}

// drop gives back the room of pieces from to to-1 (a value replaced): their bytes leave their
// text's heads, the bytes of the pieces after them move down, and their heads are empty; in
// one pass over those pieces and their bytes.
func (d *reducer) drop(from, to int) {
	var w [textOuts]int // where each text's next kept piece goes, -1 before its first
	for out := range w {
		w[out] = -1
	}
	for i := from; i < len(d.pieces); i++ {
		p := &d.pieces[i]
		if w[p.out] < 0 {
			w[p.out] = p.off
		}
		n := 0
		if i >= to {
			h := d.heads[p.out]
			n = copy(h[w[p.out]:], h[p.off:p.end])
		}
		p.off, p.end = w[p.out], w[p.out]+n
		w[p.out] += n
	}
	for out, n := range w {
		if n >= 0 {
			d.heads[out] = d.heads[out][:n]
		}
	}
}

// dropState gives back the room of the value of member i of an object (its state st) and, when
// it is an object, of its members: a value that replaces it comes.
func (d *reducer) dropState(st *objState, i int) {
	if sp := st.spans[i]; sp.to > sp.from {
		d.drop(sp.from, sp.to)
	}
	st.spans[i] = span{}
	if sub := st.sub[i]; sub != nil {
		for j := range sub.spans {
			d.dropState(sub, j)
		}
		st.sub[i] = nil
	}
}

// replaces reports whether a value beginning with c replaces, as encoding/json decodes it, the
// value before it of a member of shape sh: a string a text, anything a raw value, null a list
// or an object (a slice or a pointer). An object is merged into the object before it, and so
// is each object of a list into the one at its index in the list before it.
func replaces(sh *shape, c byte) bool {
	switch {
	case c == '"' && sh.text, sh.raw:
		return true
	case c == 'n':
		return sh.kind == shapeArray || sh.kind == shapeObject
	}
	return false
}

// spaceOnly reports whether the decoded text b (whole characters) is all white space, as
// strings.TrimSpace sees it.
func spaceOnly(b []byte) bool {
	for len(b) > 0 {
		if c := b[0]; c < utf8.RuneSelf {
			if c != ' ' && (c < '\t' || c > '\r') {
				return false
			}
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		if !unicode.IsSpace(r) {
			return false
		}
		b = b[size:]
	}
	return true
}

// piece is the text that stands as s in a decoded value: the piece numbered s, its last bytes
// end when its head is not all of it.
func (d *reducer) piece(s string) (head []byte, n int, nonBlank bool, end []byte) {
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || k >= len(d.pieces) {
		// Every string under a text shape is a piece's number; anything else decodes to "".
		return nil, 0, false, nil
	}
	p := d.pieces[k]
	head = d.heads[p.out][p.off:p.end]
	if p.n > len(head) {
		for i := len(d.tails) - 1; i >= 0; i-- {
			if d.tails[i].k == k {
				end = d.tails[i].t.b[:d.tails[i].t.n]
				break
			}
		}
	}
	return head, p.n, p.nonBlank, end
}

// endText records the last bytes of piece k, which has just been read, when its head is not
// all of it: the head's last bytes, then those cut off past the limit.
func (d *reducer) endText(k int) error {
	p := d.pieces[k]
	if p.n == p.end-p.off {
		return nil
	}
	if err := d.room(tailBytes); err != nil {
		return err
	}
	if len(d.tails) == cap(d.tails) {
		c := grown(cap(d.tails)*tailBytes, (len(d.tails)+1)*tailBytes, maxUnit) / tailBytes
		if err := d.m.need(slotPieces, d.piecesHeld(-1, 0)+(c-cap(d.tails))*tailBytes); err != nil {
			return err
		}
		d.tails = append(make([]pieceTail, 0, c), d.tails...)
	}
	pt := pieceTail{k: k}
	pt.t.push(d.heads[p.out][p.off:p.end])
	pt.t.push(d.cut.b[:d.cut.n])
	d.tails = append(d.tails, pt)
	return nil
}

// emit sends p to sink.
func (d *reducer) emit(sink int, p []byte) error {
	switch sink {
	case sinkOut:
		return d.put(p)
	case sinkEsc:
		d.esc = append(d.esc, p...)
	case sinkKey:
		if !d.keyLong {
			if len(d.key)+len(p) > maxKey {
				d.keyLong = true
			} else {
				d.key = append(d.key, p...)
			}
		}
	}
	return nil
}

func (d *reducer) emitString(sink int, s string) error {
	if sink == sinkNone {
		return nil
	}
	return d.emit(sink, []byte(s))
}

// syntax is a JSON syntax error at the input's current byte.
func (d *reducer) syntax(format string, args ...any) error {
	return &errDecode{fmt.Errorf("byte %d: %s", d.s.n, fmt.Sprintf(format, args...))}
}

// decodes counts n more bytes that decoding the value read allocates (decoded), within
// maxUnit.
func (d *reducer) decodes(n int) error {
	if err := d.room(n); err != nil {
		return err
	}
	d.decoded += n
	return nil
}

// value reads one value under sh; depth is the number of containers around it. What decoding
// it allocates is counted (valueBytes, and once it has been read shape.perByte and, for a
// leaf, leafBytes).
func (d *reducer) value(sh *shape, depth int) error {
	c, ok := d.s.ws()
	if !ok {
		return errEnd
	}
	if err := d.decodes(valueBytes(sh, c)); err != nil {
		return err
	}
	if (sh.perByte == 0 && sh.kind != shapeLeaf) || c == 'n' {
		return d.valueAs(sh, c, depth)
	}
	from := len(d.out)
	if err := d.valueAs(sh, c, depth); err != nil {
		return err
	}
	n := sh.perByte * (len(d.out) - from)
	if sh.kind == shapeLeaf { // kept as it came: its bytes are d.out[from:]
		n += leafBytes(d.out[from:])
	}
	return d.decodes(n)
}

// valueAs reads the value under sh that begins with c.
func (d *reducer) valueAs(sh *shape, c byte, depth int) error {
	switch {
	case sh.text && c == '"':
		return d.text(sh.out)
	case sh.kind == shapeObject && c == '{':
		return d.object(sh, depth+1)
	case sh.kind == shapeArray && c == '[':
		return d.array(sh, depth+1)
	case sh.kind != shapeLeaf && (c == '{' || c == '['):
		if err := d.put([]byte{c, c + 2}); err != nil { // '}' is '{'+2, ']' is '['+2
			return err
		}
		return d.any(sinkNone, depth)
	case sh.kind == shapeBlank && c == '"':
		if err := d.put([]byte(`""`)); err != nil {
			return err
		}
		return d.str(sinkNone)
	}
	return d.any(sinkOut, depth)
}

// open reads the opening byte of a container depth deep (next) and the whitespace after it;
// done when the container is empty (end read too), else c is the byte that follows.
func (d *reducer) open(depth int, end byte) (c byte, done bool, err error) {
	if depth > maxDepth {
		return 0, false, d.syntax("exceeded max depth")
	}
	s := d.s
	b, _ := s.peek()
	s.skip(1)
	if err := d.put([]byte{b}); err != nil {
		return 0, false, err
	}
	c, ok := s.ws()
	if !ok {
		return 0, false, errEnd
	}
	if c == end {
		s.skip(1)
		return c, true, d.put([]byte{end})
	}
	return c, false, nil
}

// object reads an object (its '{' next), keeping the members sh names.
func (d *reducer) object(sh *shape, depth int) error {
	var own objState
	st := d.merge
	d.merge = nil
	if st == nil {
		st = &own
	}
	c, done, err := d.open(depth, '}')
	if done || err != nil {
		return err
	}
	s, ok := d.s, true
	kept := 0
	for {
		if c != '"' {
			return d.syntax("invalid character %q looking for beginning of object key string", c)
		}
		d.key, d.keyLong = d.key[:0], false
		if err := d.str(sinkKey); err != nil {
			return err
		}
		if c, ok = s.ws(); !ok {
			return errEnd
		} else if c != ':' {
			return d.syntax("invalid character %q after object key", c)
		}
		s.skip(1)
		if i := sh.memberIndex(d.key, d.keyLong); i >= 0 {
			m := sh.members[i].sh
			c, _ := s.ws()
			if replaces(m, c) {
				d.dropState(st, i)
			}
			if c == '{' && m.kind == shapeObject && !m.raw {
				if st.sub[i] == nil {
					st.sub[i] = &objState{}
				}
				d.merge = st.sub[i]
			}
			from := len(d.pieces)
			if kept > 0 {
				if err := d.put([]byte{','}); err != nil {
					return err
				}
			}
			if err := d.put(d.key); err != nil {
				return err
			}
			if err := d.put([]byte{':'}); err != nil {
				return err
			}
			if err := d.value(m, depth); err != nil {
				return err
			}
			if len(d.pieces) > from {
				st.spans[i] = span{from, len(d.pieces)}
			}
			kept++
		} else if err := d.any(sinkNone, depth); err != nil {
			return err
		}
		if more, err := d.next('}', "object key:value pair"); !more || err != nil {
			return err
		}
		if c, ok = s.ws(); !ok {
			return errEnd
		}
	}
}

// next reads what follows a container's member or element (what, for the error): more after
// a ',', not after the container's end (read too).
func (d *reducer) next(end byte, what string) (more bool, err error) {
	c, ok := d.s.ws()
	switch {
	case !ok:
		return false, errEnd
	case c == ',':
		d.s.skip(1)
		return true, nil
	case c == end:
		d.s.skip(1)
		return false, d.put([]byte{end})
	}
	return false, d.syntax("invalid character %q after %s", c, what)
}

// array reads an array (its '[' next), each element under sh.elem.
func (d *reducer) array(sh *shape, depth int) error {
	_, done, err := d.open(depth, ']')
	if done || err != nil {
		return err
	}
	for n := 0; ; n++ {
		if n > 0 {
			if err := d.put([]byte{','}); err != nil {
				return err
			}
		}
		if err := d.decodes(sh.elemBytes); err != nil {
			return err
		}
		if err := d.value(sh.elem, depth); err != nil {
			return err
		}
		if more, err := d.next(']', "array element"); !more || err != nil {
			return err
		}
	}
}

// States of any.
const (
	wantValue = iota // a value
	wantFirst        // after '{': a key or '}'
	wantElem         // after '[': a value or ']'
	wantKey          // after ',' in an object: a key
	wantColon        // after a key
	wantNext         // after a value: ',' or the container's end
)

// any reads one value of any kind to sink, without recursion (a value may nest maxDepth deep);
// depth is the number of containers around it. The structure is read straight from the
// buffer; strings, numbers and literals by their own readers.
func (d *reducer) any(sink int, depth int) error {
	s := d.s
	stack := d.stack[:0]
	defer func() { d.stack = stack[:0] }()
	state := wantValue
	for {
		b := s.avail()
		if len(b) == 0 {
			return errEnd
		}
		i := 0
	scan:
		for ; i < len(b); i++ {
			c := b[i]
			switch c {
			case ' ', '\t', '\r':
				continue
			case '\n':
				if s.line {
					s.skip(i)
					return errEnd
				}
				continue
			}
			if state == wantElem {
				if c != ']' {
					state = wantValue
				} else {
					state = wantNext
					c = top(stack) + 2
				}
			}
			switch state {
			case wantValue:
				switch {
				case c == '{' || c == '[':
					if depth+len(stack)+1 > maxDepth {
						s.skip(i)
						return d.syntax("exceeded max depth")
					}
					stack = append(stack, c)
					state = wantFirst
					if c == '[' {
						state = wantElem
					}
					if err := d.emit(sink, b[i:i+1]); err != nil {
						return err
					}
					continue
				case c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n':
					s.skip(i)
					var err error
					switch {
					case c == '"':
						err = d.str(sink)
					case c == 't' || c == 'f' || c == 'n':
						err = d.literal(sink, literals[c])
					default:
						err = d.number(sink)
					}
					if err != nil || len(stack) == 0 {
						return err
					}
					state = wantNext
					break scan
				}
				s.skip(i)
				return d.syntax("invalid character %q looking for beginning of value", c)
			case wantFirst, wantKey:
				if c == '}' && state == wantFirst {
					state = wantNext
					break // closes the object below
				}
				s.skip(i)
				if c != '"' {
					return d.syntax("invalid character %q looking for beginning of object key string", c)
				}
				if err := d.str(sink); err != nil {
					return err
				}
				state = wantColon
				break scan
			case wantColon:
				if c != ':' {
					s.skip(i)
					return d.syntax("invalid character %q after object key", c)
				}
				state = wantValue
				if err := d.emit(sink, b[i:i+1]); err != nil {
					return err
				}
				continue
			}
			// wantNext: a separator or the container's end.
			t := top(stack)
			switch {
			case c == ',':
				state = wantValue
				if t == '{' {
					state = wantKey
				}
			case c == t+2: // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
			default:
				s.skip(i)
				what := "array element"
				if t == '{' {
					what = "object key:value pair"
				}
				return d.syntax("invalid character %q after %s", c, what)
			}
			if err := d.emit(sink, b[i:i+1]); err != nil {
				return err
			}
			if len(stack) == 0 {
				s.skip(i + 1)
				return nil
			}
		}
		if i == len(b) {
			s.skip(i)
		}
	}
}

// top is the innermost open container's opening byte.
func top(stack []byte) byte { return stack[len(stack)-1] }

// str reads a string (its '"' next) to sink, as it came (escapes kept).
func (d *reducer) str(sink int) error {
	s := d.s
	s.skip(1)
	if err := d.emit(sink, []byte{'"'}); err != nil {
		return err
	}
	for {
		b := s.avail()
		if len(b) == 0 {
			return errEnd
		}
		i := 0
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++
		}
		if err := d.emit(sink, b[:i]); err != nil {
			return err
		}
		if i == len(b) {
			s.skip(i)
			continue
		}
		c := b[i]
		s.skip(i)
		switch {
		case c == '"':
			s.skip(1)
			return d.emit(sink, []byte{'"'})
		case c == '\n' && s.line:
			return errEnd
		case c < 0x20:
			return d.syntax("invalid character %q in string literal", c)
		}
		if err := d.escape(sink); err != nil {
			return err
		}
	}
}

// text reads a string (its '"' next) that feeds the text out of the reply: in out it stands as
// its number among the value's pieces; its bytes, decoded as encoding/json decodes them
// (escapes, surrogate pairs, U+FFFD for a lone surrogate and for each byte that is not UTF-8),
// are counted, and its first d.limit bytes (all where d.limit is 0) kept in heads[out].
func (d *reducer) text(out int) error {
	if err := d.room(pieceBytes); err != nil {
		return err
	}
	if len(d.pieces) == cap(d.pieces) {
		c := grown(cap(d.pieces)*pieceBytes, (len(d.pieces)+1)*pieceBytes, maxUnit) / pieceBytes
		if err := d.m.need(slotPieces, d.piecesHeld(-1, 0)+(c-cap(d.pieces))*pieceBytes); err != nil {
			return err
		}
		d.pieces = append(make([]textPiece, 0, c), d.pieces...)
	}
	k := len(d.pieces)
	h := len(d.heads[out])
	d.pieces = append(d.pieces, textPiece{out: out, off: h, end: h})
	d.cut.n = 0
	var num [24]byte
	if err := d.put(append(strconv.AppendInt(append(num[:0], '"'), int64(k), 10), '"')); err != nil {
		return err
	}
	s := d.s
	s.skip(1)
	for {
		b := s.avail()
		if len(b) == 0 {
			return errEnd
		}
		// The bytes that decode to themselves: printable ASCII but '"' and '\\', and whole
		// UTF-8 characters.
		i := 0
		for i < len(b) {
			c := b[i]
			if c < utf8.RuneSelf {
				if c < 0x20 || c == '"' || c == '\\' {
					break
				}
				i++
				continue
			}
			if !utf8.FullRune(b[i:]) {
				break
			}
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		if err := d.keep(&d.pieces[k], b[:i]); err != nil {
			return err
		}
		s.skip(i)
		if i == len(b) {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			s.skip(1)
			return d.endText(k)
		case c == '\\':
			if err := d.textEscape(&d.pieces[k]); err != nil {
				return err
			}
		case c == '\n' && s.line:
			return errEnd
		case c < 0x20:
			return d.syntax("invalid character %q in string literal", c)
		default:
			// Not UTF-8, or a character cut by the end of what is buffered.
			p := s.peekUpTo(utf8.UTFMax)
			r, size := utf8.DecodeRune(p)
			if r == utf8.RuneError && size <= 1 {
				size = 1 // each byte that is not UTF-8 is U+FFFD, as encoding/json decodes it
			}
			if err := d.keep(&d.pieces[k], utf8.AppendRune(num[:0], r)); err != nil {
				return err
			}
			s.skip(size)
		}
	}
}

// textEscape reads an escape of a text (its '\\' next) and keeps what it decodes to: a
// \uXXXX that is half of a surrogate pair takes the other half when the next escape is it,
// and is U+FFFD when it is not.
func (d *reducer) textEscape(p *textPiece) error {
	d.esc = d.esc[:0]
	if err := d.escape(sinkEsc); err != nil {
		return err
	}
	var r rune
	if d.esc[1] != 'u' {
		r = rune(unescaped(d.esc[1]))
	} else {
		r = hex4(d.esc[2:6])
		if utf16.IsSurrogate(r) {
			next := d.s.peekUpTo(6)
			if len(next) == 6 && next[0] == '\\' && next[1] == 'u' && isHex4(next[2:6]) {
				if pair := utf16.DecodeRune(r, hex4(next[2:6])); pair != unicode.ReplacementChar {
					d.s.skip(6)
					r = pair
				}
			}
			if utf16.IsSurrogate(r) {
				r = unicode.ReplacementChar
			}
		}
	}
	var buf [utf8.UTFMax]byte
	return d.keep(p, utf8.AppendRune(buf[:0], r))
}

// unescaped is the byte that the one-letter escape \c stands for.
func unescaped(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // '"', '\\', '/'
}

// isHex4 reports whether b is four hexadecimal digits.
func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// hex4 is the value of four hexadecimal digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// escape reads a string's escape (its '\\' next) to sink.
func (d *reducer) escape(sink int) error {
	s := d.s
	s.skip(1)
	c, ok := s.peek()
	if !ok {
		return errEnd
	}
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.skip(1)
		return d.emit(sink, []byte{'\\', c})
	case 'u':
		s.skip(1)
		esc := []byte{'\\', 'u', 0, 0, 0, 0}
		for i := 2; i < 6; i++ {
			h, ok := s.peek()
			if !ok {
				return errEnd
			}
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return d.syntax("invalid character %q in \\u hexadecimal character escape", h)
			}
			s.skip(1)
			esc[i] = h
		}
		return d.emit(sink, esc)
	}
	return d.syntax("invalid character %q in string escape code", c)
}

// number reads a number (RFC 8259's grammar) to sink.
func (d *reducer) number(sink int) error {
	s := d.s
	var buf [64]byte
	b := buf[:0]
	next := func() (byte, bool) {
		c, ok := s.peek()
		return c, ok
	}
	take := func(c byte) error {
		s.skip(1)
		b = append(b, c)
		if len(b) == cap(buf) {
			err := d.emit(sink, b)
			b = b[:0]
			return err
		}
		return nil
	}
	digits := func() (int, error) {
		n := 0
		for {
			c, ok := next()
			if !ok || c < '0' || c > '9' {
				return n, nil
			}
			if err := take(c); err != nil {
				return n, err
			}
			n++
		}
	}
	c, _ := next()
	if c == '-' {
		if err := take(c); err != nil {
			return err
		}
		var ok bool
		if c, ok = next(); !ok {
			return errEnd
		}
	}
	switch {
	case c == '0':
		if err := take(c); err != nil {
			return err
		}
	case c >= '1' && c <= '9':
		if _, err := digits(); err != nil {
			return err
		}
	default:
		return d.syntax("invalid character %q in numeric literal", c)
	}
	if c, ok := next(); ok && c == '.' {
		if err := take(c); err != nil {
			return err
		}
		if n, err := digits(); err != nil {
			return err
		} else if n == 0 {
			return d.digitWanted("after decimal point in numeric literal")
		}
	}
	if c, ok := next(); ok && (c == 'e' || c == 'E') {
		if err := take(c); err != nil {
			return err
		}
		if c, ok := next(); ok && (c == '+' || c == '-') {
			if err := take(c); err != nil {
				return err
			}
		}
		if n, err := digits(); err != nil {
			return err
		} else if n == 0 {
			return d.digitWanted("in exponent of numeric literal")
		}
	}
	return d.emit(sink, b)
}

// digitWanted is the error of a number missing a digit where it needs one.
func (d *reducer) digitWanted(where string) error {
	c, ok := d.s.peek()
	if !ok || (c == '\n' && d.s.line) {
		return errEnd
	}
	return d.syntax("invalid character %q %s", c, where)
}

// literals are the literals by their first byte.
var literals = map[byte]string{'t': "true", 'f': "false", 'n': "null"}

// literal reads true, false or null (lit) to sink.
func (d *reducer) literal(sink int, lit string) error {
	s := d.s
	for i := 0; i < len(lit); i++ {
		c, ok := s.peek()
		if !ok || (c == '\n' && s.line) {
			return errEnd
		}
		if c != lit[i] {
			return d.syntax("invalid character %q in literal %s (expecting %q)", c, lit, lit[i])
		}
		s.skip(1)
	}
	return d.emitString(sink, lit)
}

// reduce reads one whole JSON body from s under sh into d.out: the value, then only
// whitespace to the end. A syntax error is an *errDecode; the input ending inside the value is
// a read error when one ended it, a *tooLongError when the body was over the limit, else an
// *errDecode.
func (d *reducer) reduce(sh *shape) error {
	s := d.s
	err := d.value(sh, 0)
	if err == nil {
		if c, ok := s.ws(); ok {
			err = d.syntax("invalid character %q after top-level value", c)
		}
	}
	switch {
	case s.err != nil && (err == nil || errors.Is(err, errEnd)):
		return s.err
	case errors.Is(err, errEnd) && s.over:
		return &tooLongError{fmt.Sprintf("the body is longer than %d bytes", s.limit)}
	case errors.Is(err, errEnd):
		return &errDecode{fmt.Errorf("the %d-byte body: %w", s.n, err)}
	}
	return err
}
