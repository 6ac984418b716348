// Package policies resolves policy specs for cmd/distill and cmd/student: the built-in oracle,
// teachers from a teachers.Config ("NAME" or "teacher:NAME"), and the bundled runtime
// ("student:DIR"), each from explicit Options. It is the one place that joins distill, teachers
// and the runtime, so distill itself imports neither.
package policies

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/teachers"
)

// Options is everything a spec cannot carry.
type Options struct {
	// Teachers resolves "NAME" and "teacher:NAME"; nil: no teachers configured.
	Teachers *teachers.Config
	// Student opens every "student:DIR" policy.
	Student student.Options
}

// Resolve turns one spec into a handle with opts.
func Resolve(spec string, opts Options) (*episode.PolicyHandle, error) {
	var tf episode.TeacherFactory
	if cfg := opts.Teachers; cfg != nil {
		tf = func(name string) (*episode.PolicyHandle, error) { return Teacher(cfg, name) }
	}
	prefixes := map[string]episode.PolicyFactory{
		"student": func(dir string) (chat.Policy, string, error) { return openStudent(dir, opts.Student) },
	}
	return episode.ResolvePolicy(spec, tf, prefixes)
}

// ResolveList resolves a comma-separated list of specs, refusing duplicates. On error the
// handles built so far are closed.
func ResolveList(list string, opts Options) ([]*episode.PolicyHandle, error) {
	var out []*episode.PolicyHandle
	seen := map[string]string{}
	fail := func(err error) ([]*episode.PolicyHandle, error) {
		for _, h := range out {
			if h.Close != nil {
				h.Close()
			}
		}
		return nil, err
	}
	for _, spec := range strings.Split(list, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		h, err := Resolve(spec, opts)
		if err != nil {
			return fail(err)
		}
		if prev, dup := seen[h.Name]; dup {
			return fail(fmt.Errorf("policies %q and %q both resolve to the name %q", prev, spec, h.Name))
		}
		seen[h.Name] = spec
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policies in %q", list)
	}
	return out, nil
}

// Teacher builds the handle of the named teacher of cfg: a teachers.Client with its own
// concurrency, rate limits and retries; Concurrency is the endpoint's max_concurrency.
func Teacher(cfg *teachers.Config, name string) (*episode.PolicyHandle, error) {
	ep, err := cfg.Endpoint(name)
	if err != nil {
		return nil, err
	}
	return FromEndpoint(ep)
}

// FromEndpoint builds the handle of one endpoint (see Teacher).
func FromEndpoint(ep teachers.Endpoint) (*episode.PolicyHandle, error) {
	c, err := teachers.New(ep)
	if err != nil {
		return nil, err
	}
	return &episode.PolicyHandle{
		Name:        ep.Name,
		Model:       ep.Model,
		Policy:      c,
		Concurrency: ep.MaxConcurrency,
		Stats:       func() any { return c.Stats() },
		Cost:        c.Cost,
		Reason:      teachers.Reason,
		Close:       func() error { c.Close(); return nil },
	}, nil
}
