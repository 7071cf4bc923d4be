package serve

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the server's metrics (what /metrics serves)
// without the API keys, for a listener of its own that only the cluster
// reaches (memra serve --metrics-port): an inference gateway's endpoint
// picker and Prometheus scrape without a key.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// metrics are the server's Prometheus series, in its own registry.
type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.CounterVec
	ttft             *prometheus.HistogramVec
	itl              *prometheus.HistogramVec
	promptTokens     *prometheus.CounterVec
	completionTokens *prometheus.CounterVec
}

func newMetrics(models []*Model) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "memra_http_requests_total",
			Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "status"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "memra_time_to_first_token_seconds",
			Help:    "Time from admission to the first generated token, per choice.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "memra_inter_token_latency_seconds",
			Help:    "Time between consecutive generated tokens of one choice.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .04, .08, .16, .32, .64, 1.28},
		}, []string{"model"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "memra_prompt_tokens_total",
			Help: "Prompt tokens of completed requests.",
		}, []string{"model"}),
		completionTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "memra_completion_tokens_total",
			Help: "Generated tokens of completed requests.",
		}, []string{"model"}),
	}
	m.reg.MustRegister(m.requests, m.ttft, m.itl, m.promptTokens, m.completionTokens,
		&engineCollector{models: models},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var (
	descRunning = prometheus.NewDesc("memra_requests_running",
		"Sequences generating now.", []string{"model"}, nil)
	descQueued = prometheus.NewDesc("memra_requests_queued",
		"Requests waiting to run (generation, and embedding requests waiting for a step between generation steps).", []string{"model"}, nil)
	descKV = prometheus.NewDesc("memra_kv_cache_usage_ratio",
		"Fraction of the KV page pool held by running sequences (0–1).", []string{"model"}, nil)
	descPages = prometheus.NewDesc("memra_kv_pages",
		"KV pages of the pool by state: used (held by running sequences), cached (kept for prefix reuse, evictable), total.",
		[]string{"model", "state"}, nil)
	descCached = prometheus.NewDesc("memra_prefix_cache_hit_tokens_total",
		"Prompt tokens whose keys and values came from the prefix cache.", []string{"model"}, nil)
	descComputed = prometheus.NewDesc("memra_prompt_tokens_computed_total",
		"Prompt tokens the engine computed (prefill), preempted sequences' recomputation included.", []string{"model"}, nil)
	descPreempt = prometheus.NewDesc("memra_preemptions_total",
		"Running sequences that gave their KV pages back for lack of memory and resumed later.", []string{"model"}, nil)
	descSteps = prometheus.NewDesc("memra_engine_steps_total",
		"Engine steps: decode (no prompt tokens) or prefill (prompt chunks, with the decodes beside them).", []string{"model", "kind"}, nil)
	descStepTime = prometheus.NewDesc("memra_engine_seconds_total",
		"Time of the engine's steps: backend (the forward pass, device sampling included) or host (the loop's own work: admission, pages, host sampling, text, events).",
		[]string{"model", "part"}, nil)
	descStepRows = prometheus.NewDesc("memra_engine_step_rows_total",
		"Entries of the engine's steps by kind (a decode step's mean width: rows ÷ memra_engine_steps_total{kind=\"decode\"}).", []string{"model", "kind"}, nil)
	descStepKindTime = prometheus.NewDesc("memra_engine_step_seconds_total",
		"Backend time of the engine's steps by kind: decode (no prompt tokens) or prefill (prompt chunks with the decodes beside them).", []string{"model", "kind"}, nil)
	descFed = prometheus.NewDesc("memra_engine_fed_steps_total",
		"Decode steps launched before the host had the tokens of the step before them, which the device fed them (pipelined decode).", []string{"model"}, nil)
	descDeviceSteps = prometheus.NewDesc("memra_engine_device_steps_total",
		"Pipelined decode steps the backend timed on the device (CUDA events).", []string{"model"}, nil)
	descDeviceTime = prometheus.NewDesc("memra_engine_device_seconds_total",
		"Device time of the timed pipelined steps: inputs (their input copies and fed tokens) and step (their launches and the copy of their tokens to the host). Less than the host's decode step seconds over the same steps by the time the device waited between steps.",
		[]string{"model", "part"}, nil)
	descSpec = prometheus.NewDesc("memra_spec_tokens_total",
		"Speculative decoding: tokens drafted and tokens the target accepted (acceptance rate: accepted ÷ drafted).", []string{"model", "kind"}, nil)
	descSpecSteps = prometheus.NewDesc("memra_spec_steps_total",
		"Sequence-steps that verified drafts (mean accepted tokens a step: accepted ÷ steps, plus the step's own token).", []string{"model"}, nil)
)

// The model-server protocol of the Gateway API Inference Extension: its
// endpoint picker scrapes each replica for queued and running requests and
// KV-cache utilisation under vLLM's names (its defaults), and for the
// KV block size and count in vllm:cache_config_info's labels. memra exports
// them beside its own series, so an inference gateway routes to memra
// replicas with no configuration of its own. kv_cache_usage_perc is a
// fraction (1 is full), as vLLM's is; gpu_cache_usage_perc is its older
// name, which earlier endpoint pickers read.
var (
	descGatewayWaiting = prometheus.NewDesc("vllm:num_requests_waiting",
		"Requests waiting to be processed (memra_requests_queued; Gateway API Inference Extension model-server protocol).", []string{"model_name"}, nil)
	descGatewayRunning = prometheus.NewDesc("vllm:num_requests_running",
		"Requests running (memra_requests_running; Gateway API Inference Extension model-server protocol).", []string{"model_name"}, nil)
	descGatewayKV = prometheus.NewDesc("vllm:kv_cache_usage_perc",
		"KV-cache usage, 1 is full (memra_kv_cache_usage_ratio; Gateway API Inference Extension model-server protocol).", []string{"model_name"}, nil)
	descGatewayKVOld = prometheus.NewDesc("vllm:gpu_cache_usage_perc",
		"KV-cache usage, 1 is full (vllm:kv_cache_usage_perc under the name earlier endpoint pickers read).", []string{"model_name"}, nil)
	descGatewayCache = prometheus.NewDesc("vllm:cache_config_info",
		"KV cache configuration in labels: block_size (positions a page), num_gpu_blocks (pages); the value is 1.",
		[]string{"model_name", "block_size", "num_gpu_blocks"}, nil)
)

// engineCollector reads each engine's Stats at scrape time.
type engineCollector struct{ models []*Model }

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRunning
	ch <- descQueued
	ch <- descKV
	ch <- descPages
	ch <- descCached
	ch <- descComputed
	ch <- descPreempt
	ch <- descSteps
	ch <- descFed
	ch <- descDeviceSteps
	ch <- descDeviceTime
	ch <- descStepTime
	ch <- descStepRows
	ch <- descStepKindTime
	ch <- descSpec
	ch <- descSpecSteps
	ch <- descGatewayWaiting
	ch <- descGatewayRunning
	ch <- descGatewayKV
	ch <- descGatewayKVOld
	ch <- descGatewayCache
}

