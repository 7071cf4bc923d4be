package codegen

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// mirrorMoERoute is MoERoute's kernel in Go, lane by lane: a lane holds
// logits lane, lane+32, …; USED rounds of a per-lane best then a butterfly
// (xor) reduction to the larger value and lower expert; the owner lane marks
// its pick taken. Then the counts, the first warp's scan of lane runs, and
// the placement (here in slot order; the kernel's atomics may place a run
// in any order).
func mirrorMoERoute(experts, used int, norm bool, logits []float32) (ids []int32, wts []float32, groups []int32) {
	m := len(logits) / experts
	nv := ceilDiv(experts, 32)
	ninf := float32(math.Inf(-1))
	ids, wts = make([]int32, m*used), make([]float32, m*used)
	for t := 0; t < m; t++ {
		row := logits[t*experts:]
		var v [32][]float32
		var taken [32]uint32
		for lane := range 32 {
			v[lane] = make([]float32, nv)
			for i := range nv {
				x := ninf
				if e := lane + 32*i; e < experts {
					x = row[e]
				}
				if x != x {
					x = ninf
				}
				v[lane][i] = x
			}
		}
		top, sel := make([]float32, used), make([]int32, used)
		for j := range used {
			var bv [32]float32
			var bi [32]int32
			for lane := range 32 {
				bv[lane], bi[lane] = ninf, math.MaxInt32
				for i := range nv {
					e := int32(lane + 32*i)
					if (taken[lane]>>i)&1 == 0 && int(e) < experts && (v[lane][i] > bv[lane] || (v[lane][i] == bv[lane] && e < bi[lane])) {
						bv[lane], bi[lane] = v[lane][i], e
					}
				}
			}
			for o := 16; o > 0; o >>= 1 {
				nbv, nbi := bv, bi
				for lane := range 32 {
					ov, oi := bv[lane^o], bi[lane^o]
					if ov > bv[lane] || (ov == bv[lane] && oi < bi[lane]) {
						nbv[lane], nbi[lane] = ov, oi
					}
				}
				bv, bi = nbv, nbi
			}
			for lane := range 32 {
				if int(bi[lane]&31) == lane {
					taken[lane] |= 1 << (bi[lane] >> 5)
				}
			}
			top[j], sel[j] = bv[0], bi[0]
		}
		mx := top[0]
		den := float32(0)
		if norm {
			for j := range used {
				den += float32(math.Exp(float64(top[j] - mx)))
			}
		} else {
			for lane := range 32 {
				for i := range nv {
					if lane+32*i < experts {
						den += float32(math.Exp(float64(v[lane][i] - mx)))
					}
				}
			}
		}
		for j := range used {
			ids[t*used+j] = sel[j]
			wts[t*used+j] = float32(math.Exp(float64(top[j]-mx))) / den
		}
	}
	cnt := make([]int32, experts)
	for _, e := range ids {
		cnt[e]++
	}
	groups = make([]int32, experts+1+len(ids))
	per := ceilDiv(experts, 32)
	var runs [32]int32
	for lane := range 32 {
		for i := range per {
			if e := lane*per + i; e < experts {
				runs[lane] += cnt[e]
			}
		}
	}
	inc := runs
	for o := 1; o < 32; o <<= 1 { // __shfl_up_sync
		next := inc
		for lane := o; lane < 32; lane++ {
			next[lane] += inc[lane-o]
		}
		inc = next
	}
	for lane := range 32 {
		at := inc[lane] - runs[lane]
		for i := range per {
			if e := lane*per + i; e < experts {
				c := cnt[e]
				groups[e], cnt[e] = at, at
				at += c
			}
		}
	}
	groups[experts] = inc[31]
	for s, e := range ids {
		groups[experts+1+int(cnt[e])] = int32(s)
		cnt[e]++
	}
	return ids, wts, groups
}

func TestMoERouteMirror(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	nan := float32(math.NaN())
	for _, c := range []struct {
		experts, used, m int
	}{{8, 2, 5}, {60, 4, 3}, {128, 8, 40}, {256, 8, 7}, {512, 16, 3}, {1, 1, 2}} {
		for _, norm := range []bool{true, false} {
			logits := randF32(r, c.m*c.experts)
			if c.experts > 4 {
				// ties among the chosen (in one lane's neighbours, and across lanes), a NaN, a −∞
				logits[2], logits[3], logits[1] = 10, 10, nan
				if c.experts > 40 {
					logits[8], logits[40] = 9, 9
				}
				logits[c.experts] = float32(math.Inf(-1))
			}
			ids, wts, groups := mirrorMoERoute(c.experts, c.used, norm, logits)
			rids, rwts := RefMoERoute(c.experts, c.used, norm, logits)
			require.Equal(t, rids, ids, "%+v", c)
			require.Less(t, RelErr(wts, rwts), 1e-6, "%+v", c)
			require.NoError(t, CheckMoEGroups(c.experts, ids, groups), "%+v", c)
		}
	}
}
