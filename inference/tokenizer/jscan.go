package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jscan is a minimal JSON reader for the two large parts of tokenizer.json, the vocab object
// and the merges list (151k entries each for Qwen2.5, 7 MB in all). encoding/json validates
// and decodes that in about 0.75 s (several seconds under -race, which every test that loads
// the tokenizer pays); reading the entries straight into the vocab map and merge list is
// several times faster. No faster JSON library is a dependency of the module. Everything
// else in the file, small, is still decoded by encoding/json from the raw spans jscan skips.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) errorf(format string, args ...any) error {
	return fmt.Errorf("malformed JSON at byte %d: %s", s.i, fmt.Sprintf(format, args...))
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (s *jscan) end() bool {
	s.ws()
	return s.i >= len(s.b)
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *jscan) expect(c byte) error {
	if s.peek() != c {
		if s.i >= len(s.b) {
			return s.errorf("unexpected end, want %q", c)
		}
		return s.errorf("found %q, want %q", s.b[s.i], c)
	}
	s.i++
	return nil
}

// str reads a string, unescaping it.
func (s *jscan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !utf8.Valid(raw) {
				return "", s.errorf("invalid UTF-8 in string")
			}
			return string(raw), nil
		case c == '\\':
			return s.strEscaped(start)
		case c < 0x20:
			return "", s.errorf("control character 0x%02x in string", c)
		}
		s.i++
	}
	return "", s.errorf("unterminated string")
}

// strEscaped finishes a string that started at start and has an escape at s.i.
func (s *jscan) strEscaped(start int) (string, error) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(out) {
				return "", s.errorf("invalid UTF-8 in string")
			}
			return string(out), nil
		case c < 0x20:
			return "", s.errorf("control character 0x%02x in string", c)
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errorf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair decodes to one rune; a lone surrogate becomes U+FFFD, as in encoding/json.
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					var ok2 bool
					if r2, ok2 = s.hex4(); !ok2 {
						return "", s.errorf("bad \\u escape")
					}
					if utf16.DecodeRune(r, r2) == utf8.RuneError {
						s.i, r2 = save, -1
					}
				}
				if r2 < 0 {
					r = utf8.RuneError
				} else {
					r = utf16.DecodeRune(r, r2)
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", s.errorf("bad escape \\%c", e)
		}
	}
	return "", s.errorf("unterminated string")
}

func (s *jscan) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// int reads a non-negative or negative integer that fits an int.
func (s *jscan) int() (int, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	v, err := strconv.Atoi(string(s.b[start:s.i]))
	if err != nil {
		s.i = start
		return 0, s.errorf("want an integer")
	}
	return v, nil
}

// object reads an object, calling f with each key; f must read the value.
func (s *jscan) object(f func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array reads an array, calling f for each element; f must read it.
func (s *jscan) array(f func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := f(n); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// raw skips one value and returns its bytes, for encoding/json to decode (and validate).
func (s *jscan) raw() ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skip(0); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

func (s *jscan) skip(depth int) error {
	if depth > 1000 {
		return s.errorf("nested too deep")
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(func(string) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func(int) error { return s.skip(depth + 1) })
	case c == 0:
		return s.errorf("unexpected end, want a value")
	default:
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				goto done
			}
			s.i++
		}
	done:
		if s.i == start || !json.Valid(s.b[start:s.i]) {
			s.i = start
			return s.errorf("want a value")
		}
		return nil
	}
}
