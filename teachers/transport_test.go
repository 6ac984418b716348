package teachers_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/teachers"
)

// TestRequestHeaders pins the request line and headers of a plain and a streamed request: the
// ones go-openai sent before the client had its own HTTP layer, so that no server sees a change.
func TestRequestHeaders(t *testing.T) {
	srv := oaitest.NewServer(t, nil, oaitest.WithAPIKey("sk-test"))
	t.Setenv("I29_TEST_KEY", "sk-test")
	want := map[bool]http.Header{
		false: {"Authorization": {"Bearer sk-test"}, "Content-Type": {"application/json"}, "Accept": {"application/json"}},
		true: {"Authorization": {"Bearer sk-test"}, "Content-Type": {"application/json"}, "Accept": {"text/event-stream"},
			"Cache-Control": {"no-cache"}},
	}
	for i, stream := range []bool{false, true} {
		c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
			e.APIKeyEnv, e.Stream, e.BaseURL = "I29_TEST_KEY", stream, srv.BaseURL()+"/"
		}))
		if _, err := c.Chat(context.Background(), question, chat.Options{}); err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		got := srv.Requests()[i].Header
		for k, v := range want[stream] {
			if got.Get(k) != v[0] {
				t.Errorf("stream %v: %s: %q, want %q", stream, k, got.Get(k), v[0])
			}
		}
		if got.Get("Content-Length") == "" && got.Get("Transfer-Encoding") == "" {
			t.Errorf("stream %v: no Content-Length: %v", stream, got)
		}
	}
}
