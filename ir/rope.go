package ir

import "math"

// RopeParams are the attributes of a rope node, for backends that compute
// or bake its frequencies.
type RopeParams struct {
	Style   RopeStyle
	Dims    int     // rotated elements per head
	Base    float64 // frequency base
	Scaling string  // "none", "linear", "llama3", "yarn"
	Factor  float64 // linear: positions ÷ Factor; llama3, yarn: low frequencies ÷ Factor
	OrigCtx int     // llama3, yarn: original context length
	// LowFreq and HighFreq bound the ramp between divided and kept
	// frequencies by rotations over OrigCtx: llama3's low_freq_factor and
	// high_freq_factor, YaRN's beta_slow and beta_fast.
	LowFreq  float64
	HighFreq float64
}

// RopeOf reads the rope attributes of n, an OpRope node.
func RopeOf(n *Node) RopeParams {
	st := RopeInterleaved
	if n.Str("style") == RopeHalf.String() {
		st = RopeHalf
	}
	return RopeParams{
		Style: st, Dims: n.Int("dims"), Base: n.Float("base"), Scaling: n.Str("scaling"),
		Factor: n.Float("factor"), OrigCtx: n.Int("orig_ctx"), LowFreq: n.Float("low_freq"), HighFreq: n.Float("high_freq"),
	}
}

// Thetas returns θ_i for i < Dims/2, the angle per position of pair i:
// base^(-2i/Dims), divided by factors[i] when factors (rope_freqs) is given,
// or rescaled by the llama3 rule: with wavelength λ = 2π/θ, λ < OrigCtx/HighFreq
// keeps θ, λ > OrigCtx/LowFreq gives θ/Factor, and between them
// θ' = (1−s)·θ/Factor + s·θ with s = (OrigCtx/λ − LowFreq)/(HighFreq − LowFreq);
// or by the YaRN rule (see YarnRange): θ' = r·θ/Factor + (1−r)·θ with the
// ramp r = clamp((i − low)/(high − low), 0, 1).
// Linear scaling is applied to positions (see PositionScale), not here.
func (p RopeParams) Thetas(factors []float32) []float64 {
	th := make([]float64, p.Dims/2)
	var low, high float64
	if p.Scaling == "yarn" {
		low, high = p.YarnRange()
	}
	for i := range th {
		t := math.Pow(p.Base, -2*float64(i)/float64(p.Dims))
		switch {
		case factors != nil:
			t /= float64(factors[i])
		case p.Scaling == "llama3":
			orig := float64(p.OrigCtx)
			lambda := 2 * math.Pi / t
			switch {
			case lambda < orig/p.HighFreq:
			case lambda > orig/p.LowFreq:
				t /= p.Factor
			default:
				s := (orig/lambda - p.LowFreq) / (p.HighFreq - p.LowFreq)
				t = (1-s)*t/p.Factor + s*t
			}
		case p.Scaling == "yarn":
			r := min(max((float64(i)-low)/(high-low), 0), 1)
			t = r*t/p.Factor + (1-r)*t
		}
		th[i] = t
	}
	return th
}

// YarnRange returns the pairs [low, high] over which YaRN's ramp goes from
// keeping θ_i (i ≤ low) to dividing it by Factor (i ≥ high). Pair i turns
// 2π·n times over OrigCtx positions at
// i = dim(n) = Dims·ln(OrigCtx/(2π·n)) / (2·ln Base), so
// low = max(⌊dim(HighFreq)⌋, 0) and high = min(⌈dim(LowFreq)⌉, Dims−1), with
// HighFreq = beta_fast and LowFreq = beta_slow; high is nudged by 0.001
// when it equals low. These are the formulas of the YaRN paper (Peng et
// al., 2023, arXiv:2309.00071) as Hugging Face transformers computes them
// (modeling_rope_utils.py, _compute_yarn_parameters, with truncate on),
// which llama.cpp's ggml_rope_yarn_corr_dims matches.
func (p RopeParams) YarnRange() (low, high float64) {
	dim := func(rot float64) float64 {
		return float64(p.Dims) * math.Log(float64(p.OrigCtx)/(rot*2*math.Pi)) / (2 * math.Log(p.Base))
	}
	low = max(math.Floor(dim(p.HighFreq)), 0)
	high = min(math.Ceil(dim(p.LowFreq)), float64(p.Dims-1))
	if high == low {
		high += 0.001
	}
	return low, high
}

// PositionScale is the factor positions are multiplied by: 1/Factor for
// linear scaling, else 1.
func (p RopeParams) PositionScale() float64 {
	if p.Scaling == "linear" {
		return 1 / p.Factor
	}
	return 1
}

// YarnMscale is YaRN's attention factor for scale factor s and multiplier
// m: 0.1·m·ln(s) + 1, or 1 when s ≤ 1. YaRN multiplies cos and sin by it
// (by m(s, mscale)/m(s, mscale_all_dim) when a config gives both).
func YarnMscale(s, m float64) float64 {
	if s <= 1 {
		return 1
	}
	return 0.1*m*math.Log(s) + 1
}
