package serve

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeSchema is an array that cannot end within decodeTokens tokens, so
// a masked run generates exactly as many tokens as an unmasked one.
const decodeSchema = `{"type":"array","minItems":200,"items":{"type":"object",` +
	`"properties":{"id":{"type":"integer"},"name":{"type":"string","maxLength":12},"ok":{"type":"boolean"}},` +
	`"required":["id","name","ok"],"additionalProperties":false}}`

const decodeTokens = 128

// BenchmarkSynthDecodeSchema compares decode speed with and without a
// json_schema mask on the synthesized one-layer llama3 model with the
// real 128,256-token vocabulary, at batch 1: the same prompt, seed and
// max_tokens, ignore_eos, and exactly decodeTokens generated tokens in
// every run (checked). Runs alternate plain and masked, 5 of each; it
// reports the median tokens/s of each and the slowdown of the median.
//
// go test -run X -bench SynthDecodeSchema -benchtime 1x ./serve/
func BenchmarkSynthDecodeSchema(b *testing.B) {
	srv := synthServer(b)
	t := &testing.T{} // srv.do's helper receiver; failures are checked with b
	bodies := map[string]string{
		"plain": fmt.Sprintf(`{"model":"synth","prompt":"x","temperature":1,"seed":1,"max_tokens":%d,"ignore_eos":true}`, decodeTokens),
		"json_schema": fmt.Sprintf(`{"model":"synth","prompt":"x","temperature":1,"seed":1,"max_tokens":%d,"ignore_eos":true,`+
			`"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":%s}}}`, decodeTokens, decodeSchema),
	}
	run := func(name string) float64 {
		start := time.Now()
		status, _, raw := srv.do(t, "POST", "/v1/completions", bodies[name])
		el := time.Since(start)
		require.Equal(b, 200, status, string(raw))
		var resp struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage usage
		}
		require.NoError(b, json.Unmarshal(raw, &resp))
		require.Equal(b, decodeTokens, resp.Usage.CompletionTokens, "%s: %s", name, raw)
		require.Equal(b, "length", resp.Choices[0].FinishReason)
		return float64(decodeTokens) / el.Seconds()
	}
	for b.Loop() {
		run("plain") // warm: the first masks of the schema are computed here
		run("json_schema")
		rates := map[string][]float64{}
		for range 5 {
			for _, name := range []string{"plain", "json_schema"} {
				rates[name] = append(rates[name], run(name))
			}
		}
		med := map[string]float64{}
		for name, r := range rates {
			slices.Sort(r)
			med[name] = r[len(r)/2]
			b.Logf("%s: median %.1f tok/s, min %.1f, max %.1f, runs %.1f", name, med[name], r[0], r[len(r)-1], r)
			b.ReportMetric(med[name], name+"-tok/s")
		}
		b.ReportMetric(100*(1-med["json_schema"]/med["plain"]), "slowdown-%")
	}
}
