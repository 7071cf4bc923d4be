package serve

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

// synthServer serves a one-layer llama3-shaped model with random weights
// and the real 128,256-token Llama 3 vocabulary: only the masks keep its
// output valid.
func synthServer(t testing.TB) *testServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llama3.gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: "llama3-8b", Layers: 1, Dim: 64, FFN: 128, Context: 1024, Quant: "f32", Seed: 1})
	require.NoError(t, err)
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	b, err := cpu.New(m, cpu.Options{MaxSeqs: 16})
	require.NoError(t, err)
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: 16, MaxQueue: 256})
	t.Cleanup(func() { eng.Close() })
	s, err := New(Config{Host: "127.0.0.1", Models: []Model{{ID: "synth", Engine: FromRuntime(eng), Template: fakeTemplate{}}}})
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: s, ts: ts}
}

// TestSynthLlama3StructuredOutput is the done-when of structured output:
// outputs (4 seeds: 200 in all) for each of the 50 schemas of serve/grammar's
// testdata, at temperature 1 over a real 128k vocabulary with random
// weights, all validate; and GBNF grammars likewise (4 seeds). Outputs cut
// by max_tokens are counted apart and must be a minority. It is the
// package's slowest test (every token samples from 128k logits), so it
// runs beside the others.
func TestSynthLlama3StructuredOutput(t *testing.T) {
	t.Parallel()
	srv := synthServer(t)
	files, err := filepath.Glob("grammar/testdata/schemas/*.json")
	require.NoError(t, err)
	require.Len(t, files, 50)
	seeds, gbnfSeeds := 4, 4
	if testing.Short() {
		files, seeds, gbnfSeeds = files[:10], 1, 2
	}
	type job struct {
		name, body, schema string
		regex              string
	}
	var jobs []job
	for _, f := range files {
		schema, err := os.ReadFile(f)
		require.NoError(t, err)
		for seed := 0; seed < seeds; seed++ {
			body := fmt.Sprintf(`{"model":"synth","prompt":"x","temperature":1,"seed":%d,"max_tokens":96,`+
				`"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":%s}}}`, seed, schema)
			jobs = append(jobs, job{name: filepath.Base(f), body: body, schema: string(schema)})
		}
	}
	for name, g := range map[string][2]string{
		"arithmetic": {"root ::= expr\nexpr ::= term ((\"+\" | \"-\" | \"*\") term)*\nterm ::= [0-9]{1,3} | \"(\" expr \")\"", `^[0-9+\-*()]+$`},
		"csv line":   {"root ::= field (\",\" field){3} \"\\n\"\nfield ::= [a-z0-9]{1,8}", `^[a-z0-9]{1,8}(,[a-z0-9]{1,8}){3}\n$`},
		"names":      {"root ::= name (\", \" name){0,4}\nname ::= [A-Z] [a-z]{1,9}", `^[A-Z][a-z]{1,9}(, [A-Z][a-z]{1,9}){0,4}$`},
	} {
		q, _ := json.Marshal(g[0])
		for seed := 0; seed < gbnfSeeds; seed++ {
			jobs = append(jobs, job{name: name, regex: g[1],
				body: fmt.Sprintf(`{"model":"synth","prompt":"x","temperature":1,"seed":%d,"max_tokens":96,"grammar":%s}`, seed, q)})
		}
	}
	type result struct {
		text, finish string
	}
	results := make([]result, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			status, _, raw := srv.do(t, "POST", "/v1/completions", j.body)
			if status != 200 {
				results[i] = result{finish: "error " + string(raw)}
				return
			}
			var resp struct {
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			_ = json.Unmarshal(raw, &resp)
			results[i] = result{text: resp.Choices[0].Text, finish: resp.Choices[0].FinishReason}
		}()
	}
	wg.Wait()
	lengths := map[string]int{}
	for i, j := range jobs {
		r := results[i]
		require.Contains(t, []string{"stop", "length"}, r.finish, "%s: %s", j.name, r.finish)
		if r.finish == "length" {
			lengths[j.name]++
			continue
		}
		if j.regex != "" {
			require.Regexp(t, j.regex, r.text, j.name)
			continue
		}
		validates(t, compileSchema(t, j.schema), r.text)
	}
	total := 0
	var names []string
	for n, c := range lengths {
		total += c
		names = append(names, fmt.Sprintf("%s:%d", n, c))
	}
	sort.Strings(names)
	t.Logf("%d outputs, %d validated, %d cut by max_tokens %v", len(jobs), len(jobs)-total, total, names)
	require.Less(t, total*3, len(jobs), "at most a third may be cut by max_tokens")
}
