package arch

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// decoder builds the pre-norm decoder-only transformer the families share;
// a family's file chooses its options and may add to it.
type decoder struct {
	hp  ir.HParams
	w   Weights
	g   *ir.Graph
	err error

	tokens, pos *ir.Node
	freqs       *ir.Node // rope_freqs.weight, or nil
	embd        *ir.Node // token_embd.weight
	logitCap    float64  // > 0: finish soft-caps the logits (softcap)
}

// dims holds the derived dimensions of a model.
type dims struct{ E, H, Hkv, D, F, V, L, R int }

// normalize fills the defaults of hp (HeadsKV = Heads, HeadDim =
// Embedding/Heads, RopeDim = HeadDim, RopeBase = 10000) and checks it.
func normalize(hp ir.HParams, w Weights) (ir.HParams, error) {
	if hp.Embedding <= 0 || hp.Layers <= 0 || hp.Heads <= 0 || hp.FFN <= 0 {
		return hp, fmt.Errorf("%w: embedding %d, layers %d, heads %d, ffn %d must be positive", ErrHParams, hp.Embedding, hp.Layers, hp.Heads, hp.FFN)
	}
	if hp.HeadsKV == 0 {
		hp.HeadsKV = hp.Heads
	}
	if hp.HeadDim == 0 {
		hp.HeadDim = hp.Embedding / hp.Heads
	}
	if hp.RopeDim == 0 {
		hp.RopeDim = hp.HeadDim
	}
	if hp.RopeBase == 0 {
		hp.RopeBase = 10000
	}
	if hp.RMSEps == 0 {
		hp.RMSEps = 1e-5
	}
	if hp.VocabSize == 0 {
		if _, ne, ok := w.Lookup("token_embd.weight"); ok && len(ne) == 2 {
			hp.VocabSize = ne[1]
		}
	}
	if hp.HeadsKV <= 0 || hp.Heads%hp.HeadsKV != 0 {
		return hp, fmt.Errorf("%w: %d heads are not a multiple of %d KV heads", ErrHParams, hp.Heads, hp.HeadsKV)
	}
	if hp.HeadDim <= 0 || hp.RopeDim <= 0 || hp.RopeDim > hp.HeadDim || hp.RopeDim%2 != 0 {
		return hp, fmt.Errorf("%w: head dim %d, rope dims %d", ErrHParams, hp.HeadDim, hp.RopeDim)
	}
	if hp.RMSEps < 0 || hp.RopeBase < 0 {
		return hp, fmt.Errorf("%w: rms eps %g, rope base %g", ErrHParams, hp.RMSEps, hp.RopeBase)
	}
	return hp, nil
}

// newDecoder starts a graph with the step inputs, the shared rope
// frequency factors and the residual stream entering layer first: the
// embedding lookup of the tokens for first = 0, else a hidden_in.
func newDecoder(hp ir.HParams, w Weights, first int) (*decoder, *ir.Node, error) {
	hp, err := normalize(hp, w)
	if err != nil {
		return nil, nil, err
	}
	d := &decoder{hp: hp, w: w, g: ir.NewGraph(hp.Arch, hp.Name)}
	k := d.dims()
	for name, v := range map[string]int{"embd": k.E, "heads": k.H, "heads_kv": k.Hkv, "head_dim": k.D,
		"ffn": k.F, "vocab": k.V, "layers": k.L, "rope_dims": k.R} {
		d.g.Consts[name] = v
	}
	if first > 0 {
		d.pos = d.g.Add(ir.OpPositions, nil)
		if _, _, ok := w.Lookup("rope_freqs.weight"); ok {
			d.freqs = d.weight("rope_freqs.weight", k.R/2)
		}
		return d, d.g.Add(ir.OpHiddenIn, ir.Attrs{"dim": k.E}), d.err
	}
	d.tokens = d.g.Add(ir.OpTokens, nil)
	d.pos = d.g.Add(ir.OpPositions, nil)
	if _, _, ok := w.Lookup("rope_freqs.weight"); ok {
		d.freqs = d.weight("rope_freqs.weight", k.R/2)
	}
	d.embd = d.weight("token_embd.weight", k.E, k.V)
	x := d.g.Add(ir.OpEmbed, nil, d.embd, d.tokens)
	return d, x, d.err
}

