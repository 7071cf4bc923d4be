package ir

import "math"

// RopeParams are the attributes of a rope node, for backends that compute
// or bake its frequencies.
type RopeParams struct {
	Style    RopeStyle
	Dims     int     // rotated elements per head
	Base     float64 // frequency base
	Scaling  string  // "none", "linear", "llama3"
	Factor   float64 // linear: positions ÷ Factor; llama3: low frequencies ÷ Factor
	OrigCtx  int     // llama3: original context length
	LowFreq  float64 // llama3 low_freq_factor
	HighFreq float64 // llama3 high_freq_factor
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
// θ' = (1−s)·θ/Factor + s·θ with s = (OrigCtx/λ − LowFreq)/(HighFreq − LowFreq).
// Linear scaling is applied to positions (see PositionScale), not here.
func (p RopeParams) Thetas(factors []float32) []float64 {
	th := make([]float64, p.Dims/2)
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
		}
		th[i] = t
	}
	return th
}

// PositionScale is the factor positions are multiplied by: 1/Factor for
// linear scaling, else 1.
func (p RopeParams) PositionScale() float64 {
	if p.Scaling == "linear" {
		return 1 / p.Factor
	}
	return 1
}
