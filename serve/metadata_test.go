package serve

import (
	"encoding/json"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const goodMetadata = `{
  "currency": "EUR",
  "provider": {
    "name": "Example Inference",
    "status_url": "https://status.example.com",
    "contacts": {"support": "support@example.com", "security": "https://example.com/security"},
    "regions": ["eu-central", "us-east"]
  },
  "models": {
    "fake": {
      "display_name": "Fake 1B",
      "pricing": {"input": "0.0000001", "output": "0.000000125", "cache_read": "0.00000000000000000003", "cache_write": "2"},
      "input_modalities": ["text"],
      "output_modalities": ["text"],
      "context_length": 128,
      "max_output_tokens": 64
    }
  }
}
`

func withMetadata(t *testing.T, text string) func(*Config) {
	md, err := ParseMetadata("models.json", []byte(text))
	require.NoError(t, err)
	return func(c *Config) { c.Metadata = md }
}

// TestModelsRenderPricesExactly: /v1/models shows each price per token of
// the metadata file per million tokens, shifted as decimal digits, where
// float arithmetic would not give the same text.
func TestModelsRenderPricesExactly(t *testing.T) {
	// what float64 arithmetic shows for the first price (Go constants are
	// exact, so the product is taken at run time)
	perToken, million := 0.0000001, 1e6
	require.Equal(t, "0.09999999999999999", strconv.FormatFloat(perToken*million, 'f', -1, 64))
	s := newTestServer(t, nil, withMetadata(t, goodMetadata))
	status, _, raw := s.do(t, "GET", "/v1/models/fake", ``)
	require.Equal(t, http.StatusOK, status)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, map[string]any{"currency": "EUR", "unit": "1M tokens", "input": "0.1", "output": "0.125",
		"cache_read": "0.00000000000003", "cache_write": "2000000"}, m["pricing"])
	require.Equal(t, "Fake 1B", m["name"])
	require.Equal(t, []any{"text"}, m["input_modalities"])
	require.Equal(t, []any{"text"}, m["output_modalities"])
	require.EqualValues(t, 128, m["context_length"], "the metadata's limit, below the engine's 256")
	require.EqualValues(t, 64, m["max_output_tokens"])
	require.Equal(t, map[string]any{"name": "Example Inference", "status_url": "https://status.example.com",
		"contacts": map[string]any{"support": "support@example.com", "security": "https://example.com/security"},
		"regions":  []any{"eu-central", "us-east"}}, m["provider"])
	// the model without an entry keeps the engine's figures, with the provider
	_, _, raw = s.do(t, "GET", "/v1/models/fake-2", ``)
	var m2 map[string]any
	require.NoError(t, json.Unmarshal(raw, &m2))
	require.Nil(t, m2["pricing"])
	require.EqualValues(t, 256, m2["context_length"])
	require.NotNil(t, m2["provider"])
}

// TestMetadataRefused: a malformed or unknown entry stops the start with
// the file and the line.
func TestMetadataRefused(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
	}{
		{"unknown top key", "{\n  \"prices\": {}\n}", "models.json:2: unknown key \"prices\""},
		{"unknown model key", "{\"models\": {\n \"fake\": {\n  \"price\": 1}}}", "models.json:3: unknown model key \"price\""},
		{"float price", "{\"models\": {\"fake\": {\n\"pricing\": {\n\"input\": 0.0000001}}}}", "models.json:3: pricing.input must be a string"},
		{"exponent price", "{\"models\": {\"fake\": {\"pricing\": {\n\n\"output\": \"1e-7\"}}}}", "models.json:3: pricing.output: \"1e-7\" is not a decimal"},
		{"negative price", "{\"models\": {\"fake\": {\"pricing\": {\"input\": \"-1\"}}}}", "models.json:1: pricing.input"},
		{"unknown price", "{\"models\": {\"fake\": {\"pricing\": {\n\"batch\": \"1\"}}}}", "models.json:2: unknown price \"batch\""},
		{"modality", "{\"models\": {\"fake\": {\n\"input_modalities\": [\"smell\"]}}}", "models.json:2: input_modalities: unknown modality"},
		{"limit", "{\"models\": {\"fake\": {\"context_length\": 1.5}}}", "context_length must be a positive integer"},
		{"duplicate", "{\"models\": {},\n\"models\": {}}", "models.json:2: key \"models\" appears twice"},
		{"syntax", "{\n\"models\": {\n\"fake\": {,}}}", "models.json:3:"},
		{"truncated", "{\n\"models\": {", "models.json:2: unexpected end"},
		{"currency", "{\"currency\": \"dollars\"}", "three-letter"},
		{"status url", "{\"provider\": {\n\"status_url\": \"status.example.com\"}}", "models.json:2: status_url"},
		{"provider key", "{\"provider\": {\n\"phone\": \"1\"}}", "models.json:2: unknown provider key"},
		{"trailing", "{}\n{}", "models.json:2: text after"},
	} {
		_, err := ParseMetadata("models.json", []byte(c.text))
		require.ErrorIs(t, err, ErrMetadata, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
	// what only the served models can tell, at New
	for _, c := range []struct{ text, want string }{
		{"{\"models\": {\n\n\"other\": {}}}", "models.json:3: model \"other\" is not served (served: fake, fake-2)"},
		{"{\"models\": {\n\"fake\": {\"context_length\": 1000}}}", "models.json:2: model \"fake\": context_length 1000 is more than the 256"},
		{"{\"models\": {\n\"fake\": {\"max_output_tokens\": 1000}}}", "max_output_tokens 1000"},
	} {
		md, err := ParseMetadata("models.json", []byte(c.text))
		require.NoError(t, err)
		_, err = New(Config{Host: "127.0.0.1", Metadata: md,
			Models: []Model{{ID: "fake", Engine: newFakeEngine()}, {ID: "fake-2", Engine: newFakeEngine()}}})
		require.ErrorIs(t, err, ErrMetadata)
		require.ErrorContains(t, err, c.want)
	}
	path := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(path, []byte(goodMetadata), 0o644))
	md, err := LoadMetadata(path)
	require.NoError(t, err)
	require.Equal(t, path, md.Path)
	_, err = LoadMetadata(path + ".missing")
	require.ErrorIs(t, err, ErrMetadata)
}

