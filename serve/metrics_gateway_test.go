package serve

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// statsEngine is a fake engine with fixed load.
type statsEngine struct {
	*fakeEngine
	st Stats
}

func (e statsEngine) Stats() Stats { return e.st }

// TestGatewayMetrics: /metrics carries what the Gateway API Inference
// Extension's endpoint picker reads, under the names its model-server
// protocol documents (vLLM's, its defaults), as gauges equal to memra's
// own series: queued and running requests, KV-cache usage as a fraction,
// and the KV block size and count as labels of vllm:cache_config_info.
func TestGatewayMetrics(t *testing.T) {
	busy := Stats{Running: 3, Queued: 5, KVTokensUsed: 256, KVTokensTotal: 1024, KVPagesUsed: 16, KVPagesTotal: 64}
	s := newTestServer(t, nil, func(c *Config) {
		c.Models[0].Engine = statsEngine{newFakeEngine(), busy}
	})
	status, _, raw := s.do(t, "GET", "/metrics", "")
	require.Equal(t, 200, status)
	p := expfmt.NewTextParser(model.LegacyValidation) // the classic names an older scraper accepts
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	require.NoError(t, err)
	gauge := func(name, model string) (float64, map[string]string) {
		t.Helper()
		f, ok := fams[name]
		require.True(t, ok, "%s missing", name)
		require.Equal(t, dto.MetricType_GAUGE, f.GetType(), name)
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model_name"] == model {
				return m.GetGauge().GetValue(), labels
			}
		}
		t.Fatalf("%s has no series of model_name=%q", name, model)
		return 0, nil
	}
	for _, c := range []struct {
		name, memra string
		want        float64
	}{
		{"vllm:num_requests_waiting", "memra_requests_queued", 5},
		{"vllm:num_requests_running", "memra_requests_running", 3},
		{"vllm:kv_cache_usage_perc", "memra_kv_cache_usage_ratio", 0.25},
		{"vllm:gpu_cache_usage_perc", "memra_kv_cache_usage_ratio", 0.25},
	} {
		v, _ := gauge(c.name, "fake")
		require.Equal(t, c.want, v, c.name)
		for _, m := range fams[c.memra].GetMetric() {
			if m.GetLabel()[0].GetValue() == "fake" {
				require.Equal(t, c.want, m.GetGauge().GetValue(), "%s equals %s", c.name, c.memra)
			}
		}
		idle, _ := gauge(c.name, "fake-2")
		require.Zero(t, idle, "each model its own series")
	}
	v, labels := gauge("vllm:cache_config_info", "fake")
	require.Equal(t, 1.0, v)
	require.Equal(t, "16", labels["block_size"])
	require.Equal(t, "64", labels["num_gpu_blocks"])
	for _, m := range fams["vllm:cache_config_info"].GetMetric() {
		for _, l := range m.GetLabel() {
			require.False(t, l.GetName() == "model_name" && l.GetValue() == "fake-2", "no pool, no cache config")
		}
	}
}
