package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// The reported version carries the VCS revision whenever the build
// stamped one, instead of a bare "dev".
func TestVersionOf(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := func(settings ...debug.BuildSetting) *debug.BuildInfo { return &debug.BuildInfo{Settings: settings} }
	for _, c := range []struct {
		v    string
		bi   *debug.BuildInfo
		want string
	}{
		{"dev", nil, "dev"},
		{"dev", stamped(), "dev"},
		{"dev", stamped(debug.BuildSetting{Key: "vcs.revision", Value: rev}), "dev+0123456789ab"},
		{"dev", stamped(debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			"dev+0123456789ab.dirty"},
		{"dev", stamped(debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "false"}),
			"dev+0123456789ab"},
		{"v1.2.0", stamped(debug.BuildSetting{Key: "vcs.revision", Value: rev}), "v1.2.0+0123456789ab"},
	} {
		require.Equal(t, c.want, versionOf(c.v, c.bi))
	}
	require.Equal(t, buildVersion(), rootCmd.Version, "memra --version")
}
