package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// GemmSmallArm is the tuning of the small-batch tensor-core product.
//
// A block owns RowsPerBlock weight rows and all the tokens of its token
// group (up to 64). Its Warps warps form KSplit groups; each group walks
// every KSplit-th 64-element slice of K, and within a group the rows are
// split over Warps/KSplit warps, each owning RowsPerBlock/(16·Warps/KSplit)
// tiles of 16 rows. The groups' partial sums meet in shared memory.
type GemmSmallArm struct {
	RowsPerBlock int // weight rows per block, a multiple of 16·(Warps/KSplit)
	KSplit       int // warp groups splitting K inside the block
	Warps        int // warps per block
}

// DefaultGemmSmallArm is the arm used before tuning: 32 rows per block,
// 8 warps in 4 K groups of 2 row warps (one 16-row tile each).
var DefaultGemmSmallArm = GemmSmallArm{RowsPerBlock: 32, KSplit: 4, Warps: 8}

// GemmSmallKnobs is the search space of GemmSmallArm.
var GemmSmallKnobs = []Knob{
	{"rows_per_block", []int{16, 32, 64, 128}},
	{"k_split", []int{1, 2, 4}},
	{"warps", []int{1, 2, 4, 8, 16}},
}

// gemmSmallTokens is the number of tokens one block covers (8 n8 tiles);
// larger batches take more blocks along grid y.
const gemmSmallTokens = 64

// gemmSmallLDS is the shared row stride in bf16 of a warp's staged
// weights: 64 elements + 8 of padding, so fragment loads hit distinct banks.
const gemmSmallLDS = 72

func (a GemmSmallArm) rowWarps() int { return a.Warps / a.KSplit }
func (a GemmSmallArm) rowTiles() int { return a.RowsPerBlock / (16 * a.rowWarps()) }

// shared returns the static shared memory of the arm: the warps' staged
// weight slices, reused for the K-group reduction.
func (a GemmSmallArm) shared() int {
	stage := a.Warps * a.rowTiles() * 16 * gemmSmallLDS * 2
	red := 0
	if a.KSplit > 1 {
		red = a.rowWarps() * a.rowTiles() * (gemmSmallTokens / 8) * 4 * 32 * 4
	}
	return max(stage, red)
}

// Validate reports whether a is well formed.
func (a GemmSmallArm) Validate() error {
	if a.Warps < 1 || a.Warps > 16 || a.KSplit < 1 || a.Warps%a.KSplit != 0 || a.RowsPerBlock <= 0 ||
		a.RowsPerBlock%(16*a.rowWarps()) != 0 || a.rowTiles() > 2 || a.shared() > 48*1024 {
		return fmt.Errorf("%w: gemm_small arm %+v", ErrUnsupported, a)
	}
	return nil
}

// GemmSmallArms lists every valid GemmSmallArm of the search space.
func GemmSmallArms() []GemmSmallArm {
	return enumerate(GemmSmallKnobs, func(v map[string]int) GemmSmallArm {
		return GemmSmallArm{RowsPerBlock: v["rows_per_block"], KSplit: v["k_split"], Warps: v["warps"]}
	}, GemmSmallArm.Validate)
}

// String is the arm's short name used in kernel names and tables.
func (a GemmSmallArm) String() string {
	return fmt.Sprintf("r%d_k%d_w%d", a.RowsPerBlock, a.KSplit, a.Warps)
}

// Point returns a as a Point.
func (a GemmSmallArm) Point() Point {
	return Point{"rows_per_block": a.RowsPerBlock, "k_split": a.KSplit, "warps": a.Warps}
}

// GemmSmallArmOf returns the GemmSmallArm p describes (missing knobs are zero).
func GemmSmallArmOf(p Point) GemmSmallArm {
	return GemmSmallArm{RowsPerBlock: p["rows_per_block"], KSplit: p["k_split"], Warps: p["warps"]}
}

