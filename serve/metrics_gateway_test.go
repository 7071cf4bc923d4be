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
	fams := scrape(t, s, model.LegacyValidation) // the classic names an older scraper accepts
	gauge := func(name, model string) (float64, map[string]string) {
		t.Helper()
		m := series(t, fams, name, dto.MetricType_GAUGE, map[string]string{"model_name": model})
		return m.GetGauge().GetValue(), seriesLabels(m)
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

// TestDeviceTimeMetrics: the device time of pipelined steps (an engine's
// Stats) is exported as counters by part, beside the timed steps.
func TestDeviceTimeMetrics(t *testing.T) {
	st := Stats{DeviceSteps: 40, DeviceInputSeconds: 0.002, DeviceStepSeconds: 0.09}
	s := newTestServer(t, nil, func(c *Config) {
		c.Models[0].Engine = statsEngine{newFakeEngine(), st}
	})
	fams := scrape(t, s, model.UTF8Validation)
	counter := func(name, part string) float64 {
		t.Helper()
		return series(t, fams, name, dto.MetricType_COUNTER, map[string]string{"model": "fake", "part": part}).GetCounter().GetValue()
	}
	require.Equal(t, 40.0, counter("memra_engine_device_steps_total", ""))
	require.Equal(t, 0.002, counter("memra_engine_device_seconds_total", "inputs"))
	require.Equal(t, 0.09, counter("memra_engine_device_seconds_total", "step"))
}

// scrape reads the server's /metrics as metric families.
func scrape(t *testing.T, s *testServer, v model.ValidationScheme) map[string]*dto.MetricFamily {
	t.Helper()
	status, _, raw := s.do(t, "GET", "/metrics", "")
	require.Equal(t, 200, status)
	p := expfmt.NewTextParser(v)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	require.NoError(t, err)
	return fams
}

// series is the series of family name, of type typ, whose labels are
// want's (a label absent from the series reads as empty).
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "%s missing", name)
	require.Equal(t, typ, f.GetType(), name)
	for _, m := range f.GetMetric() {
		labels, match := seriesLabels(m), true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			return m
		}
	}
	t.Fatalf("%s has no series %v", name, want)
	return nil
}

// seriesLabels are a series' labels by name.
func seriesLabels(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}
