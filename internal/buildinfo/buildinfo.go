// Package buildinfo names the toolkit version recorded in run dirs, eval dirs and dataset cards.
package buildinfo

import "runtime/debug"

// Version is the module version; for a development build without one, "devel-" and the first 12
// hex digits of the VCS revision, "-dirty" added when the work tree had changes; "devel" when
// the binary records neither (a test binary, a build outside version control). Never empty.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(bi.Main.Version, bi.Settings)
}

// versionOf is Version for the main module's version and the build settings.
func versionOf(main string, settings []debug.BuildSetting) string {
	if main != "" && main != "(devel)" {
		return main
	}
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(12, len(rev))]
	if modified {
		v += "-dirty"
	}
	return v
}
