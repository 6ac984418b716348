package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestParseFileMatchesEncodingJSON checks jscan's vocab and merges of the real tokenizer.json
// against encoding/json's.
func TestParseFileMatchesEncodingJSON(t *testing.T) {
	data, err := os.ReadFile(shared.Path(t, "tokenizer/qwen2.5/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tf, err := parseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges [][2]string    `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(tf.Model.Vocab) != len(ref.Model.Vocab) {
		t.Fatalf("vocab: %d entries, encoding/json %d", len(tf.Model.Vocab), len(ref.Model.Vocab))
	}
	for k, v := range ref.Model.Vocab {
		if tf.Model.Vocab[k] != v {
			t.Fatalf("vocab[%q] = %d, encoding/json %d", k, tf.Model.Vocab[k], v)
		}
	}
	if len(tf.Model.Merges) != len(ref.Model.Merges) {
		t.Fatalf("merges: %d, encoding/json %d", len(tf.Model.Merges), len(ref.Model.Merges))
	}
	for i := range ref.Model.Merges {
		if tf.Model.Merges[i] != ref.Model.Merges[i] {
			t.Fatalf("merges[%d] = %q, encoding/json %q", i, tf.Model.Merges[i], ref.Model.Merges[i])
		}
	}
}

func TestJScanErrors(t *testing.T) {
	for _, in := range []string{`{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":"x`, `{"a":"\q"}`, `{"a":"\u12"}`,
		"{\"a\":\"\x01\"}", `{"a":[1 2]}`, `{"a":tru}`, `{"a":1} x`, `[1]`, `{"a":"\xff"}`} {
		s := &jscan{b: []byte(in)}
		err := s.object(func(string) error { _, err := s.raw(); return err })
		if err == nil && s.end() {
			t.Errorf("%q: no error", in)
		} else if err != nil && !strings.Contains(err.Error(), "malformed JSON at byte") {
			t.Errorf("%q: error %v does not give the byte", in, err)
		}
	}
}

// FuzzJScanString checks jscan's string decoding against encoding/json.
func FuzzJScanString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`,
		`"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, `"Ġthe"`, `"\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if strings.TrimSpace(in) == "null" {
			return // encoding/json leaves a string unchanged for null; jscan wants a string
		}
		var want string
		werr := json.Unmarshal([]byte(in), &want)
		s := &jscan{b: []byte(in)}
		got, err := s.str()
		if err == nil && !s.end() {
			err = s.errorf("trailing data")
		}
		if werr != nil {
			// jscan may reject more (invalid UTF-8), never less.
			if err == nil {
				t.Fatalf("%q: jscan accepted %q, encoding/json: %v", in, got, werr)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "invalid UTF-8") {
				return
			}
			t.Fatalf("%q: jscan: %v, encoding/json accepted %q", in, err, want)
		}
		if got != want {
			t.Fatalf("%q: jscan %q, encoding/json %q", in, got, want)
		}
	})
}
