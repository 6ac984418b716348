package student

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
)

const script = "héllo <sql>SELECT 1</sql>"

func newStudent(t *testing.T) *Student {
	t.Helper()
	s, err := New(gentest.Scripted(script), gentest.ByteTokenizer{}, Config{ModelID: "toy"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var convo = []chat.Message{{Role: chat.RoleSystem, Content: "Be brief."}, {Role: chat.RoleUser, Content: "Hi"}}

func TestChatReply(t *testing.T) {
	s := newStudent(t)
	r, err := s.Chat(context.Background(), convo, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := s.Prompt(convo)
	if r.Content != script || r.FinishReason != chat.FinishStop || r.Model != "toy" || r.Attempts != 1 {
		t.Fatalf("reply %+v", r)
	}
	if r.Usage.PromptTokens != len(prompt) || r.Usage.CompletionTokens != len(script)+1 {
		t.Fatalf("usage %+v, prompt %d tokens, reply %d bytes + <|im_end|>", r.Usage, len(prompt), len(script))
	}
	if r.Latency <= 0 {
		t.Fatal("no latency")
	}
	r, err = s.Chat(context.Background(), convo, chat.Options{MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "hél" || r.FinishReason != chat.FinishLength || r.Usage.CompletionTokens != 4 {
		t.Fatalf("max_tokens 4: %+v", r)
	}
}

func TestStopStrings(t *testing.T) {
	s := newStudent(t)
	var deltas []string
	r, err := s.Stream(context.Background(), convo, chat.Options{Stop: []string{"</sql>", "<sql>"}}, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "héllo " || r.FinishReason != chat.FinishStop || strings.Join(deltas, "") != r.Content {
		t.Fatalf("stop <sql>: %+v, deltas %q", r, deltas)
	}
	for _, d := range deltas {
		if !utf8.ValidString(d) || strings.Contains(d, "<") {
			t.Fatalf("delta %q: split character or part of a stop string", d)
		}
	}
	if r.Usage.CompletionTokens != len("héllo <sql>") {
		t.Fatalf("completion tokens %d, want the %d consumed", r.Usage.CompletionTokens, len("héllo <sql>"))
	}
	// A stop string that never comes holds nothing back at the end.
	r, err = s.Chat(context.Background(), convo, chat.Options{Stop: []string{"</sql>x"}})
	if err != nil || r.Content != script {
		t.Fatalf("unmatched stop: %q %v", r.Content, err)
	}
	if _, err := s.Chat(context.Background(), convo, chat.Options{Stop: []string{""}}); err == nil {
		t.Fatal("empty stop string accepted")
	}
}

func TestStreamErrorEndsRequest(t *testing.T) {
	s := newStudent(t)
	boom := errors.New("client went away")
	n := 0
	_, err := s.Stream(context.Background(), convo, chat.Options{}, func(string) error {
		n++
		if n == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
}

func TestSecondTurnReusesCache(t *testing.T) {
	s := newStudent(t)
	r1, err := s.Chat(context.Background(), convo, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	turn2 := append(append([]chat.Message(nil), convo...), chat.Message{Role: chat.RoleAssistant, Content: r1.Content}, chat.Message{Role: chat.RoleUser, Content: "<observation>1</observation>"})
	r2, err := s.Chat(context.Background(), turn2, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Content != script {
		t.Fatalf("turn 2: %q", r2.Content)
	}
	// Everything up to turn 1's <|im_end|> (sampled, never fed) comes from turn 1's cache.
	if want := r1.Usage.PromptTokens + r1.Usage.CompletionTokens - 1; r2.Usage.CachedTokens != want {
		t.Fatalf("turn 2 cached %d tokens, want %d", r2.Usage.CachedTokens, want)
	}
}

func TestConcurrentChats(t *testing.T) {
	s := newStudent(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			msgs := []chat.Message{{Role: chat.RoleUser, Content: strings.Repeat("q", i+1)}}
			r, err := s.Chat(context.Background(), msgs, chat.Options{Temperature: chat.Float(0)})
			if err != nil || r.Content != script {
				t.Errorf("chat %d: %q %v", i, r.Content, err)
			}
		})
	}
	wg.Wait()
	if st := s.Generator().Stats(); st.MaxBatchSeen < 2 {
		t.Logf("note: concurrent chats never shared a step (max batch %d)", st.MaxBatchSeen)
	}
}

func TestBadConversations(t *testing.T) {
	s := newStudent(t)
	if _, err := s.Chat(context.Background(), nil, chat.Options{}); err == nil {
		t.Fatal("empty conversation accepted")
	}
	if _, err := s.Chat(context.Background(), []chat.Message{{Role: "wizard", Content: "x"}}, chat.Options{}); err == nil || !strings.Contains(err.Error(), "wizard") {
		t.Fatalf("unknown role: %v", err)
	}
	if _, err := s.Chat(context.Background(), convo, chat.Options{MaxTokens: -1}); err == nil {
		t.Fatal("negative max tokens accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Chat(ctx, convo, chat.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}
