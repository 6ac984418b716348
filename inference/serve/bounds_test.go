package serve_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
)

// manyObjects is a JSON request body of about size bytes: prefix, then "{}" elements of a list
// up to the size, then suffix.
func manyObjects(prefix, suffix string, size int) []byte {
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(prefix)
	for n := 0; b.Len()+3+len(suffix) < size; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString("{}")
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// TestParseMemoryBounded: a request's fields the server does not read, or an unsupported one
// it refuses, cost about their size in memory, not a tree of interface values: 8 MiB of empty
// objects in an ignored field allocated 380 MB (and 32 MiB took the binary's RSS from 123 MB to
// 1.2 GB) when every field was decoded into interface values to check it.
func TestParseMemoryBounded(t *testing.T) {
	st, err := student.New(gentest.Scripted(reply), gentest.ByteTokenizer{}, student.Config{ModelID: "toy-student"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := serve.Handler(st, nil, serve.Config{})
	const size = 8 << 20
	for _, c := range []struct {
		name   string
		body   []byte
		status int
	}{
		{"an ignored field", manyObjects(`{"messages":[{"role":"user","content":"How many?"}],"max_tokens":4,"frobnicate":[`, `]}`, size), 200},
		{"an unsupported field", manyObjects(`{"messages":[{"role":"user","content":"How many?"}],"tools":[`, `]}`, size), 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(c.body))
			r.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(w, r)
			runtime.ReadMemStats(&after)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if c.status == http.StatusBadRequest && !strings.Contains(w.Body.String(), "unsupported_parameter") {
				t.Errorf("refusal: %s", w.Body)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte body: %d MB allocated", len(c.body), alloc>>20)
			if limit := uint64(8 * len(c.body)); alloc > limit {
				t.Errorf("%d-byte body: %d bytes allocated, over %d", len(c.body), alloc, limit)
			}
		})
	}
}
