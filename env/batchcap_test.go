package env

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// listBody is a JSON body of about size bytes: prefix, then elem repeated as a list's
// elements up to the size, then suffix.
func listBody(prefix, elem, suffix string, size int) []byte {
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(prefix)
	for n := 0; b.Len()+len(elem)+1+len(suffix) < size; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem)
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// TestBatchCapBeforeDecode: a batch step or score request whose list is longer than
// --max-batch is refused before the list is decoded whole: 8 MiB of empty objects (2.8 million
// steps) took the built server from 30 MB to 700 MB of RSS, 3 s, before the length was
// checked. A list of --max-batch elements is still played.
func TestBatchCapBeforeDecode(t *testing.T) {
	s := testEnv(t, Config{})
	h := s.Handler()
	const size = 8 << 20
	for _, c := range []struct {
		name, path string
		body       []byte
		says       string
	}{
		{"steps", "/v1/episodes:batch-step", listBody(`{"steps":[`, `{}`, `]}`, size), "more than 1024 steps in one batch"},
		{"completion objects", "/v1/score", listBody(`{"task_id":"sample/0","completions":[`, `{}`, `]}`, size), "more than 1024 completions in one request"},
		{"completion texts", "/v1/score", listBody(`{"task_id":"sample/0","completions":[`, `""`, `]}`, size), "more than 1024 completions in one request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", c.path, bytes.NewReader(c.body))
			r.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(w, r)
			runtime.ReadMemStats(&after)
			if w.Code != 400 || !strings.Contains(w.Body.String(), c.says) || !strings.Contains(w.Body.String(), "--max-batch") {
				t.Fatalf("%d %s, want 400 saying %q", w.Code, w.Body, c.says)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte body: %d MB allocated", len(c.body), alloc>>20)
			if limit := uint64(8 * len(c.body)); alloc > limit {
				t.Errorf("%d-byte body: %d bytes allocated, over %d", len(c.body), alloc, limit)
			}
		})
	}

	// At the cap the list is taken, each element checked and played as before.
	_, url := testServer(t, Config{MaxBatch: 3})
	items := func(n int) string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf(`{"episode_id": "%032x", "content": "x"}`, i))
		}
		return `{"steps": [` + strings.Join(s, ", ") + `]}`
	}
	var out struct {
		Results []struct {
			Error *apiError `json:"error"`
		} `json:"results"`
	}
	if code := call(t, "POST", url+"/v1/episodes:batch-step", items(3), &out); code != 200 || len(out.Results) != 3 || out.Results[2].Error == nil || out.Results[2].Error.Status != 404 {
		t.Fatalf("3 steps at --max-batch 3: %d %+v", code, out)
	}
	var e wireErr
	if code := call(t, "POST", url+"/v1/episodes:batch-step", items(4), &e); code != 400 || e.Error == nil || !strings.Contains(e.Error.Message, "more than 3 steps in one batch; the server takes at most 3 (--max-batch)") {
		t.Fatalf("4 steps at --max-batch 3: %d %+v", code, e.Error)
	}
	if code := call(t, "POST", url+"/v1/episodes:batch-step", `{"steps": [{"episode_id": "a", "content": "x", "extra": 1}]}`, &e); code != 400 || !strings.Contains(e.Error.Message, `unknown field "extra"`) {
		t.Fatalf("an unknown field in a step: %d %+v", code, e.Error)
	}
	comps := `{"task_id": "sample/0", "completions": ["a", {"content": "b"}, "c", "d"]}`
	if code := call(t, "POST", url+"/v1/score", comps, &e); code != 400 || !strings.Contains(e.Error.Message, "more than 3 completions in one request") {
		t.Fatalf("4 completions at --max-batch 3: %d %+v", code, e.Error)
	}
}
