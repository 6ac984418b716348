// Package buildinfo names the toolkit version recorded in run dirs, eval dirs and dataset cards.
package buildinfo

import "runtime/debug"

// Version is the module version, or "devel-" and the first 12 hex digits of the VCS revision for
// a development build; "unknown" when the binary carries no build information.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && (v == "" || v == "(devel)") {
			v = "devel-" + s.Value[:min(12, len(s.Value))]
		}
	}
	return v
}
