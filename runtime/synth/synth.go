package synth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/tokenizer"
)

// ErrOptions reports options that do not describe a model.
var ErrOptions = errors.New("synth: bad options")

// Weights modes.
const (
	WeightsAuto   = "auto"   // float below AutoBlocksParams parameters, blocks above
	WeightsFloat  = "float"  // draw float32 values, store them quantised with dtype.Quantize
	WeightsBlocks = "blocks" // random valid quantised blocks: fast, for big benchmark models
)

// AutoBlocksParams is the parameter count above which WeightsAuto writes
// random blocks for quantised tensors instead of quantising floats.
const AutoBlocksParams = 300_000_000

// Options say what to synthesize.
type Options struct {
	Preset  string // a name from Presets()
	Arch    string // optional: must match the preset's architecture
	Quant   string // a mix (q4_k_m, q8_0, f16, …) or a single type (q4_k)
	Seed    uint64
	Layers  int // overrides; 0 keeps the preset's
	Dim     int
	FFN     int
	Context int
	Window  int    // sliding-window layers' window (Gemma); 0 keeps the preset's
	Weights string // WeightsAuto (default), WeightsFloat or WeightsBlocks
	// Pooling, when set (mean, cls or last), writes an embedding variant:
	// no output head, the pooling declared (GGUF {arch}.pooling_type; a
	// checkpoint in the Qwen3-Embedding layout, the backbone without
	// "model." and a sentence-transformers Pooling module), and for last
	// pooling a tokenizer that ends every input with EOS.
	Pooling string
	// Progress, when set, is told the bytes of each tensor as it is written.
	Progress func(done, total int64)
}

// Plan is what a set of options resolves to.
type Plan struct {
	HParams  ir.HParams
	Preset   Preset
	Mix      string
	FileType uint32
	Tensors  []PlannedTensor
	Bytes    int64 // tensor bytes in all
	Params   int64
	Blocks   bool   // quantised tensors are random blocks, not quantised floats
	Pooling  string // an embedding variant's pooling (Options.Pooling), or ""
}

// PlannedTensor is one tensor with its chosen type.
type PlannedTensor struct {
	Name  string
	Type  dtype.Type
	Shape []int // GGUF order
	Bytes int64
	spec  tensorSpec
}

// NewPlan resolves options into hyperparameters and per-tensor types.
func NewPlan(o Options) (*Plan, error) {
	p, err := Lookup(o.Preset)
	if err != nil {
		return nil, err
	}
	if o.Arch != "" && o.Arch != p.HParams.Arch {
		return nil, fmt.Errorf("%w: preset %s is architecture %s, not %s", ErrOptions, p.Name, p.HParams.Arch, o.Arch)
	}
	hp, err := o.shape(p)
	if err != nil {
		return nil, err
	}
	q := o.Quant
	if q == "" {
		q = "f16"
	}
	m, err := lookupMix(q)
	if err != nil {
		return nil, err
	}
	switch o.Pooling {
	case "":
	case "mean", "cls", "last":
		hp.TiedEmbedding = true // no output head: token_embd stands in where a graph wants one
	default:
		return nil, fmt.Errorf("%w: pooling %q (mean, cls or last)", ErrOptions, o.Pooling)
	}
	pl := &Plan{HParams: hp, Preset: p, Mix: m.name, FileType: m.fileType, Pooling: o.Pooling}
	for _, ts := range tensorsOf(hp) {
		t := dtype.F32
		if ts.kind == kindMatrix {
			t = moeType(m, hp, &ts, m.typeFor(ts.role, ts.layer, hp.Layers, hp.Heads/max(1, hp.HeadsKV), ts.ne[0], hp.TiedEmbedding))
		}
		n := ts.elems()
		rb, err := t.RowBytes(ts.ne[0])
		if err != nil {
			return nil, fmt.Errorf("synth: tensor %s: %w", ts.name, err)
		}
		b := int64(rb) * int64(n/ts.ne[0])
		pl.Tensors = append(pl.Tensors, PlannedTensor{Name: ts.name, Type: t, Shape: ts.ne, Bytes: b, spec: ts})
		pl.Bytes += b
		pl.Params += int64(n)
	}
	switch o.Weights {
	case "", WeightsAuto:
		pl.Blocks = pl.Params > AutoBlocksParams
	case WeightsFloat:
	case WeightsBlocks:
		pl.Blocks = true
	default:
		return nil, fmt.Errorf("%w: --weights %q (auto, float or blocks)", ErrOptions, o.Weights)
	}
	if m.fileType == 1024 {
		pl.FileType = 0
	}
	return pl, nil
}

