package codegen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// warpSumDown is warp_sum's butterfly (lanes L and L+16, then +8, … +1)
// over 32 lane values: lane 0's result.
func warpSumDown(v [32]float32) float32 {
	for o := 16; o > 0; o /= 2 {
		var n [32]float32
		for l := range 32 {
			n[l] = v[l] + v[l^o]
		}
		v = n
	}
	return v[0]
}

// xq2Order mirrors an XQ 2 kernel's sum of one row's group terms: split
// over ks warps with unroll u (gemvXQGlobal: warp x starts at x·u·32 +
// lane and steps by ks·u·32 units, u units 32 apart each step), each
// warp's lanes added by warp_sum, lane 0 of warp 0 adding warps 1 … ks-1
// to its lane sum first (emitXQSplitSums).
func xq2Order(terms []float32, ks, u int) float32 {
	g := len(terms)
	lanes := make([][32]float32, ks)
	for x := range ks {
		for l := range 32 {
			for b := x*u*32 + l; b < g; b += ks * u * 32 {
				for i := range u {
					if b+32*i < g {
						lanes[x][l] += terms[b+32*i]
					}
				}
			}
		}
	}
	for x := 1; x < ks; x++ {
		lanes[0][0] += warpSumDown(lanes[x])
	}
	return warpSumDown(lanes[0])
}

// orderedOrder mirrors the ordered XQ 3 kernel's sum of one row's group
// terms for arm a (its K split kso, the order's split and unroll):
// emitMMA8SplitOrderLoop's (or the unsplit loop's) slots, the levels of
// emitMMA8OrderLevels, emitMMA8SplitOrderFinish and emitMMA8Finish's
// warps (emitOrderWarpLevels).
func orderedOrder(terms []float32, a GEMVArm) float32 {
	g, kso, sets, u := len(terms), a.kSplit(), a.orderSplit(), a.orderUnroll()
	r := a.mma8OrderSlots()
	oacc := make([][]float32, kso) // per warp, sets·R slots
	for ks := range kso {
		oacc[ks] = make([]float32, sets*r)
		for u0 := ks; u0 < g; u0 += 32 * u * sets {
			for set := range sets {
				for ur := range u {
					ub := u0 + (set*u+ur)*32
					for sl := range r {
						if v := ub + sl*kso; v < g {
							oacc[ks][set*r+sl] += terms[v]
						}
					}
				}
			}
		}
	}
	levels := func(ks, set int) {
		b := set * r
		for h := r / 2; h >= 1; h /= 2 {
			for s := range h {
				oacc[ks][b+s] += oacc[ks][b+s+h]
			}
		}
	}
	warps := func(set int) float32 {
		v := make([]float32, kso)
		for ks := range kso {
			v[ks] = oacc[ks][set*r]
		}
		for o := kso / 2; o > 0; o /= 2 {
			for s := range o {
				v[s] += v[s+o]
			}
		}
		return v[0]
	}
	for set := 1; set < sets; set++ {
		for ks := range kso {
			levels(ks, set)
		}
		oacc[0][set*r] = warps(set)
	}
	for set := 1; set < sets; set++ {
		oacc[0][0] += oacc[0][set*r]
	}
	for ks := range kso {
		levels(ks, 0)
	}
	return warps(0)
}

// TestOrderMirror: the ordered kernel's slots, levels and warps add a
// row's group terms to the float the XQ 2 kernels of its order compute,
// bit for bit (random terms over eight binary orders of magnitude, so
// that any other order of the sums would round differently), for the
// unsplit order and the split-over-two order with unroll 1 to 8, K
// splits of 8 to 32 warps and rows of 8 to 448 groups. A wrong order is
// found: the unsplit order's ordered arm does not give the split sums.
func TestOrderMirror(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	terms := func(g int) []float32 {
		v := make([]float32, g)
		for i := range v {
			v[i] = float32((rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(8))))
		}
		return v
	}
	for _, g := range []int{8, 37, 128, 344, 448} {
		for _, order := range []int{1, 21, 22, 24, 28} {
			for _, kso := range []int{8, 16, 32} {
				a := DefaultXQMMAArm.Split(kso)
				a.Ordered = order
				if a.orderSplit() > 1 && kso < 16 {
					continue
				}
				x := DefaultXQGlobalOneArm.Split(a.orderSplit())
				x.Unroll = a.orderUnroll()
				for trial := range 20 {
					v := terms(g)
					want := xq2Order(v, x.kSplit(), x.Unroll)
					require.Equal(t, math.Float32bits(want), math.Float32bits(orderedOrder(v, a)),
						"%d groups, %v against %v, trial %d", g, a, x, trial)
				}
			}
		}
	}
	// the test can fail: the unsplit order's arm against split XQ 2 sums
	a := DefaultXQMMAArm.Split(16)
	a.Ordered = 1
	differ := 0
	for range 20 {
		v := terms(344)
		if xq2Order(v, 2, 1) != orderedOrder(v, a) {
			differ++
		}
	}
	require.Positive(t, differ, fmt.Sprintf("%v gave the split order's sums", a))
}
