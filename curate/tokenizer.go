package curate

// Offset is a token's byte range [Start, End) in the encoded text.
type Offset struct{ Start, End int }

// Tokenizer is what curate needs of the student's tokenizer (inference/tokenizer): ids, byte
// offsets, decoding, the ids of added tokens such as <|im_start|>, and its special tokens.
// Implementations must be safe for concurrent use. Wrap an *tokenizer.Tokenizer with Adapt.
type Tokenizer interface {
	Encode(text string) []int
	EncodeOffsets(text string) ([]int, []Offset)
	Decode(ids []int) string
	TokenID(tok string) (int, bool)
	// SpecialIDs maps the text of each added token marked special (tokenizer.json's
	// added_tokens with "special": true) to its id.
	SpecialIDs() map[string]int
}

// OffsetTokenizer is a tokenizer whose EncodeOffsets returns its own offset type O, a struct of
// Start and End byte offsets (as inference/tokenizer's Offset is).
type OffsetTokenizer[O ~struct{ Start, End int }] interface {
	Encode(text string) []int
	EncodeOffsets(text string) ([]int, []O)
	Decode(ids []int) string
	TokenID(tok string) (int, bool)
	SpecialIDs() map[string]int
}

// Adapt makes a Tokenizer of t, converting its offsets. The type parameters are inferred:
// curate.Adapt(tok).
//
// curate takes an interface rather than *tokenizer.Tokenizer so that it depends on the
// tokenizer's behaviour, not its package; the conversion costs one small slice per call.
func Adapt[O ~struct{ Start, End int }, T OffsetTokenizer[O]](t T) Tokenizer {
	return adapted[O, T]{t}
}

type adapted[O ~struct{ Start, End int }, T OffsetTokenizer[O]] struct{ t T }

func (a adapted[O, T]) Encode(text string) []int       { return a.t.Encode(text) }
func (a adapted[O, T]) Decode(ids []int) string        { return a.t.Decode(ids) }
func (a adapted[O, T]) TokenID(tok string) (int, bool) { return a.t.TokenID(tok) }
func (a adapted[O, T]) SpecialIDs() map[string]int     { return a.t.SpecialIDs() }

func (a adapted[O, T]) EncodeOffsets(text string) ([]int, []Offset) {
	ids, offs := a.t.EncodeOffsets(text)
	out := make([]Offset, len(offs))
	for i, o := range offs {
		out[i] = Offset(o)
	}
	return ids, out
}