// metadata returns the GGUF key/values of a planned model.
func (pl *Plan) metadata() ([]kv, error) {
	hp := pl.HParams
	a := ggufArch(hp.Arch)
	kvs := []kv{
		{"general.architecture", a},
		{"general.name", fmt.Sprintf("synth %s %s", hp.Name, pl.Mix)},
		{"general.file_type", pl.FileType},
		{"general.quantization_version", uint32(2)},
		{a + ".context_length", uint32(hp.ContextLength)},
		{a + ".embedding_length", uint32(hp.Embedding)},
		{a + ".block_count", uint32(hp.Layers)},
		{a + ".feed_forward_length", uint32(hp.FFN)},
		{a + ".attention.head_count", uint32(hp.Heads)},
		{a + ".attention.head_count_kv", uint32(hp.HeadsKV)},
		{a + ".attention.layer_norm_rms_epsilon", hp.RMSEps},
		{a + ".rope.freq_base", hp.RopeBase},
		{a + ".rope.dimension_count", uint32(hp.RopeDim)},
	}
	if hp.HeadDim != hp.Embedding/hp.Heads {
		kvs = append(kvs, kv{a + ".attention.key_length", uint32(hp.HeadDim)}, kv{a + ".attention.value_length", uint32(hp.HeadDim)})
	}
	if a == "llama" {
		kvs = append(kvs, kv{a + ".vocab_size", uint32(hp.VocabSize)})
	}
	kvs = append(kvs, moeKVs(hp, a)...)
	if rs := hp.RopeScaling; rs.Type == "yarn" {
		kvs = append(kvs, kv{a + ".rope.scaling.type", "yarn"}, kv{a + ".rope.scaling.factor", rs.Factor},
			kv{a + ".rope.scaling.original_context_length", uint32(rs.OriginalContext)})
	}
	if pl.Pooling != "" {
		kvs = append(kvs, kv{a + ".pooling_type", ggufPoolingType[pl.Pooling]})
	}
	if isGemma(a) {
		kvs = append(kvs, gemmaKVs(hp)...)
	}
	v, err := pl.vocab()
	if err != nil {
		return nil, err
	}
	kvs = append(kvs, tokenizerKVs(v)...)
	if pl.Preset.Template != "" {
		t, err := asset(pl.Preset.Template)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, kv{"tokenizer.chat_template", string(t)})
	}
	return kvs, nil
}

// ggufPoolingType numbers the poolings as GGUF's {arch}.pooling_type does.
var ggufPoolingType = map[string]uint32{"mean": 1, "cls": 2, "last": 3}

// vocab is the plan's tokenizer description: its preset's, ending every
// input with EOS for last-token pooling (the token whose state is the
// embedding).
func (pl *Plan) vocab() (*tokenizer.Vocab, error) {
	v, err := vocabFor(pl.Preset.Vocab, pl.HParams.VocabSize)
	if err != nil || pl.Pooling != "last" {
		return v, err
	}
	c := *v
	on := true
	c.AddEOS = &on
	return &c, nil
}

// tensorBytes produces the stored bytes of one planned tensor.
func (pl *Plan) tensorBytes(seed uint64, t *PlannedTensor) ([]byte, error) {
	ts := &t.spec
	if pl.Blocks && t.Type.Quantized() {
		rows := ts.elems() / ts.ne[0]
		return randomBlocks(seed, ts.name, t.Type, ts.ne[0], rows, 1/math.Sqrt(float64(ts.ne[0])))
	}
	x := pl.values(seed, ts)
	return encode(t.Type, ts.ne[0], x)
}

// values returns the float32 values of a tensor as a GGUF file of this
// architecture stores them (llama Q/K rows in interleaved-pair order).
func (pl *Plan) values(seed uint64, ts *tensorSpec) []float32 {
	x := floats(seed, pl.HParams, ts)
	if ggufArch(pl.HParams.Arch) == "llama" && (ts.role == "attn_q" || ts.role == "attn_k") {
		x = permuteRows(x, ts.ne[0], pl.HParams.HeadDim)
	}
	if isGemma(pl.HParams.Arch) && ts.kind == kindNorm {
		for i := range x {
			x[i]++ // Gemma's checkpoints store w and apply 1 + w; GGUF files store 1 + w
		}
	}
	return x
}

// WriteGGUF writes the model o describes as a GGUF v3 file to path.
func WriteGGUF(path string, o Options) (*Plan, error) {
	pl, err := NewPlan(o)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	bw := bufio.NewWriterSize(f, 4<<20)
	err = pl.writeGGUF(bw, o)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("synth: writing %s: %w", path, err)
	}
	return pl, nil
}

func (pl *Plan) writeGGUF(w io.Writer, o Options) error {
	kvs, err := pl.metadata()
	if err != nil {
		return err
	}
	gw := gguf.NewWriter(w)
	for _, x := range kvs {
		gw.AddKV(x.key, x.val)
	}
	for _, t := range pl.Tensors {
		dims := make([]uint64, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = uint64(d)
		}
		gw.AddTensor(t.Name, t.Type, dims, t.Bytes)
	}
	if err := gw.WriteHeader(); err != nil {
		return err
	}
	var done int64
	for i := range pl.Tensors {
		t := &pl.Tensors[i]
		b, err := pl.tensorBytes(o.Seed, t)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if err := gw.WriteTensorData(t.Name, b); err != nil {
			return err
		}
		done += t.Bytes
		if o.Progress != nil {
			o.Progress(done, pl.Bytes)
		}
	}
	return gw.Close()
}

// Describe is a one-line summary of a plan.
func (pl *Plan) Describe() string {
	hp := pl.HParams
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s, %d layers, dim %d, ffn %d, heads %d/%d×%d, vocab %d, %.2fB params, %.2f GB",
		hp.Name, pl.Mix, hp.Arch, hp.Layers, hp.Embedding, hp.FFN, hp.Heads, hp.HeadsKV, hp.HeadDim,
		hp.VocabSize, float64(pl.Params)/1e9, float64(pl.Bytes)/1e9)
	if pl.Blocks {
		b.WriteString(" (random blocks)")
	}
	return b.String()
}
