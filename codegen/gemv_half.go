package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// gemvHalf is the layout-0 GEMV of F16 and BF16 weights with activations in
// shared memory: a row's threads read consecutive 16-byte chunks (8
// elements), so each warp load instruction covers 512 contiguous bytes,
// and each thread keeps arm.Unroll chunks in flight, the first ones issued
// before the PDL wait (weights do not depend on the previous kernel).
// pro (GEMVNorm, GEMVSwiGLU) is computed on the staged row on the way in.
func gemvHalf(t dtype.Type, n, k int, residual bool, arm GEMVArm, pro Prologue, ystride int) (*Kernel, error) {
	if k%8 != 0 {
		return nil, fmt.Errorf("%w: %v gemv with K %d (a multiple of 8)", ErrUnsupported, t, k)
	}
	conv := "f16_to_f32"
	if t == dtype.BF16 {
		conv = "bf16_to_f32"
	}
	tpr := arm.Threads / arm.RowsPerBlock
	epi := ""
	if residual {
		epi = "_res"
	}
	epi += pro.suffix() + ysName(ystride)
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(pro.Kind == ProNorm)
	src := source(fmt.Sprintf("gemv: %v weights, coalesced 16-byte chunks, N %d, K %d, residual %v, prologue %q, %v", t, n, k, residual, pro.suffix(), arm),
		proDeps(pro, dqDeps(t)[0], "warp", "pdl"), func(w *Writer) {
			w.Comment("Chunk q (8 elements) against activations a (elements 0-3) and b (4-7).")
			w.Emit(Func{Name: "half_dot8", Return: "float", Params: []Param{{"uint4", "q"}, {"float4", "a"}, {"float4", "b"}}, Body: func(w *Writer) {
				w.Linef("float s = %s((u16)(q.x & 0xffffu)) * a.x + %s((u16)(q.x >> 16)) * a.y;", conv, conv)
				w.Linef("s += %s((u16)(q.y & 0xffffu)) * a.z + %s((u16)(q.y >> 16)) * a.w;", conv, conv)
				w.Linef("s += %s((u16)(q.z & 0xffffu)) * b.x + %s((u16)(q.z >> 16)) * b.y;", conv, conv)
				w.Linef("s += %s((u16)(q.w & 0xffffu)) * b.z + %s((u16)(q.w >> 16)) * b.w;", conv, conv)
				w.Line("return s;")
			}})
			w.Linef("#define N %d", n)
			w.Linef("#define K %d", k)
			w.Linef("#define CPR %d // 16-byte chunks per row", k/8)
			w.Linef("#define TPR %d // threads per row", tpr)
			w.Linef("#define RPB %d // rows per block", arm.RowsPerBlock)
			w.Raw(ysDefine(ystride))
			w.Linef("#define U %d // chunks in flight per thread", arm.Unroll)
			w.Blank()
			w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
				w.Line("const int r = blockIdx.x * RPB + threadIdx.x / TPR;")
				w.Line("const int lane = threadIdx.x % TPR;")
				if n%arm.RowsPerBlock != 0 {
					w.Comment("rows past N (last block only) read row N-1 and store nothing")
					w.Line("const int rr = r < N ? r : N - 1;")
				} else {
					w.Line("const int rr = r;")
				}
				w.Line("const uint4* wr = (const uint4*)W + (size_t)rr * CPR;")
				w.Line("uint4 q[U];")
				load := func() {
					w.For("i", "0", "U", "1", -1, func() {
						w.Line("const int cc = c + i * TPR;")
						w.If("cc < CPR", func() { w.Line("q[i] = wr[cc];") })
					})
				}
				w.Line("int c = lane;")
				w.Comment("the first weight loads do not wait for the previous kernel")
				load()
				w.Line("pdl_wait();")
				w.Line("extern __shared__ float4 xs4[];")
				switch pro.Kind {
				case ProNorm:
					w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * K);")
					emitRowNorm(w, arm.Threads, pro.Eps)
					w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(arm.Threads), 0, func() {
						w.Line("xs4[i] = norm4(xg[i], inv, ((const float4*)nw)[i]);")
					})
				case ProSwiGLU:
					w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * 2 * K); // [gate | up]")
					w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(arm.Threads), 0, func() {
						w.Line("xs4[i] = swiglu4(xg[i], xg[K / 4 + i]);")
					})
				default:
					w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * K);")
					w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(arm.Threads), 0, func() { w.Line("xs4[i] = xg[i];") })
				}
				w.Line("__syncthreads();")
				w.Line("float acc = 0.f;")
				w.Block("for (;;)", func() {
					w.For("i", "0", "U", "1", -1, func() {
						w.Line("const int cc = c + i * TPR;")
						w.If("cc < CPR", func() { w.Line("acc += half_dot8(q[i], xs4[2 * cc], xs4[2 * cc + 1]);") })
					})
					w.Line("c += U * TPR;")
					w.If("c >= CPR", func() { w.Line("break;") })
					load()
				})
				gemvRowStore(w, arm, tpr, n, residual, "YS")
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(4 * k)}
	}}, nil
}

// emitRowNorm writes inv = 1 / rms of the block's activation row xg (K/4
// float4s): each thread sums the squares of a strided share, then the
// block reduces them (blockReduce, as the RMSNorm kernel does).
func emitRowNorm(w *Writer, threads int, eps float32) {
	w.Line("__shared__ float red[32];")
	w.Line("float ss = 0.f;")
	w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(threads), 0, func() {
		w.Line("const float4 v = xg[i];")
		w.Line("ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);")
	})
	blockReduce(w, "ss", "total", "sum", threads)
	w.Linef("const float inv = rsqrtf(total / (float)K + %s);", cfloat(eps))
}

// proDeps are a GEMV's helper dependencies deps plus its prologue's.
func proDeps(pro Prologue, deps ...string) []string {
	switch pro.Kind {
	case ProSwiGLU:
		deps = append(deps, "swiglu4")
	case ProNorm:
		deps = append(deps, "norm4")
	}
	return deps
}
