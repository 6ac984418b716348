package distill_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/teachers"
)

// TestHostileUsageNumbers: a provider reporting absurd usage (a cost of 1e308 USD, every token
// count 2^63-1, all valid JSON) loses no key and leaves a readable run dir with finite,
// non-negative sums. Before the teachers client bounded them, two turns' costs summed to +Inf:
// every key failed to encode ("json: unsupported value: +Inf") and Run failed writing
// usage.json; the counts wrapped the totals negative ("tokens -30" in the closing table).
func TestHostileUsageNumbers(t *testing.T) {
	_, tasks := makeShopDB(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"<sql>SELECT 1</sql>"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":%[1]d,"completion_tokens":%[1]d,"total_tokens":%[1]d,"cost":1e308,`+
			`"completion_tokens_details":{"reasoning_tokens":%[1]d},"prompt_tokens_details":{"cached_tokens":%[1]d}}}`, math.MaxInt64)
	}))
	defer srv.Close()
	h := fakeTeacherEP(t, teachers.Endpoint{Name: "hostile", BaseURL: srv.URL, Model: "m", MaxConcurrency: 4,
		MaxRetries: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Timeout: 5 * time.Second})
	dir := t.TempDir()
	res, err := distill.Run(context.Background(), baseConfig(t, dir, tasks, h))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Done != len(tasks) || res.Failed != 0 {
		t.Fatalf("%d done, %d failed of %d keys", res.Done, res.Failed, len(tasks))
	}
	trs := committed(t, dir)
	if len(trs) != len(tasks) {
		t.Fatalf("%d trajectories for %d keys", len(trs), len(tasks))
	}
	sane := func(what string, u chat.Usage) {
		t.Helper()
		for _, n := range []int{u.PromptTokens, u.CompletionTokens, u.ReasoningTokens, u.CachedTokens, u.Total()} {
			if n < 0 {
				t.Errorf("%s: a negative token count: %+v", what, u)
			}
		}
		if math.IsInf(u.CostUSD, 0) || math.IsNaN(u.CostUSD) || u.CostUSD < 0 {
			t.Errorf("%s: cost %v", what, u.CostUSD)
		}
	}
	for k, tr := range trs {
		sane(k, tr.Usage)
	}
	u, err := rundir.ReadUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	tu := u.Teachers["hostile"]
	if tu == nil || tu.Trajectories != len(tasks) {
		t.Fatalf("usage.json: %+v", tu)
	}
	sane("usage.json", tu.Usage)
	if math.IsInf(tu.CostUSD, 0) || tu.CostUSD < 0 {
		t.Errorf("usage.json cost %v", tu.CostUSD)
	}
}

// TestHostileReplyNames: a provider's finish reason that no rule maps (kept as the turn's) and
// the model id its response names (kept as the trajectory's) are bounded where the Stepper
// keeps them (textcap.Name), like the reply's texts. Before, a 12 MiB model id of "<" (72 MiB
// as JSON) and a 6 MiB finish reason on each of two turns made the line too long to write: the
// key failed "encode" after every turn was played and paid for (through the built distill
// against a provider sending them: 2 of 2 keys lost).
func TestHostileReplyNames(t *testing.T) {
	_, tasks := makeShopDB(t)
	tasks = tasks[:1]
	model, finish := strings.Repeat("<", 12<<20), strings.Repeat("<", 6<<20)
	policy := chat.PolicyFunc(func(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
		return chat.Reply{Content: "<think>x</think>\n<sql>SELECT 1</sql>", FinishReason: finish, ProviderFinishReason: finish, Model: model}, nil
	})
	dir := t.TempDir()
	res, err := distill.Run(context.Background(), baseConfig(t, dir, tasks, &episode.PolicyHandle{Name: "hostile", Spec: "hostile", Model: "m", Policy: policy}))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Done != 1 || res.Failed != 0 {
		t.Fatalf("%d done, %d failed of 1 key", res.Done, res.Failed)
	}
	for k, tr := range committed(t, dir) {
		if len(tr.Model) > textcap.Name || !strings.HasPrefix(tr.Model, "<<<") {
			t.Errorf("%s: a model id of %d bytes", k, len(tr.Model))
		}
		for _, tu := range tr.Turns {
			if len(tu.FinishReason) > textcap.Name || len(tu.ProviderFinishReason) > textcap.Name || !strings.HasPrefix(tu.FinishReason, "<<<") {
				t.Errorf("%s turn %d: finish reasons of %d and %d bytes", k, tu.Index, len(tu.FinishReason), len(tu.ProviderFinishReason))
			}
		}
	}
}