// TestUsageCost: with UsageCost a response's usage carries its price, the
// exact decimal sum of tokens times prices, written as a JSON number.
func TestUsageCost(t *testing.T) {
	s := newTestServer(t, nil, func(c *Config) {
		withMetadata(t, goodMetadata)(c)
		c.UsageCost = true
	})
	status, _, raw := s.do(t, "POST", "/v1/completions", `{"model":"fake","prompt":"Once","max_tokens":7,"temperature":0}`)
	require.Equal(t, http.StatusOK, status, string(raw))
	var r struct {
		Usage struct {
			Prompt     int         `json:"prompt_tokens"`
			Completion int         `json:"completion_tokens"`
			Cost       json.Number `json:"cost"`
		} `json:"usage"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&r))
	in, _ := new(big.Rat).SetString("0.0000001")
	out, _ := new(big.Rat).SetString("0.000000125")
	want := new(big.Rat).Add(new(big.Rat).Mul(in, big.NewRat(int64(r.Usage.Prompt), 1)),
		new(big.Rat).Mul(out, big.NewRat(int64(r.Usage.Completion), 1)))
	require.Equal(t, 5, r.Usage.Prompt)
	require.Equal(t, 7, r.Usage.Completion)
	require.Equal(t, strings.TrimRight(want.FloatString(12), "0"), string(r.Usage.Cost))
	require.Equal(t, "0.000001375", string(r.Usage.Cost))

	// without the switch, or for a model without prices, no cost
	plain := newTestServer(t, nil, withMetadata(t, goodMetadata))
	_, _, raw = plain.do(t, "POST", "/v1/completions", `{"model":"fake","prompt":"Once","max_tokens":2}`)
	require.NotContains(t, string(raw), "cost")
	_, _, raw = s.do(t, "POST", "/v1/completions", `{"model":"fake-2","prompt":"Once","max_tokens":2}`)
	require.NotContains(t, string(raw), "cost")
}

// TestDecimal: parsing, the exact shift and arithmetic.
func TestDecimal(t *testing.T) {
	for _, c := range []struct {
		in     string
		shift  int
		want   string
		times  int64
		timesW string
	}{
		{"0.0000001", 6, "0.1", 3, "0.0000003"},
		{"0.000000125", 6, "0.125", 8, "0.000001"},
		{"2", 6, "2000000", 5, "10"},
		{"0", 6, "0", 9, "0"},
		{"000.5000", 0, "0.5", 3, "1.5"},
		{"1.25", -3, "0.00125", 4, "5"},
		{"123456789012345678901234567890.000001", 6, "123456789012345678901234567890000001", 1000000, "123456789012345678901234567890000001"},
	} {
		d, err := parseDecimal(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, d.shift(c.shift).String(), "%s shifted %d", c.in, c.shift)
		require.Equal(t, c.timesW, d.mulInt(c.times).String(), "%s × %d", c.in, c.times)
	}
	a, _ := parseDecimal("0.1")
	b, _ := parseDecimal("0.2")
	require.Equal(t, "0.3", a.add(b).String())
	for _, bad := range []string{"", ".5", "5.", "1e5", "-1", "+1", " 1", "1.2.3", "0x10", strings.Repeat("9", 41)} {
		_, err := parseDecimal(bad)
		require.Error(t, err, "%q", bad)
	}
}

// FuzzParseDecimal: any accepted string prints back as the same number
// (compared as exact rationals), and shifting there and back is exact.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0.0000001", "2", "000.5000", "1.25", "0"} {
		f.Add(s, 6)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		d, err := parseDecimal(s)
		if err != nil {
			return
		}
		want, ok := new(big.Rat).SetString(s)
		require.True(t, ok, s)
		got, ok := new(big.Rat).SetString(d.String())
		require.True(t, ok, d.String())
		require.Zero(t, want.Cmp(got), "%s printed %s", s, d)
		n %= 64
		require.Equal(t, d.String(), d.shift(n).shift(-n).String())
	})
}

// FuzzParseMetadata: the metadata parser never panics, and what it
// accepts is a metadata value.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(goodMetadata))
	f.Add([]byte(`{"models":{"a":{"pricing":{"input":"1"}}}}`))
	f.Add([]byte(`{"provider":{"regions":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		md, err := ParseMetadata("f.json", data)
		if err == nil {
			require.NotNil(t, md.Models)
		}
	})
}
