package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "11d078b2c0ffee0123456789abcdef0123456789"}}
	dirty := append(rev[:len(rev):len(rev)], debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	clean := append(rev[:len(rev):len(rev)], debug.BuildSetting{Key: "vcs.modified", Value: "false"})
	for _, c := range []struct {
		name, main string
		settings   []debug.BuildSetting
		want       string
	}{
		{"module version", "v1.2.3", dirty, "v1.2.3"},
		{"pseudo-version", "v0.0.0-20261204004747-11d078b2c0ff+dirty", dirty, "v0.0.0-20261204004747-11d078b2c0ff+dirty"},
		{"devel, revision", "(devel)", clean, "devel-11d078b2c0ff"},
		{"devel, modified", "(devel)", dirty, "devel-11d078b2c0ff-dirty"},
		{"no version, revision", "", rev, "devel-11d078b2c0ff"},
		{"short revision", "", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "devel-abc"},
		{"nothing", "", nil, "devel"},
		{"devel, nothing", "(devel)", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "devel"},
	} {
		if got := versionOf(c.main, c.settings); got != c.want {
			t.Errorf("%s: versionOf(%q, …) = %q, want %q", c.name, c.main, got, c.want)
		}
	}
}

// TestVersionNotEmpty: a test binary records no VCS stamp, the case that left created_by's
// build string empty.
func TestVersionNotEmpty(t *testing.T) {
	if v := Version(); v == "" {
		t.Fatal("Version() is empty")
	}
}