func (d *decoder) dims() dims {
	hp := d.hp
	return dims{E: hp.Embedding, H: hp.Heads, Hkv: hp.HeadsKV, D: hp.HeadDim, F: hp.FFN, V: hp.VocabSize, L: hp.Layers, R: hp.RopeDim}
}

// weight adds a Weight node for name after checking it exists with ne
// order shape ne; the first failure is kept in d.err.
func (d *decoder) weight(name string, ne ...int) *ir.Node {
	t, got, ok := d.w.Lookup(name)
	switch {
	case d.err != nil:
	case !ok:
		d.err = fmt.Errorf("%w: %s", ErrMissingTensor, name)
	case !slices.Equal(got, ne):
		d.err = fmt.Errorf("%w: %s has ne %v, want %v", ErrTensorShape, name, got, ne)
	case !t.Known():
		d.err = fmt.Errorf("%w: %s has unknown type %v", ErrTensorShape, name, t)
	default:
		if _, err := t.RowBytes(ne[0]); err != nil {
			d.err = fmt.Errorf("%w: %s: %w", ErrTensorShape, name, err)
		}
		if len(ne) == 1 && t != dtype.F32 && t != dtype.F16 && t != dtype.BF16 {
			d.err = fmt.Errorf("%w: %s is a vector of type %v, want F32, F16 or BF16", ErrTensorShape, name, t)
		}
	}
	if d.err != nil {
		t, ne = dtype.F32, slices.Repeat([]int{1}, len(ne))
	}
	return d.g.Weight(name, t, ne)
}

func blk(l int, name string) string { return fmt.Sprintf("blk.%d.%s", l, name) }

// norm applies an RMSNorm with the named weight over the innermost axis.
func (d *decoder) norm(x *ir.Node, name string) *ir.Node {
	w := d.weight(name, int(x.Shape.Last()))
	return d.g.Add(ir.OpRMSNorm, ir.Attrs{"eps": f64(d.hp.RMSEps)}, x, w)
}

// linear multiplies x by the named [in,out] weight, adding the named bias
// when bias is set.
func (d *decoder) linear(x *ir.Node, name string, in, out int, bias bool) *ir.Node {
	y := d.g.Add(ir.OpMatmul, nil, x, d.weight(name+".weight", in, out))
	if bias {
		y = d.g.Add(ir.OpBiasAdd, nil, y, d.weight(name+".bias", out))
	}
	return y
}

func (d *decoder) reshape(x *ir.Node, dims ...int) *ir.Node {
	return d.g.Add(ir.OpReshape, ir.Attrs{"dims": dims}, x)
}

// ropeAttrs returns the attributes of the rope nodes and the factor YaRN
// multiplies cos and sin by (1 for other schemes).
func (d *decoder) ropeAttrs() (ir.Attrs, float64, error) {
	hp := d.hp
	sc := hp.RopeScaling
	a := ir.Attrs{"style": hp.RopeStyle.String(), "dims": hp.RopeDim, "base": f64(hp.RopeBase),
		"scaling": "none", "factor": 1.0, "orig_ctx": 0, "low_freq": 0.0, "high_freq": 0.0}
	switch strings.ToLower(sc.Type) {
	case "", "none":
	case "linear":
		if sc.Factor <= 0 {
			return nil, 0, fmt.Errorf("%w: linear rope scaling factor %g", ErrHParams, sc.Factor)
		}
		a["scaling"], a["factor"] = "linear", f64(sc.Factor)
	case "llama3":
		if d.freqs != nil {
			break // rope_freqs.weight already holds the llama3 divisors
		}
		low, high, orig := f64(sc.LowFreqFactor), f64(sc.HighFreqFactor), sc.OriginalContext
		if low == 0 {
			low = 1
		}
		if high == 0 {
			high = 4
		}
		if orig == 0 {
			orig = 8192
		}
		if sc.Factor <= 0 || high <= low {
			return nil, 0, fmt.Errorf("%w: llama3 rope scaling factor %g, low %g, high %g", ErrHParams, sc.Factor, low, high)
		}
		a["scaling"], a["factor"], a["orig_ctx"], a["low_freq"], a["high_freq"] = "llama3", f64(sc.Factor), orig, low, high
	case "yarn":
		return d.yarnAttrs(a)
	default:
		return nil, 0, fmt.Errorf("%w: rope scaling %q is not supported", ErrHParams, sc.Type)
	}
	return a, 1, nil
}

