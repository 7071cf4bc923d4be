package codegen

import (
	"fmt"
	"math"
	"sort"
)

// RefMoERoute returns the experts each of the m tokens of logits
// [m][experts] chooses (used of them: the larger logit first, a NaN as
// −∞, equal logits by the lower expert) and their weights (a softmax over
// all the logits, renormalised over the chosen with norm), in float64.
func RefMoERoute(experts, used int, norm bool, logits []float32) (ids []int32, wts []float32) {
	m := len(logits) / experts
	ids, wts = make([]int32, m*used), make([]float32, m*used)
	key := func(v float32) float64 {
		if v != v {
			return math.Inf(-1)
		}
		return float64(v)
	}
	for t := 0; t < m; t++ {
		row := logits[t*experts : (t+1)*experts]
		idx := make([]int, experts)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return key(row[idx[a]]) > key(row[idx[b]]) })
		mx := key(row[idx[0]])
		all, chosen := 0.0, 0.0
		for _, v := range row {
			all += math.Exp(key(v) - mx)
		}
		for j := 0; j < used; j++ {
			chosen += math.Exp(key(row[idx[j]]) - mx)
		}
		den := all
		if norm {
			den = chosen
		}
		for j := 0; j < used; j++ {
			ids[t*used+j] = int32(idx[j])
			wts[t*used+j] = float32(math.Exp(key(row[idx[j]])-mx) / den)
		}
	}
	return ids, wts
}

// CheckMoEGroups reports whether groups (MoERoute's: experts+1 offsets,
// then the slots) groups the slots of ids by expert: every slot once, in
// its expert's run, in any order within the run.
func CheckMoEGroups(experts int, ids, groups []int32) error {
	if len(groups) < experts+1+len(ids) {
		return fmt.Errorf("groups hold %d ints, want %d", len(groups), experts+1+len(ids))
	}
	if groups[0] != 0 || int(groups[experts]) != len(ids) {
		return fmt.Errorf("offsets run from %d to %d, want 0 to %d", groups[0], groups[experts], len(ids))
	}
	seen := make([]bool, len(ids))
	for e := 0; e < experts; e++ {
		lo, hi := groups[e], groups[e+1]
		if lo > hi {
			return fmt.Errorf("expert %d's slots run from %d to %d", e, lo, hi)
		}
		for _, s := range groups[experts+1+int(lo) : experts+1+int(hi)] {
			if s < 0 || int(s) >= len(ids) || seen[s] || ids[s] != int32(e) {
				return fmt.Errorf("expert %d's run holds slot %d", e, s)
			}
			seen[s] = true
		}
	}
	return nil
}

// RefMoEGEMV returns the chosen experts' products of shape s for m tokens:
// y [m·Used][N] (see MoEGEMV), W and Wu Experts·N rows of K, in float64.
// Only the chosen experts' rows are dequantised, one expert at a time.
func RefMoEGEMV(s MoEShape, W, Wu []byte, x []float32, ids []int32) ([]float32, error) {
	rb, err := s.Type.RowBytes(s.K)
	if err != nil {
		return nil, err
	}
	ub := 0
	if s.SwiGLU {
		if ub, err = s.Up.RowBytes(s.K); err != nil {
			return nil, err
		}
	}
	slots := make([][]int, s.Experts)
	for sl, e := range ids {
		if e < 0 || int(e) >= s.Experts {
			return nil, fmt.Errorf("codegen: reference moe product: slot %d chose expert %d of %d", sl, e, s.Experts)
		}
		slots[e] = append(slots[e], sl)
	}
	y := make([]float32, len(ids)*s.N)
	for e, ss := range slots {
		if len(ss) == 0 {
			continue
		}
		wf, err := DequantRows(s.Type, W[e*s.N*rb:(e+1)*s.N*rb], s.N, s.K)
		if err != nil {
			return nil, err
		}
		var uf []float32
		if s.SwiGLU {
			if uf, err = DequantRows(s.Up, Wu[e*s.N*ub:(e+1)*s.N*ub], s.N, s.K); err != nil {
				return nil, err
			}
		}
		for _, sl := range ss {
			xr := sl / s.Used
			if s.PerSlot {
				xr = sl
			}
			xs := x[xr*s.K : (xr+1)*s.K]
			for r := 0; r < s.N; r++ {
				var g, u float64
				for i, v := range xs {
					g += float64(wf[r*s.K+i]) * float64(v)
					if s.SwiGLU {
						u += float64(uf[r*s.K+i]) * float64(v)
					}
				}
				if s.SwiGLU {
					g = g / (1 + math.Exp(-g)) * u
				}
				y[sl*s.N+r] = float32(g)
			}
		}
	}
	return y, nil
}

// RefMoESum returns y0 (zeros when nil) plus Σ_j wts[t][j]·d[t·used+j] for
// each token t, in float64.
func RefMoESum(n, used int, d, wts, y0 []float32) []float32 {
	m := len(wts) / used
	y := make([]float32, m*n)
	for t := 0; t < m; t++ {
		for i := 0; i < n; i++ {
			var acc float64
			if y0 != nil {
				acc = float64(y0[t*n+i])
			}
			for j := 0; j < used; j++ {
				acc += float64(wts[t*used+j]) * float64(d[(t*used+j)*n+i])
			}
			y[t*n+i] = float32(acc)
		}
	}
	return y
}