// Collect implements prometheus.Collector.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.models {
		st := m.Engine.Stats()
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running), m.ID)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.Queued), m.ID)
		kv := 0.0
		if st.KVTokensTotal > 0 {
			kv = float64(st.KVTokensUsed) / float64(st.KVTokensTotal)
		}
		ch <- prometheus.MustNewConstMetric(descKV, prometheus.GaugeValue, kv, m.ID)
		for _, p := range []struct {
			state string
			n     int
		}{{"used", st.KVPagesUsed}, {"cached", st.KVPagesCached}, {"total", st.KVPagesTotal}} {
			ch <- prometheus.MustNewConstMetric(descPages, prometheus.GaugeValue, float64(p.n), m.ID, p.state)
		}
		ch <- prometheus.MustNewConstMetric(descCached, prometheus.CounterValue, float64(st.CachedTokens), m.ID)
		ch <- prometheus.MustNewConstMetric(descComputed, prometheus.CounterValue, float64(st.PromptTokens), m.ID)
		ch <- prometheus.MustNewConstMetric(descPreempt, prometheus.CounterValue, float64(st.Preemptions), m.ID)
		ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(st.DecodeSteps), m.ID, "decode")
		ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(st.PrefillSteps), m.ID, "prefill")
		ch <- prometheus.MustNewConstMetric(descStepTime, prometheus.CounterValue, st.BackendSeconds, m.ID, "backend")
		ch <- prometheus.MustNewConstMetric(descStepTime, prometheus.CounterValue, st.HostSeconds, m.ID, "host")
		ch <- prometheus.MustNewConstMetric(descStepRows, prometheus.CounterValue, float64(st.DecodeRows), m.ID, "decode")
		ch <- prometheus.MustNewConstMetric(descStepRows, prometheus.CounterValue, float64(st.PrefillRows), m.ID, "prefill")
		ch <- prometheus.MustNewConstMetric(descStepKindTime, prometheus.CounterValue, st.BackendSeconds-st.PrefillSeconds, m.ID, "decode")
		ch <- prometheus.MustNewConstMetric(descStepKindTime, prometheus.CounterValue, st.PrefillSeconds, m.ID, "prefill")
		ch <- prometheus.MustNewConstMetric(descFed, prometheus.CounterValue, float64(st.FedSteps), m.ID)
		ch <- prometheus.MustNewConstMetric(descDeviceSteps, prometheus.CounterValue, float64(st.DeviceSteps), m.ID)
		ch <- prometheus.MustNewConstMetric(descDeviceTime, prometheus.CounterValue, st.DeviceInputSeconds, m.ID, "inputs")
		ch <- prometheus.MustNewConstMetric(descDeviceTime, prometheus.CounterValue, st.DeviceStepSeconds, m.ID, "step")
		ch <- prometheus.MustNewConstMetric(descSpec, prometheus.CounterValue, float64(st.SpecDrafted), m.ID, "drafted")
		ch <- prometheus.MustNewConstMetric(descSpec, prometheus.CounterValue, float64(st.SpecAccepted), m.ID, "accepted")
		ch <- prometheus.MustNewConstMetric(descSpecSteps, prometheus.CounterValue, float64(st.SpecSteps), m.ID)
		ch <- prometheus.MustNewConstMetric(descGatewayWaiting, prometheus.GaugeValue, float64(st.Queued), m.ID)
		ch <- prometheus.MustNewConstMetric(descGatewayRunning, prometheus.GaugeValue, float64(st.Running), m.ID)
		ch <- prometheus.MustNewConstMetric(descGatewayKV, prometheus.GaugeValue, kv, m.ID)
		ch <- prometheus.MustNewConstMetric(descGatewayKVOld, prometheus.GaugeValue, kv, m.ID)
		if st.KVPagesTotal > 0 {
			block := strconv.Itoa(st.KVTokensTotal / st.KVPagesTotal)
			ch <- prometheus.MustNewConstMetric(descGatewayCache, prometheus.GaugeValue, 1, m.ID, block, strconv.Itoa(st.KVPagesTotal))
		}
	}
}