// GemmSmall returns the small-batch product y = x·Wᵀ for decode batches of
// a few tokens (2–64 per block; more take more blocks), on tensor cores with
// the operands swapped: mma.sync m16n8k16 takes 16 weight rows as its A
// operand and 8 tokens as its B operand, so one pass over the weights
// serves the whole batch. W (n rows of k elements of type t, GGUF layout)
// is dequantised by each warp into its shared slice as bf16; the
// activations x [m][k] f32 are rounded to bf16 as the fragments are loaded
// (RefMatMul with bf16 reproduces the rounding); accumulation is f32.
// Tokens past m are masked to zero inside the kernel, so no padded buffers
// are needed:
//
//	gemm_small(const u8* W, const float* x, float* y, int m)
//
// With residual the product is added to y. grid (⌈n/RowsPerBlock⌉, ⌈m/64⌉).
func GemmSmall(t dtype.Type, n, k int, residual bool, arm GemmSmallArm) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: gemm_small with %d rows", ErrUnsupported, n)
	}
	rowBytes, _ := t.RowBytes(k)
	threads := 32 * arm.Warps
	epi := ""
	if residual {
		epi = "_res"
	}
	name := fmt.Sprintf("gemm_small_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(false)
	src := source(fmt.Sprintf("small-batch tensor-core product (mma.sync bf16, weights as A): %v weights, N %d, K %d, residual %v, %v", t, n, k, residual, arm),
		[]string{dqHelper(t), "bf16", "pdl"}, func(w *Writer) {
			w.Linef("#define N %d", n)
			w.Linef("#define K %d", k)
			w.Linef("#define ROW_BYTES %d", rowBytes)
			w.Linef("#define RPB %d // weight rows per block", arm.RowsPerBlock)
			w.Linef("#define KS %d // K groups", arm.KSplit)
			w.Linef("#define RW %d // row warps per K group", arm.rowWarps())
			w.Linef("#define RT %d // 16-row tiles per warp", arm.rowTiles())
			w.Linef("#define MAXT %d // n8 token tiles per block", gemmSmallTokens/8)
			w.Linef("#define LDS %d // shared row stride in bf16 (64 + 8)", gemmSmallLDS)
			w.Line("#define UNITS (K / 32)")
			w.Line("#define SLICES ((UNITS + 1) / 2) // 64-element K slices")
			w.Blank()
			w.Emit(Func{Name: "mma_bf16", Params: []Param{{"float*", "c"}, {"const u32*", "a"}, {"const u32*", "b"}}, Body: func(w *Writer) {
				w.Line(`asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "`)
				w.Line(`    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"`)
				w.Line(`    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])`)
				w.Line(`    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));`)
			}})
			w.Emit(Func{Name: "pack_bf16", Return: "u32", Params: []Param{{"float", "lo"}, {"float", "hi"}}, Body: func(w *Writer) {
				w.Line("return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16);")
			}})
			w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
				w.Linef("__shared__ __align__(16) u8 smem[%d];", arm.shared())
				w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
				w.Line("const int kg = warp / RW, rw = warp % RW; // K group, row warp")
				w.Line("const int g = lane >> 2, tg = lane & 3;")
				w.Line("const int rbase = blockIdx.x * RPB + rw * RT * 16;")
				w.Line("const int t0 = blockIdx.y * (MAXT * 8);")
				w.Comment("token tiles of this block: tokens past m are masked, not padded in memory")
				w.Line("const int ntile = min(MAXT, (m - t0 + 7) >> 3);")
				w.Line("u16* as = (u16*)smem + warp * (RT * 16 * LDS);")
				w.Line("float acc[RT][MAXT][4];")
				w.For("i", "0", "RT", "1", -1, func() {
					w.For("j", "0", "MAXT", "1", -1, func() {
						w.For("e", "0", "4", "1", -1, func() { w.Line("acc[i][j][e] = 0.f;") })
					})
				})
				w.Line("pdl_wait();")
				w.For("c", "kg", "SLICES", "KS", 0, func() {
					w.Comment("dequantise the warp's rows × 64 elements: lane → row lane & 15, unit 2c + (lane >> 4)")
					w.Line("const int u = 2 * c + (lane >> 4);")
					w.For("rt", "0", "RT", "1", -1, func() {
						w.Line("const int r = rbase + rt * 16 + (lane & 15);")
						w.Line("float v[32];")
						w.IfElse("r < N && u < UNITS", func() { w.Linef("%s(W + (size_t)r * ROW_BYTES, u, v);", dqFunc(t)) }, func() {
							w.For("i", "0", "32", "1", -1, func() { w.Line("v[i] = 0.f;") })
						})
						w.Line("uint4* dst = (uint4*)(as + (rt * 16 + (lane & 15)) * LDS + 32 * (lane >> 4));")
						w.For("i", "0", "4", "1", -1, func() {
							w.Line("dst[i] = make_uint4(pack_bf16(v[8 * i], v[8 * i + 1]), pack_bf16(v[8 * i + 2], v[8 * i + 3]),")
							w.Line("    pack_bf16(v[8 * i + 4], v[8 * i + 5]), pack_bf16(v[8 * i + 6], v[8 * i + 7]));")
						})
					})
					w.Line("__syncwarp();")
					w.Line("const int steps = min(4, (K - 64 * c) / 16); // 2 in a last half slice")
					w.For("s", "0", "4", "1", -1, func() {
						w.If("s < steps", func() {
							w.Line("u32 a[RT][4];")
							w.For("rt", "0", "RT", "1", -1, func() {
								w.Line("const u16* p = as + (rt * 16 + g) * LDS + 16 * s + 2 * tg;")
								w.Line("a[rt][0] = *(const u32*)p;")
								w.Line("a[rt][1] = *(const u32*)(p + 8 * LDS);")
								w.Line("a[rt][2] = *(const u32*)(p + 8);")
								w.Line("a[rt][3] = *(const u32*)(p + 8 * LDS + 8);")
							})
							w.For("j", "0", "MAXT", "1", -1, func() {
								w.If("j < ntile", func() {
									w.Comment("B fragment: token t0 + 8j + g, elements 2tg, 2tg+1 and 2tg+8, 2tg+9 of the step")
									w.Line("const int tok = t0 + 8 * j + g;")
									w.Line("u32 b[2] = {0u, 0u};")
									w.If("tok < m", func() {
										w.Line("const float* xp = x + (size_t)tok * K + 64 * c + 16 * s + 2 * tg;")
										w.Line("const float2 p0 = __ldg((const float2*)xp), p1 = __ldg((const float2*)(xp + 8));")
										w.Line("b[0] = pack_bf16(p0.x, p0.y);")
										w.Line("b[1] = pack_bf16(p1.x, p1.y);")
									})
									w.For("rt", "0", "RT", "1", -1, func() { w.Line("mma_bf16(acc[rt][j], a[rt], b);") })
								})
							})
						})
					})
					w.Line("__syncwarp();")
				})
				if arm.KSplit > 1 {
					w.Comment("K groups meet in shared memory (reusing the staging slices), last group first")
					w.Line("__syncthreads();")
					w.Line("float* red = (float*)smem;")
					w.Block("for (int sg = KS - 1; sg >= 0; --sg)", func() {
						w.If("kg == sg", func() {
							w.For("rt", "0", "RT", "1", -1, func() {
								w.For("j", "0", "MAXT", "1", -1, func() {
									w.If("j < ntile", func() {
										w.For("e", "0", "4", "1", -1, func() {
											w.Line("const int idx = (((rw * RT + rt) * MAXT + j) * 4 + e) * 32 + lane;")
											w.If("sg < KS - 1", func() { w.Line("acc[rt][j][e] += red[idx];") })
											w.If("sg > 0", func() { w.Line("red[idx] = acc[rt][j][e];") })
										})
									})
								})
							})
						})
						w.Line("__syncthreads();")
					})
				}
				w.Comment("epilogue (K group 0): C row = weight row g (+8), column = token 2tg (+1)")
				w.If("kg == 0", func() {
					w.For("rt", "0", "RT", "1", -1, func() {
						w.For("j", "0", "MAXT", "1", -1, func() {
							w.If("j < ntile", func() {
								w.For("h", "0", "2", "1", -1, func() {
									w.Line("const int row = rbase + rt * 16 + g + 8 * h;")
									w.If("row < N", func() {
										w.For("e", "0", "2", "1", -1, func() {
											w.Line("const int tok = t0 + 8 * j + 2 * tg + e;")
											op := "="
											if residual {
												op = "+="
											}
											w.If("tok < m", func() { w.Linef("y[(size_t)tok * N + row] %s acc[rt][j][2 * h + e];", op) })
										})
									})
								})
							})
						})
					})
				})
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "gemm_small", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock), ceilDiv(d.Tokens, gemmSmallTokens), 1), Block: dim3(threads, 1, 1)}
	}}, nil
}
