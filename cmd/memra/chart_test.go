package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/memra-ai/memra/deploy/chart"
)

// TestChartArgsAreFlags: every argument the Helm chart gives memra (the
// pull init container and the server) is a flag of this memra, with a
// value its limits accept, with the default values and with others.
func TestChartArgsAreFlags(t *testing.T) {
	c, err := chart.Load("../../deploy/helm/memra")
	require.NoError(t, err)
	for _, values := range []string{
		`{model: {spec: "hf:owner/repo:Q4_K_M"}, apiKeys: {keys: [k]}}`,
		`{model: {spec: "hf:owner/repo@v1", name: m}, apiKeys: {existingSecret: s}, compiled: {dir: /c},
		  server: {context: 4096, kvCache: q8_0, extraArgs: [--no-prefix-cache, --max-batch-tokens=4096]}}`,
	} {
		over, err := chart.ParseValues([]byte(values))
		require.NoError(t, err)
		docs, err := c.Render(chart.Release{Name: "memra", Namespace: "ai"}, over)
		require.NoError(t, err)
		found := 0
		for _, d := range docs {
			var obj struct {
				Kind string `json:"kind"`
				Spec struct {
					Template struct {
						Spec struct {
							InitContainers []struct {
								Name string   `json:"name"`
								Args []string `json:"args"`
							} `json:"initContainers"`
							Containers []struct {
								Name string   `json:"name"`
								Args []string `json:"args"`
							} `json:"containers"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(d.YAML), &obj))
			ps := obj.Spec.Template.Spec
			if obj.Kind != "Deployment" || len(ps.Containers) == 0 || ps.Containers[0].Name != "memra" {
				continue
			}
			found++
			pull := ps.InitContainers[0].Args
			require.Equal(t, "pull", pull[0])
			pc := newPullCmd()
			require.NoError(t, pc.ParseFlags(pull[1:]))
			require.NoError(t, pc.Args(pc, pc.Flags().Args()))
			serve := ps.Containers[0].Args
			require.Equal(t, "serve", serve[0])
			sc := newServeCmd()
			require.NoError(t, sc.ParseFlags(serve[1:]), "%v", serve)
			require.NoError(t, checkFlagLimits(sc, serveLimits))
			require.Empty(t, sc.Flags().Args(), "every argument is a flag")
		}
		require.Equal(t, 1, found)
	}
}
