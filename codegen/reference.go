package codegen

import (
	"fmt"
	"math"
	"slices"

	"github.com/memra-ai/memra/ir/dtype"
)

// The CPU references: plain Go, float32 storage with float64 sums, written
// for obviousness. Every kernel family is checked against its reference.

// DequantRows dequantises rows rows of k elements of type t.
func DequantRows(t dtype.Type, data []byte, rows, k int) ([]float32, error) {
	out := make([]float32, rows*k)
	if err := dtype.Dequantize(t, data, out); err != nil {
		return nil, fmt.Errorf("codegen: reference dequantise %v: %w", t, err)
	}
	return out, nil
}

// RefEmbedding gathers rows ids of a [*][dim] table of type t.
func RefEmbedding(t dtype.Type, dim int, table []byte, ids []int32) ([]float32, error) {
	rb, err := t.RowBytes(dim)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(ids)*dim)
	for i, id := range ids {
		if int(id) < 0 || (int(id)+1)*rb > len(table) {
			return nil, fmt.Errorf("codegen: reference embedding: id %d out of range", id)
		}
		if err := dtype.Dequantize(t, table[int(id)*rb:(int(id)+1)*rb], out[i*dim:(i+1)*dim]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RefRMSNormAdd returns the updated residual x (+delta when add) and the
// normalised y, for rows of dim.
func RefRMSNormAdd(dim int, eps float32, add bool, x, delta, w []float32) (xo, y []float32) {
	xo = append([]float32(nil), x...)
	y = make([]float32, len(x))
	for r := 0; r < len(x)/dim; r++ {
		row := xo[r*dim : (r+1)*dim]
		var ss float64
		for i := range row {
			if add {
				row[i] += delta[r*dim+i]
			}
			ss += float64(row[i]) * float64(row[i])
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i, v := range row {
			y[r*dim+i] = float32(float64(v) * inv * float64(w[i]))
		}
	}
	return xo, y
}

// roundCache rounds v to what a cache of type t stores.
func roundCache(t dtype.Type, v float32) float32 {
	switch t {
	case dtype.F16:
		return dtype.F16ToF32(dtype.F32ToF16(v))
	case dtype.BF16:
		return dtype.BF16ToF32(dtype.F32ToBF16(v))
	}
	return v
}

// RefRopeKV applies RoPE to q (in a copy of qkv) and writes rotated k and v
// into copies of the caches ([rows][HeadsKV][HeadDim], values rounded to the
// cache type: each block of 32 quantised for the 8-bit cache). The angle is float32(pos)·inv_freq in float32, as the kernel
// computes it.
func RefRopeKV(s RopeShape, qkv []float32, pos, slot []int32, invFreq, kc, vc []float32) (qo, ko, vo []float32) {
	qo = append([]float32(nil), qkv...)
	ko = append([]float32(nil), kc...)
	vo = append([]float32(nil), vc...)
	D, stride, kvw := s.HeadDim, s.QKVStride(), s.HeadsKV*s.HeadDim
	for t := range pos {
		row := qo[t*stride : (t+1)*stride]
		for h := 0; h < s.Heads+s.HeadsKV; h++ {
			hd := row[h*D : (h+1)*D]
			for i := 0; i < s.RopeDim/2; i++ {
				a, b := 2*i, 2*i+1
				if s.Half {
					a, b = i, i+s.RopeDim/2
				}
				ang := float64(float32(pos[t]) * invFreq[i])
				sn, cs := math.Sincos(ang)
				xa, xb := float64(hd[a]), float64(hd[b])
				hd[a], hd[b] = float32(xa*cs-xb*sn), float32(xa*sn+xb*cs)
			}
		}
		base := int(slot[t]) * kvw
		copy(ko[base:base+kvw], row[s.Heads*D:])
		copy(vo[base:base+kvw], row[(s.Heads+s.HeadsKV)*D:])
		roundCacheRow(s.Cache, ko[base:base+kvw])
		roundCacheRow(s.Cache, vo[base:base+kvw])
		// restore the k/v part of the row: the kernel rotates only q in place
		copy(row[s.Heads*D:], qkv[t*stride+s.Heads*D:(t+1)*stride])
	}
	return qo, ko, vo
}

// RefMatMul returns y [m][n] = x [m][k] · Wᵀ for W of n rows of type t,
// added to y0 when y0 is not nil. With bf16 the inputs are first rounded to
// bfloat16, as the tensor-core kernel does.
func RefMatMul(t dtype.Type, n, k int, W []byte, x []float32, m int, y0 []float32, bf16 bool) ([]float32, error) {
	wf, err := DequantRows(t, W, n, k)
	if err != nil {
		return nil, err
	}
	xr := x
	if bf16 {
		xr = make([]float32, len(x))
		for i, v := range x {
			xr[i] = dtype.BF16ToF32(dtype.F32ToBF16(v))
		}
		for i, v := range wf {
			wf[i] = dtype.BF16ToF32(dtype.F32ToBF16(v))
		}
	}
	y := make([]float32, m*n)
	for r := 0; r < m; r++ {
		xs := xr[r*k : (r+1)*k]
		for c := 0; c < n; c++ {
			var acc float64
			for i, wv := range wf[c*k : (c+1)*k] {
				acc += float64(wv) * float64(xs[i])
			}
			if y0 != nil {
				acc += float64(y0[r*n+c])
			}
			y[r*n+c] = float32(acc)
		}
	}
	return y, nil
}

// RefSwiGLU returns silu(gate)·up for rows laid out [gate | up] of 2·ffn.
func RefSwiGLU(ffn int, gu []float32) []float32 {
	rows := len(gu) / (2 * ffn)
	out := make([]float32, rows*ffn)
	for r := 0; r < rows; r++ {
		for i := 0; i < ffn; i++ {
			g, u := float64(gu[r*2*ffn+i]), float64(gu[r*2*ffn+ffn+i])
			out[r*ffn+i] = float32(g / (1 + math.Exp(-g)) * u)
		}
	}
	return out
}

// RefArgmax returns the index of the largest value of each row (the first
// on ties), or -1 for a row holding a NaN.
func RefArgmax(vocab int, logits []float32) []int32 {
	out := make([]int32, len(logits)/vocab)
	for r := range out {
		best := 0
		for i, v := range logits[r*vocab : (r+1)*vocab] {
			if v != v {
				best = -1 // a NaN logit: no argmax
				break
			}
			if v > logits[r*vocab+best] {
				best = i
			}
		}
		out[r] = int32(best)
	}
	return out
}

// RefAttention is softmax(q·kᵀ·scale)·v for each query (token t reads its
// q row at q[t·QStride + h·HeadDim]) over keys 0 .. n[t]-1 of its sequence
// (with a Window, the last Window of them), key j at cache row
// PageRow(pages, base[t], j, PageSize), cache values given as float32
// ([rows][HeadsKV][HeadDim]); with a Softcap the scaled scores are capped
// first. It returns out [t][Heads·HeadDim].
func RefAttention(s AttnShape, q []float32, base, n, pages []int32, kc, vc []float32) []float32 {
	D, G, kvw, P := s.HeadDim, s.Heads/s.HeadsKV, s.HeadsKV*s.HeadDim, s.page()
	scale := float64(s.scale())
	out := make([]float32, len(base)*s.Heads*D)
	for t := range base {
		lo := 0
		if s.Window > 0 {
			lo = max(0, int(n[t])-s.Window)
		}
		for h := 0; h < s.Heads; h++ {
			qh := q[t*s.QStride+h*D : t*s.QStride+(h+1)*D]
			off := h / G * D
			sc := make([]float64, int(n[t])-lo)
			mx := math.Inf(-1)
			for i := range sc {
				j := lo + i
				row := kc[PageRow(pages, int(base[t]), j, P)*kvw+off:]
				var a float64
				for d := 0; d < D; d++ {
					a += float64(qh[d]) * float64(row[d])
				}
				sc[i] = a * scale
				if c := float64(s.Softcap); c > 0 {
					sc[i] = c * math.Tanh(sc[i]/c)
				}
				mx = math.Max(mx, sc[i])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for d := 0; d < D; d++ {
				var o float64
				for i, p := range sc {
					o += p * float64(vc[PageRow(pages, int(base[t]), lo+i, P)*kvw+off+d])
				}
				out[t*s.Heads*D+h*D+d] = float32(o / sum)
			}
		}
	}
	return out
}

// RelErr returns ‖got−want‖/‖want‖ (‖got‖ when want is all zero).
func RelErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// RefHeadRMSNorm is HeadRMSNorm on the CPU: a copy of rows (of s.Stride
// floats) with each of s.Heads heads of s.HeadDim at s.Offset normalised
// as RefRMSNormAdd normalises a row with weight w, and the s.Heads2 heads
// after them with w2; the rest of each row as it was.
func RefHeadRMSNorm(s HeadNormShape, x, w, w2 []float32) []float32 {
	out := slices.Clone(x)
	for r := 0; r+s.Stride <= len(x); r += s.Stride {
		p := out[r+s.Offset : r+s.Offset+s.Heads*s.HeadDim]
		_, y := RefRMSNormAdd(s.HeadDim, s.Eps, false, p, nil, w)
		copy(p, y)
		if s.Heads2 > 0 {
			p = out[r+s.Offset+s.Heads*s.HeadDim : r+s.Offset+(s.Heads+s.Heads2)*s.HeadDim]
			_, y = RefRMSNormAdd(s.HeadDim, s.Eps, false, p, nil, w2)
			copy(p, y)
		}
	}
	return out
}
