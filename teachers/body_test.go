package teachers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/teachers"
)

// requestBodies is the golden file of TestRequestBodies; CHAINEDSQL_UPDATE_GOLDEN=1 rewrites it.
var requestBodies = filepath.Join("testdata", "request_bodies.txt")

// TestRequestBodies pins the exact request body sent to every provider, plain and streamed, with
// thinking on and off: a conversation with characters JSON escapes (<, >, &, quotes, newlines)
// and an assistant message with empty content, an endpoint temperature and token limit, and a
// call with per-call options. Any change to the bytes a provider receives shows here.
func TestRequestBodies(t *testing.T) {
	srv := oaitest.NewServer(t, oaitest.Fixed("<sql>SELECT 1</sql>"))
	msgs := []chat.Message{
		{Role: chat.RoleSystem, Content: "You write SQLite SQL: \"quoted\" & <tagged>\nlines."},
		{Role: chat.RoleUser, Content: "Question: how many singers?"},
		{Role: chat.RoleAssistant, Content: ""},
		{Role: chat.RoleUser, Content: "<observation>ok</observation>"},
	}
	var got strings.Builder
	for _, p := range teachers.Providers() {
		for _, stream := range []bool{false, true} {
			for _, thinking := range []bool{true, false} {
				c := newClient(t, endpoint(srv, func(e *teachers.Endpoint) {
					e.Provider, e.Stream, e.Thinking = p, stream, &thinking
					e.Temperature, e.MaxTokens = chat.Float(0.6), 256
				}))
				n := len(srv.Requests())
				if _, err := c.Chat(context.Background(), msgs, chat.Options{}); err != nil {
					t.Fatalf("%s stream %v thinking %v: %v", p, stream, thinking, err)
				}
				if _, err := c.Chat(context.Background(), msgs, chat.Options{Temperature: chat.Float(0), Seed: chat.Int64(7), Stop: []string{"</sql>"}}); err != nil {
					t.Fatalf("%s stream %v thinking %v: %v", p, stream, thinking, err)
				}
				for i, r := range srv.Requests()[n:] {
					fmt.Fprintf(&got, "%s stream=%v thinking=%v call=%d %s\n", p, stream, thinking, i, r.Body)
				}
			}
		}
	}
	if os.Getenv("CHAINEDSQL_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(requestBodies, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(requestBodies)
	if err != nil {
		t.Fatal(err)
	}
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
		}
	}
}