// yarnAttrs completes the rope attributes a for YaRN scaling and returns
// its attention factor m: AttnFactor when given, else
// YarnMscale(Factor, Mscale)/YarnMscale(Factor, MscaleAllDim) when both are
// given, else YarnMscale(Factor, 1) (Hugging Face's rules), times
// AttnFactorMul when given (llama.cpp's rope.scaling.attn_factor).
//
// YaRN multiplies cos and sin by m, so both q and k (their rotated
// elements) by m, and the attention scores by m². The graph folds m² into
// the attention node's scale instead: the same numbers, with the rope
// table and kernels unchanged, and one definition that the CPU reference
// and the generated CUDA kernels (whose score scale is a constant of the
// attention kernels) both read from the node. That is exact only when
// RoPE rotates the whole head, so a partial rotation is refused.
func (d *decoder) yarnAttrs(a ir.Attrs) (ir.Attrs, float64, error) {
	hp := d.hp
	sc := hp.RopeScaling
	if d.freqs != nil {
		return nil, 0, fmt.Errorf("%w: yarn rope scaling with rope_freqs.weight", ErrHParams)
	}
	orig, fast, slow, s := sc.OriginalContext, f64(sc.BetaFast), f64(sc.BetaSlow), f64(sc.Factor)
	if orig == 0 {
		orig = hp.ContextLength
	}
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	if s <= 0 || orig <= 0 || slow <= 0 || fast <= slow || sc.AttnFactor < 0 || sc.AttnFactorMul < 0 {
		return nil, 0, fmt.Errorf("%w: yarn rope scaling factor %g, original context %d, beta_fast %g, beta_slow %g, attention factor %g × %g",
			ErrHParams, s, orig, fast, slow, sc.AttnFactor, sc.AttnFactorMul)
	}
	m := f64(sc.AttnFactor)
	switch {
	case m > 0:
	case sc.Mscale != 0 && sc.MscaleAllDim != 0:
		m = ir.YarnMscale(s, f64(sc.Mscale)) / ir.YarnMscale(s, f64(sc.MscaleAllDim))
	default:
		m = ir.YarnMscale(s, 1)
	}
	if sc.AttnFactorMul != 0 {
		m *= f64(sc.AttnFactorMul)
	}
	if m != 1 && hp.RopeDim != hp.HeadDim {
		return nil, 0, fmt.Errorf("%w: yarn attention factor %g with RoPE on %d of %d head elements (the factor applies to rotated elements only)",
			ErrHParams, m, hp.RopeDim, hp.HeadDim)
	}
	a["scaling"], a["factor"], a["orig_ctx"], a["low_freq"], a["high_freq"] = "yarn", s, orig, slow, fast
	return a, m, nil
}

// layerOpts are the per-family variations of a decoder block.
type layerOpts struct {
	qkvBias bool // qwen2: biases on q, k and v
	qkNorm  bool // qwen3: per-head RMSNorm of q and k before RoPE
	// ffn, when set, is the feed-forward of layer l from its normalised
	// input h (moeFFN); nil is the dense SwiGLU of ffn_gate, ffn_up and
	// ffn_down.
	ffn func(d *decoder, h *ir.Node, l int) *ir.Node
}

