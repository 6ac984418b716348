// Package policies resolves policy specs for cmd/distill and cmd/student: the built-in oracle,
// teachers from a teachers.Config ("NAME" or "teacher:NAME"), and prefixes registered with
// distill.RegisterPolicy (the runtime's "student:DIR"). It is the one place that joins distill
// and teachers, so distill itself imports neither teachers nor the runtime.
package policies

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/teachers"
)

// Resolve turns one spec into a handle. cfg may be nil (then only the oracle and registered
// prefixes resolve).
func Resolve(spec string, cfg *teachers.Config) (*distill.PolicyHandle, error) {
	var tf distill.TeacherFactory
	if cfg != nil {
		tf = func(name string) (*distill.PolicyHandle, error) { return Teacher(cfg, name) }
	}
	return distill.ResolvePolicy(spec, tf)
}

// ResolveList resolves a comma-separated list of specs, refusing duplicates. On error the
// handles built so far are closed.
func ResolveList(list string, cfg *teachers.Config) ([]*distill.PolicyHandle, error) {
	var out []*distill.PolicyHandle
	seen := map[string]string{}
	fail := func(err error) ([]*distill.PolicyHandle, error) {
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
		h, err := Resolve(spec, cfg)
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
func Teacher(cfg *teachers.Config, name string) (*distill.PolicyHandle, error) {
	ep, err := cfg.Endpoint(name)
	if err != nil {
		return nil, err
	}
	return FromEndpoint(ep)
}

// FromEndpoint builds the handle of one endpoint (see Teacher).
func FromEndpoint(ep teachers.Endpoint) (*distill.PolicyHandle, error) {
	c, err := teachers.New(ep)
	if err != nil {
		return nil, err
	}
	return &distill.PolicyHandle{
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
