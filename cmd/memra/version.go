package main

import "runtime/debug"

// buildVersion is the version memra reports (--version, manifest.json's
// memra_version, tunedb entries): version, set by the linker for releases
// and "dev" otherwise, followed by the VCS revision the build stamped,
// when it did (make build does): dev+1a2b3c4d5e6f, with .dirty for a tree
// with uncommitted changes.
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(version, bi)
}

// versionOf is buildVersion for the build information bi (nil: none).
func versionOf(v string, bi *debug.BuildInfo) string {
	if bi == nil {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	v += "+" + rev[:min(len(rev), 12)]
	if dirty {
		v += ".dirty"
	}
	return v
}