// block appends decoder layer l to the residual stream x.
func (d *decoder) block(x *ir.Node, l int, o layerOpts) *ir.Node {
	k := d.dims()
	ra, mscale, err := d.ropeAttrs()
	if err != nil {
		d.err = err
		return x
	}
	h := d.norm(x, blk(l, "attn_norm.weight"))
	q := d.reshape(d.linear(h, blk(l, "attn_q"), k.E, k.H*k.D, o.qkvBias), k.H, k.D)
	kk := d.reshape(d.linear(h, blk(l, "attn_k"), k.E, k.Hkv*k.D, o.qkvBias), k.Hkv, k.D)
	v := d.reshape(d.linear(h, blk(l, "attn_v"), k.E, k.Hkv*k.D, o.qkvBias), k.Hkv, k.D)
	if o.qkNorm {
		q = d.norm(q, blk(l, "attn_q_norm.weight"))
		kk = d.norm(kk, blk(l, "attn_k_norm.weight"))
	}
	args := func(x *ir.Node) []*ir.Node {
		if d.freqs != nil {
			return []*ir.Node{x, d.pos, d.freqs}
		}
		return []*ir.Node{x, d.pos}
	}
	q = d.g.Add(ir.OpRope, ra, args(q)...)
	kk = d.g.Add(ir.OpRope, copyAttrs(ra), args(kk)...)
	cache := d.g.Add(ir.OpKVWrite, ir.Attrs{"layer": l}, kk, v)
	scale := 1 / math.Sqrt(float64(k.D))
	if mscale != 1 {
		scale *= mscale * mscale // YaRN's factor on q and k (see yarnAttrs)
	}
	att := d.g.Add(ir.OpAttention, ir.Attrs{"scale": scale, "causal": true}, q, cache)
	o2 := d.linear(d.reshape(att, k.H*k.D), blk(l, "attn_output"), k.H*k.D, k.E, false)
	x = d.g.Add(ir.OpAdd, nil, x, o2)
	h = d.norm(x, blk(l, "ffn_norm.weight"))
	if o.ffn != nil {
		return d.g.Add(ir.OpAdd, nil, x, o.ffn(d, h, l))
	}
	gate := d.linear(h, blk(l, "ffn_gate"), k.E, k.F, false)
	up := d.linear(h, blk(l, "ffn_up"), k.E, k.F, false)
	f := d.linear(d.g.Add(ir.OpSwiGLU, nil, gate, up), blk(l, "ffn_down"), k.F, k.E, false)
	return d.g.Add(ir.OpAdd, nil, x, f)
}

// finish appends the final norm, the output projection (token_embd when the
// model has no output.weight) and the output node; a stage that does not
// end the model (last < layers) ends with hidden_out instead.
func (d *decoder) finish(x *ir.Node, last int) (*ir.Graph, error) {
	k := d.dims()
	if last < k.L {
		d.g.Add(ir.OpHiddenOut, nil, x)
	} else {
		x = d.norm(d.g.Add(ir.OpLastTokens, nil, x), "output_norm.weight")
		out := d.embd
		if _, _, ok := d.w.Lookup("output.weight"); ok {
			out = d.weight("output.weight", k.E, k.V)
		} else if out == nil {
			out = d.weight("token_embd.weight", k.E, k.V) // tied, in a later stage
		}
		logits := d.g.Add(ir.OpMatmul, nil, x, out)
		if d.logitCap > 0 {
			logits = d.g.Add(ir.OpSoftcap, ir.Attrs{"cap": d.logitCap}, logits)
		}
		d.g.Add(ir.OpOutput, nil, logits)
	}
	if d.err != nil {
		return nil, d.err
	}
	if err := d.g.Err(); err != nil {
		return nil, err
	}
	return d.g, nil
}

// buildDecoder builds the standard decoder's layers [first, last) with
// per-layer options; [0, layers) is the whole model. A partial stage
// records its range in the consts stage_first and stage_last.
func buildDecoder(hp ir.HParams, w Weights, o layerOpts, first, last int) (*ir.Graph, error) {
	d, x, err := newDecoder(hp, w, first)
	if err != nil {
		return nil, err
	}
	if first > 0 || last < d.hp.Layers {
		d.g.Consts["stage_first"], d.g.Consts["stage_last"] = first, last
	}
	for l := first; l < last && d.err == nil; l++ { // stop at the first bad tensor: a lying layer count must not build millions of layers
		x = d.block(x, l, o)
	}
	return d.finish(x, last)
}

// f64 widens a float32 hyperparameter to the float64 of its shortest
// decimal form (1e-5, not 9.99999974e-06), as the text form prints it.
func f64(x float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	return v
}

func copyAttrs(a ir.Attrs) ir.Attrs {
	c := make(ir.Attrs, len(a))
	for k, v := range a {
		c[k] = v
	}
	return c
}
