package arch

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir"
)

// gemma2 and gemma3 (text): the decoder with
//   - the embeddings multiplied by √dim (the float32 of the root);
//   - a GELU-tanh gated feed-forward (geglu);
//   - post-norms: the attention output and the feed-forward output are
//     RMS-normalised (blk.N.post_attention_norm, blk.N.post_ffw_norm) before
//     their residual adds; blk.N.ffn_norm is the pre-feed-forward norm;
//   - RMSNorm weights that Hugging Face stores as w and applies as (1 + w):
//     GGUF converters store 1 + w, and runtime/load adds the 1 to a
//     checkpoint's norms as it opens it (in float32, as transformers forms
//     it), so the graph's rms_norm is the plain one;
//   - the attention score scale hp.AttnScale (query_pre_attn_scalar^-½);
//   - sliding-window layers alternating with global ones (hp.Sliding);
//   - gemma2: soft-capped attention scores and logits (hp.AttnSoftcap,
//     hp.FinalSoftcap);
//   - gemma3: per-head q/k RMSNorm before RoPE (blk.N.attn_{q,k}_norm), and
//     the sliding layers' own RoPE base hp.RopeBaseLocal without scaling;
//   - tied embeddings (token_embd serves as the output projection).
//
// Rotate-half RoPE (hp.RopeStyle from the loader) throughout.
func init() {
	Register("gemma2", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildGemma(hp, w, false, first, last)
	})
	Register("gemma3", func(hp ir.HParams, w Weights, first, last int) (*ir.Graph, error) {
		return buildGemma(hp, w, true, first, last)
	})
}

// gemmaEps is Gemma's RMSNorm epsilon, where the model names none.
const gemmaEps = 1e-6

func buildGemma(hp ir.HParams, w Weights, qkNorm bool, first, last int) (*ir.Graph, error) {
	if hp.RMSEps == 0 {
		hp.RMSEps = gemmaEps
	}
	if err := checkGemma(hp); err != nil {
		return nil, err
	}
	d, x, err := newDecoder(hp, w, first)
	if err != nil {
		return nil, err
	}
	if first == 0 {
		root := float32(math.Sqrt(float64(d.hp.Embedding)))
		x = d.g.Add(ir.OpScale, ir.Attrs{"factor": f64(root)}, x)
	}
	if first > 0 || last < d.hp.Layers {
		d.g.Consts["stage_first"], d.g.Consts["stage_last"] = first, last
	}
	for l := first; l < last && d.err == nil; l++ {
		x = d.gemmaBlock(x, l, qkNorm)
	}
	d.logitCap = f64(hp.FinalSoftcap)
	return d.finish(x, last)
}

// checkGemma rejects Gemma hyperparameters no graph can honour.
func checkGemma(hp ir.HParams) error {
	for name, v := range map[string]float32{"attention scale": hp.AttnScale, "attention soft-cap": hp.AttnSoftcap,
		"final soft-cap": hp.FinalSoftcap, "local RoPE base": hp.RopeBaseLocal} {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: %s %g must be a finite number ≥ 0", ErrHParams, name, v)
		}
	}
	if hp.SlidingWindow < 0 || hp.SlidingPattern < 0 {
		return fmt.Errorf("%w: sliding window %d, pattern %d", ErrHParams, hp.SlidingWindow, hp.SlidingPattern)
	}
	return nil
}

// gemmaBlock appends Gemma decoder layer l to the residual stream x.
func (d *decoder) gemmaBlock(x *ir.Node, l int, qkNorm bool) *ir.Node {
	k := d.dims()
	hp := d.hp
	ra, mscale, err := d.ropeAttrs()
	if err != nil {
		d.err = err
		return x
	}
	sliding := hp.Sliding(l)
	if sliding && hp.RopeBaseLocal > 0 {
		// the local rotation: its own base, no scaling (YaRN's factor included)
		ra["base"], ra["scaling"], ra["factor"], ra["orig_ctx"], ra["low_freq"], ra["high_freq"] = f64(hp.RopeBaseLocal), "none", 1.0, 0, 0.0, 0.0
		mscale = 1
	}
	h := d.norm(x, blk(l, "attn_norm.weight"))
	q := d.reshape(d.linear(h, blk(l, "attn_q"), k.E, k.H*k.D, false), k.H, k.D)
	kk := d.reshape(d.linear(h, blk(l, "attn_k"), k.E, k.Hkv*k.D, false), k.Hkv, k.D)
	v := d.reshape(d.linear(h, blk(l, "attn_v"), k.E, k.Hkv*k.D, false), k.Hkv, k.D)
	if qkNorm {
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
	if hp.AttnScale > 0 {
		scale = f64(hp.AttnScale)
	}
	scale *= mscale * mscale // YaRN's factor on q and k (see yarnAttrs); 1 otherwise
	at := ir.Attrs{"scale": scale, "causal": true}
	if hp.AttnSoftcap > 0 {
		at["softcap"] = f64(hp.AttnSoftcap)
	}
	if sliding {
		at["window"] = hp.SlidingWindow
	}
	att := d.g.Add(ir.OpAttention, at, q, cache)
	o := d.linear(d.reshape(att, k.H*k.D), blk(l, "attn_output"), k.H*k.D, k.E, false)
	x = d.g.Add(ir.OpAdd, nil, x, d.norm(o, blk(l, "post_attention_norm.weight")))
	h = d.norm(x, blk(l, "ffn_norm.weight"))
	gate := d.linear(h, blk(l, "ffn_gate"), k.E, k.F, false)
	up := d.linear(h, blk(l, "ffn_up"), k.E, k.F, false)
	f := d.linear(d.g.Add(ir.OpGeGLU, nil, gate, up), blk(l, "ffn_down"), k.F, k.E, false)
	return d.g.Add(ir.OpAdd, nil, x, d.norm(f, blk(l, "post_ffw_norm.weight")))
}
