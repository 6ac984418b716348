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
// Counts that no Go int holds (past int64, 1e400, a fraction) and a cost past float64 are valid
// JSON too: before oai read them bounded, each such reply failed to decode (malformed_json,
// "cannot unmarshal number 1e400 into Go struct field Usage.usage.prompt_tokens of type int"),
// retried and lost: through the built distill, 3 of 30 Spider tasks failed on every dialect.
func TestHostileUsageNumbers(t *testing.T) {
	for name, usage := range map[string]string{
		"max int64": fmt.Sprintf(`{"prompt_tokens":%[1]d,"completion_tokens":%[1]d,"total_tokens":%[1]d,"cost":1e308,`+
			`"completion_tokens_details":{"reasoning_tokens":%[1]d},"prompt_tokens_details":{"cached_tokens":%[1]d}}`, math.MaxInt64),
		"past Go's numbers": `{"prompt_tokens":1e400,"completion_tokens":99999999999999999999,"total_tokens":3.7,"cost":1e400,` +
			`"completion_tokens_details":{"reasoning_tokens":-1e400},"prompt_tokens_details":{"cached_tokens":2.5e3},` +
			`"prompt_cache_hit_tokens":-99999999999999999999,"reasoning_tokens":1e-400,"cost_details":{"upstream_inference_cost":-1e999}}`,
	} {
		t.Run(name, func(t *testing.T) { hostileUsage(t, usage) })
	}
}

// hostileUsage runs distill against a teacher whose every reply reports usage (a JSON object)
// and checks that no key is lost and every sum is finite and non-negative.
func hostileUsage(t *testing.T, usage string) {
	_, tasks := makeShopDB(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"<sql>SELECT 1</sql>"},"finish_reason":"stop"}],`+
			`"usage":`+usage+`}`)
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
