package grammar

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

var outputsPerSchema = flag.Int("grammar.outputs", 200, "outputs generated per schema by TestSchemaOutputsValidate")

// synthVocab is an in-test vocabulary: every single byte, random strings
// of a JSON-ish alphabet, and one end-of-generation token (the last id).
type synthVocab struct {
	toks [][]byte
	eos  int32
}

func (v *synthVocab) VocabSize() int { return len(v.toks) }
func (v *synthVocab) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(v.toks) {
		return nil
	}
	return v.toks[id]
}
func (v *synthVocab) IsEOG(id int32) bool { return id == v.eos }

func newSynthVocab(seed uint64, n int) *synthVocab {
	const alphabet = "{}[]\":,.-+eE0123456789 \n\\abcdefnlrstuxyzABCXYZ-_@T:é"
	rng := rand.New(rand.NewPCG(seed, 1))
	v := &synthVocab{}
	for c := 0; c < 256; c++ {
		v.toks = append(v.toks, []byte{byte(c)})
	}
	alpha := []rune(alphabet)
	for i := 0; i < n; i++ {
		var b []byte
		for k := 1 + rng.IntN(6); k > 0; k-- {
			b = append(b, string(alpha[rng.IntN(len(alpha))])...)
		}
		v.toks = append(v.toks, b)
	}
	v.toks = append(v.toks, nil, nil) // a control token, then EOS
	v.eos = int32(len(v.toks) - 1)
	return v
}

// generate samples one output with uniformly random logits under the
// mask, until EOS (done) or maxTokens.
func generate(t testing.TB, g *Grammar, voc *Vocabulary, src *synthVocab, rng *rand.Rand, maxTokens int) (string, bool) {
	m := NewSamplerMask(g, voc)
	logits := make([]float32, voc.Size()+5) // padded like a real output layer
	var out []byte
	for range maxTokens {
		for i := range logits {
			logits[i] = rng.Float32()
		}
		m.Apply(logits)
		best, bestV := int32(-1), float32(math.Inf(-1))
		for i, x := range logits {
			if x > bestV {
				best, bestV = int32(i), x
			}
		}
		require.GreaterOrEqual(t, best, int32(0), "no token allowed after %q", out)
		m.Accept(best)
		require.NoError(t, m.Err())
		if best == src.eos {
			require.True(t, g.Match(out), "EOS allowed but %q does not match", out)
			return string(out), true
		}
		out = append(out, src.TokenBytes(best)...)
	}
	return string(out), false
}

func TestSchemaOutputsValidate(t *testing.T) {
	n := *outputsPerSchema
	if testing.Short() {
		n = 20
	}
	src := newSynthVocab(7, 2000)
	voc := NewVocabulary(src)
	files, err := filepath.Glob("testdata/schemas/*.json")
	require.NoError(t, err)
	require.Len(t, files, 50)
	finished, capped := 0, 0
	for i, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		g, err := FromJSONSchema(data)
		require.NoError(t, err, file)

		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		require.NoError(t, c.AddResource("schema.json", doc))
		sch, err := c.Compile("schema.json")
		require.NoError(t, err, file)

		rng := rand.New(rand.NewPCG(uint64(i), 99))
		for k := 0; k < n; k++ {
			out, done := generate(t, g, voc, src, rng, 600)
			if !done {
				capped++
				continue
			}
			finished++
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
			require.NoError(t, err, "%s: output %q is not JSON", file, out)
			require.NoError(t, sch.Validate(inst), "%s: output %q", file, out)
		}
	}
	t.Logf("%d outputs validated, %d hit the length cap (finish \"length\")", finished, capped)
	require.Greater(t, finished, 9*(finished+capped)/10, "most outputs must finish")
}

// arithmetic is an independent parser of arithmeticGBNF's language.
func arithmeticOK(s string) bool {
	p := 0
	var expr, term, factor func() bool
	factor = func() bool {
		if p < len(s) && s[p] == '(' {
			p++
			if !expr() || p >= len(s) || s[p] != ')' {
				return false
			}
			p++
			return true
		}
		start := p
		for p < len(s) && s[p] >= '0' && s[p] <= '9' {
			p++
		}
		return p > start && p-start <= 4
	}
	term = func() bool {
		if !factor() {
			return false
		}
		for p < len(s) && (s[p] == '*' || s[p] == '/') {
			p++
			if !factor() {
				return false
			}
		}
		return true
	}
	expr = func() bool {
		if !term() {
			return false
		}
		for p < len(s) && (s[p] == '+' || s[p] == '-') {
			p++
			if !term() {
				return false
			}
		}
		return true
	}
	return expr() && p == len(s)
}

func TestGBNFOutputsParse(t *testing.T) {
	csv := regexp.MustCompile(`^(?:[a-zA-Z0-9 ]{0,12}|"(?:[^"\n]|""){0,12}")(?:,(?:[a-zA-Z0-9 ]{0,12}|"(?:[^"\n]|""){0,12}")){0,4}$`)
	names := regexp.MustCompile(`^\[[A-Z][a-z]{1,10}(?:, [A-Z][a-z]{1,10}){0,5}\]$`)
	cases := []struct {
		name, grammar string
		check         func(string) bool
	}{
		{"arithmetic", arithmeticGBNF, arithmeticOK},
		{"csv", csvGBNF, csv.MatchString},
		{"names", namesGBNF, names.MatchString},
	}
	src := newSynthVocab(11, 2000)
	voc := NewVocabulary(src)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromGBNF(tc.grammar)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			finished := 0
			for k := 0; k < 200; k++ {
				out, done := generate(t, g, voc, src, rng, 400)
				if !done {
					continue
				}
				finished++
				require.True(t, tc.check(out), "%q", out)
			}
			require.Greater(t, finished, 150)
		})
	}
}

func TestJSONObjectOutputsParse(t *testing.T) {
	src := newSynthVocab(13, 2000)
	voc := NewVocabulary(src)
	g := JSONObject()
	rng := rand.New(rand.NewPCG(4, 4))
	finished := 0
	for k := 0; k < 200; k++ {
		out, done := generate(t, g, voc, src, rng, 600)
		if !done {
			continue
		}
		finished++
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "%q", out)
	}
	t.Logf("%d of 200 json_object outputs finished", finished)
	require.Greater(t, finished, 100)
}
