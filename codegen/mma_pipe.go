package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// mmaPipeLDS is the shared row stride of the pipelined product in bf16:
// 64 + 8, so that the eight rows g of a fragment load fall in distinct
// banks (36 words a row, 4 apart modulo 32) and rows stay 16-byte aligned.
const mmaPipeLDS = 72

// mmaPipeShared is the dynamic shared memory of a Pipe 1 arm: two
// buffers of BM activation rows and BN weight rows.
func mmaPipeShared(a MMAArm) int { return 2 * (a.BM + a.BN) * mmaPipeLDS * 2 }

// matMulMMAPipe is MatMulMMA for Pipe 1: the same product (bf16 operands
// rounded as Pipe 0 rounds them, f32 accumulation, m16n8k16 fragments
// read the same way) over K tiles of 64, with two shared buffers. Before
// the warps multiply tile t they write tile t+1 into the other buffer
// (activations as float4 loads rounded in pairs, weights dequantised a
// 32-element unit a thread), so one barrier a tile separates the writes
// of a buffer from the products that read it, and each warp's loads for
// the next tile are in flight while the block's other warps multiply.
// name and rowBytes are MatMulMMA's.
func matMulMMAPipe(t dtype.Type, n, k int, residual bool, arm MMAArm, name string, rowBytes int) (*Kernel, error) {
	threads := 32 * arm.WarpsM * arm.WarpsN
	params := productParams(false)
	shared := mmaPipeShared(arm)
	ragged := n%arm.BN != 0
	src := source(fmt.Sprintf("tensor-core matmul (mma.sync bf16, two shared buffers): %v weights, N %d, K %d, residual %v, %v", t, n, k, residual, arm),
		[]string{dqHelper(t), "bf16", "pdl"}, func(w *Writer) {
			emitMMADefines(w, n, k, rowBytes, mmaPipeLDS-8, arm)
			w.Comment("Two f32 values rounded to bf16, packed low first.")
			w.Emit(Func{Name: "bf16x2", Return: "u32", Params: []Param{{"float", "lo"}, {"float", "hi"}}, Body: func(w *Writer) {
				w.Line("return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16);")
			}})
			w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
				w.Line("extern __shared__ __align__(16) u16 smem[]; // As[2][BM * LDS], then Bs[2][BN * LDS]")
				w.Line("const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;")
				w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
				emitMMAWarpStart(w, arm)
				w.Line("pdl_wait();")
				w.Comment("tile: activations (float4 → two bf16 pairs; zero rows past m) and weights (a")
				w.Comment("32-element unit a thread) of K columns k0 .. k0 + 63 into buffer buf")
				w.Line("#define TILE(buf, k0) do { \\")
				w.Line("    u16* as_ = smem + (buf) * BM * LDS; \\")
				w.Line("    u16* bs_ = smem + 2 * BM * LDS + (buf) * BN * LDS; \\")
				w.Line("    for (int c = threadIdx.x; c < BM * BK / 4; c += NT) { \\")
				w.Line("        const int r = c / (BK / 4), c4 = c % (BK / 4); \\")
				w.Line("        float4 v = make_float4(0.f, 0.f, 0.f, 0.f); \\")
				w.Line("        if (m0 + r < m) v = *(const float4*)(x + (size_t)(m0 + r) * K + (k0) + 4 * c4); \\")
				w.Line("        *(uint2*)(as_ + r * LDS + 4 * c4) = make_uint2(bf16x2(v.x, v.y), bf16x2(v.z, v.w)); \\")
				w.Line("    } \\")
				w.Line("    for (int c = threadIdx.x; c < BN * (BK / 32); c += NT) { \\")
				w.Line("        const int r = c / (BK / 32), u = c % (BK / 32); \\")
				w.Line("        float v[32]; \\")
				if ragged {
					w.Linef("        if (n0 + r < N) %s(W + (size_t)(n0 + r) * ROW_BYTES, (k0) / 32 + u, v); \\", dqFunc(t))
					w.Line("        else for (int i = 0; i < 32; ++i) v[i] = 0.f; \\")
				} else {
					w.Linef("        %s(W + (size_t)(n0 + r) * ROW_BYTES, (k0) / 32 + u, v); \\", dqFunc(t))
				}
				w.Line("        uint4* d = (uint4*)(bs_ + r * LDS + 32 * u); \\")
				w.Line("        for (int i = 0; i < 4; ++i) \\")
				w.Line("            d[i] = make_uint4(bf16x2(v[8 * i], v[8 * i + 1]), bf16x2(v[8 * i + 2], v[8 * i + 3]), \\")
				w.Line("                              bf16x2(v[8 * i + 4], v[8 * i + 5]), bf16x2(v[8 * i + 6], v[8 * i + 7])); \\")
				w.Line("    } \\")
				w.Line("} while (0)")
				w.Line("TILE(0, 0);")
				w.Line("__syncthreads();")
				w.Block("for (int t = 0; t < K / BK; ++t)", func() {
					w.Line("const int cur = t & 1;")
					w.Comment("the next tile into the other buffer, which no warp reads in this step")
					w.If("t + 1 < K / BK", func() { w.Line("TILE(cur ^ 1, (t + 1) * BK);") })
					w.Line("const u16* As = smem + cur * BM * LDS;")
					w.Line("const u16* Bs = smem + 2 * BM * LDS + cur * BN * LDS;")
					emitMMATile(w, "As", "Bs")
					w.Line("__syncthreads(); // tile t + 1 written, tile t read by every warp")
				})
				w.Line("#undef TILE")
				emitMMAStore(w, ragged, residual)
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "mma", Name: name, Source: src, Params: params, Product: &ProductShape{Type: t, N: n, K: k, Residual: residual}, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.BN), ceilDiv(d.Tokens, arm.BM), 1), Block: dim3(threads, 1, 1), Shared: uint32(shared)}
	}}, nil
}
