package episode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
)

// OracleName is the spec and name of the built-in oracle policy.
const OracleName = "oracle"

// Oracle is the built-in policy that answers with the task's gold SQL of the episode's dialect in
// the protocol format, every turn, so an episode converges at turn 2 with Correct true whenever
// the gold runs. It proves the pipeline and the databases without any model. It is TaskAware:
// calling Chat on it directly (without a task) is an error.
type Oracle struct{}

// ForTask implements TaskAware.
func (Oracle) ForTask(t datasets.Task, d datasets.Dialect) (chat.Policy, error) {
	gold, ok := t.GoldFor(d)
	if !ok {
		return nil, fmt.Errorf("oracle: task %s has no gold SQL for %s", t.ID, d)
	}
	content := "<think>The reference query answers the question.</think>\n<sql>" + strings.TrimSpace(gold) + "</sql>"
	return chat.PolicyFunc(func(ctx context.Context, msgs []chat.Message, _ chat.Options) (chat.Reply, error) {
		if err := ctx.Err(); err != nil {
			return chat.Reply{}, err
		}
		return chat.Reply{Content: content, FinishReason: chat.FinishStop, Model: OracleName, Attempts: 1, Latency: time.Nanosecond}, nil
	}), nil
}

// Chat implements chat.Policy; the oracle needs its task, so this always fails.
func (Oracle) Chat(context.Context, []chat.Message, chat.Options) (chat.Reply, error) {
	return chat.Reply{}, errors.New("oracle: needs the task; run it through episode.Episode")
}

// PolicyHandle is a resolved policy with what the runner needs to name, limit and account it.
type PolicyHandle struct {
	// Name labels the policy in run dirs (shard file names, keys): letters, digits, '.', '_', '-'.
	Name string
	// Spec is what the user asked for ("oracle", "gpt-oss", "teacher:glm", "student:DIR").
	Spec string
	// Model is the model id, when known.
	Model string
	// Policy answers the conversations.
	Policy chat.Policy
	// Concurrency is the number of episodes worth running at once against this policy (for a
	// teacher, its max_concurrency); 0 lets the runner choose.
	Concurrency int
	// Stats, when set, returns the policy's own counters (requests, retries, failures by reason,
	// cost); written into usage.json as "client".
	Stats func() any
	// Cost, when set, prices a usage in USD.
	Cost func(chat.Usage) float64
	// Reason, when set, classifies a policy error for failures.jsonl ("rate_limited", ...).
	Reason func(error) string
	// Close, when set, releases the policy.
	Close func() error
}

// PolicyFactory builds a policy from the argument after "PREFIX:" and returns its model id. A
// policy with a Close() error method is closed by the runner; one with ClientStats() any has
// those counters written into usage.json as "client".
type PolicyFactory func(arg string) (chat.Policy, string, error)

// TeacherFactory resolves a teacher name (from a teachers config) into a handle.
type TeacherFactory func(name string) (*PolicyHandle, error)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidName reports whether name can label a policy in a run dir.
func ValidName(name string) bool { return nameRE.MatchString(name) && len(name) <= 100 }

// sanitize turns s into a valid name fragment.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), "._-")
	if out == "" {
		out = "x"
	}
	if len(out) > 60 {
		out = out[:60]
	}
	return out
}

// ResolvePolicy turns a policy spec into a handle: "oracle"; "PREFIX:ARG" for a prefix of
// prefixes (named PREFIX-BASENAME(ARG); "teacher" and "oracle" are reserved); "teacher:NAME" or
// a bare NAME through teacher (which may be nil when no teachers are configured). prefixes may
// be nil.
func ResolvePolicy(spec string, teacher TeacherFactory, prefixes map[string]PolicyFactory) (*PolicyHandle, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("empty policy name")
	}
	if spec == OracleName {
		return &PolicyHandle{Name: OracleName, Spec: spec, Model: OracleName, Policy: Oracle{}}, nil
	}
	prefix, arg, hasPrefix := strings.Cut(spec, ":")
	if hasPrefix && prefix != "teacher" {
		f, ok := prefixes[prefix]
		if !ok || prefix == OracleName {
			known := []string{"teacher"}
			for p := range prefixes {
				if p != "teacher" && p != OracleName {
					known = append(known, p)
				}
			}
			sort.Strings(known[1:])
			return nil, fmt.Errorf("policy %q: unknown prefix %q (known: %s)", spec, prefix, strings.Join(known, ", "))
		}
		if arg == "" {
			return nil, fmt.Errorf("policy %q: missing argument after %q", spec, prefix+":")
		}
		p, model, err := f(arg)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", spec, err)
		}
		h := &PolicyHandle{Name: prefix + "-" + sanitize(filepath.Base(filepath.Clean(arg))), Spec: spec, Model: model, Policy: p}
		if c, ok := p.(interface{ Close() error }); ok {
			h.Close = c.Close
		}
		if s, ok := p.(interface{ ClientStats() any }); ok {
			h.Stats = s.ClientStats
		}
		return h, nil
	}
	name := spec
	if hasPrefix {
		name = arg
	}
	if teacher == nil {
		return nil, fmt.Errorf("policy %q: no teachers configured (built in: %s)", spec, OracleName)
	}
	h, err := teacher(name)
	if err != nil {
		return nil, err
	}
	if h.Spec == "" {
		h.Spec = spec
	}
	if h.Name == "" {
		h.Name = name
	}
	if !ValidName(h.Name) {
		return nil, fmt.Errorf("policy %q: name %q can not label a run dir (letters, digits, '.', '_', '-')", spec, h.Name)
	}
	return h, nil
}
