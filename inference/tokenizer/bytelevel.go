package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode table: printable bytes map to themselves, the others to
// U+0100 upwards in byte order. runeToByte is its inverse for the 256 runes involved.
var (
	byteToRune [256]rune
	runeToByte [324]int16 // rune -> byte, -1 where the rune is not in the table
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevelEncode maps raw bytes to their byte-level string form (as tokens appear in the vocab).
func byteLevelEncode(raw string) string {
	var sb strings.Builder
	for i := 0; i < len(raw); i++ {
		sb.WriteRune(byteToRune[raw[i]])
	}
	return sb.String()
}

// byteLevelDecode maps a byte-level token string back to raw bytes; ok is false when a rune is
// outside the table.
func byteLevelDecode(tok string) (string, bool) {
	buf := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return "", false
		}
		buf = append(buf, byte(runeToByte[r]))
	}
	return string(buf), true
}

// decoderBytes is what HF's ByteLevel decoder emits for one token string: the mapped bytes when
// every rune is in the table, else the token's own UTF-8 bytes.
func decoderBytes(tok string) string {
	if raw, ok := byteLevelDecode(tok); ok {
		return raw
	}
	return tok
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal ill-formed subsequence by
// one U+FFFD. This is Rust's String::from_utf8_lossy (which HF's decoder uses); Go's own
// strings.ToValidUTF8 collapses whole runs and utf8.DecodeRune reports single bytes, so neither
// gives the same output.
func appendLossy(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			dst = append(dst, b[i:i+w]...)
			i += w
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// maximalSubpart returns the length (at least 1) of the longest prefix of b that starts a
// well-formed UTF-8 sequence; b[0] is known to begin an ill-formed one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 {
			if x < lo || x > hi {
				return n
			}
		} else if x < 0x80 || x > 0xBF {
			return n
		}
		n++
	}
	return n
}
