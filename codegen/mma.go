package codegen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// MMAArm is the tiling of the tensor-core matrix product.
type MMAArm struct {
	BM, BN         int // block tile: BM activation rows × BN weight rows (BK is 32, 64 with Pipe 1)
	WarpsM, WarpsN int // warp grid; each warp computes (BM/WarpsM) × (BN/WarpsN)
	// Pipe 1: K tiles of 64 in two shared buffers (dynamic shared memory),
	// the next tile's activations (float4 loads) and weights written while
	// the current one is multiplied, one barrier a tile; needs K a multiple
	// of 64. 0: tiles of 32 written, then multiplied, two barriers a tile.
	// Names carry "_p1".
	Pipe int
}

// DefaultMMAArm is the arm used before tuning: pipelined (Pipe 0 where K
// is not a multiple of 64, ForK). On the H200 it took pp512 of llama2-7b
// q4_k_m to 2466.07 tok/s from the 2016.97 of the Pipe 0 tiling of the same
// size, and passed kernel-check, parity at 1, 2 and 16 sequences and the
// CUDA tests (docs/PERFORMANCE.md, session 11).
var DefaultMMAArm = MMAArm{BM: 64, BN: 64, WarpsM: 2, WarpsN: 2, Pipe: 1}

// MMAKnobs is the search space of MMAArm.
var MMAKnobs = []Knob{
	{"bm", []int{16, 32, 64, 128}},
	{"bn", []int{32, 64, 128}},
	{"warps_m", []int{1, 2, 4}},
	{"warps_n", []int{1, 2, 4}},
	{"pipe", []int{0, 1}},
}

// Validate reports whether a is well formed.
func (a MMAArm) Validate() error {
	if a.WarpsM <= 0 || a.WarpsN <= 0 || a.BM <= 0 || a.BN <= 0 || a.BM%(16*a.WarpsM) != 0 || a.BN%(8*a.WarpsN) != 0 ||
		a.WarpsM*a.WarpsN > 16 || (a.BM/a.WarpsM/16)*(a.BN/a.WarpsN/8) > 32 || a.Pipe < 0 || a.Pipe > 1 {
		return fmt.Errorf("%w: mma arm %+v", ErrUnsupported, a)
	}
	return nil
}

// MMAArms lists every valid MMAArm of the space, both pipes.
func MMAArms() []MMAArm {
	return enumerate(MMAKnobs, func(v map[string]int) MMAArm { return MMAArmOf(v) }, MMAArm.Validate)
}

// String is the arm's short name used in kernel names and tables.
func (a MMAArm) String() string {
	s := fmt.Sprintf("m%d_n%d_w%dx%d", a.BM, a.BN, a.WarpsM, a.WarpsN)
	if a.Pipe != 0 {
		s += fmt.Sprintf("_p%d", a.Pipe)
	}
	return s
}

// ForK returns a for products with rows of k elements: a Pipe 1 arm
// becomes Pipe 0 where k is not a multiple of its 64-element tiles.
func (a MMAArm) ForK(k int) MMAArm {
	if a.Pipe == 1 && k%64 != 0 {
		a.Pipe = 0
	}
	return a
}

// ParseMMAArm parses the String form of an MMAArm, e.g. "m128_n128_w2x4_p1".
func ParseMMAArm(s string) (MMAArm, error) {
	var a MMAArm
	rest, pipe, hasPipe := strings.Cut(s, "_p")
	_, err := fmt.Sscanf(rest, "m%d_n%d_w%dx%d", &a.BM, &a.BN, &a.WarpsM, &a.WarpsN)
	if err == nil && hasPipe {
		a.Pipe, err = strconv.Atoi(pipe)
	}
	if err == nil && a.String() != s {
		err = fmt.Errorf("not in canonical form")
	}
	if err != nil {
		return MMAArm{}, fmt.Errorf("%w: mma arm %q (want e.g. m128_n128_w2x4_p1): %v", ErrUnsupported, s, err)
	}
	return a, a.Validate()
}

// MatMulMMA returns the prompt-processing product y = x·Wᵀ on tensor cores
// (mma.sync m16n8k16, bf16 inputs, f32 accumulation): x [m][k] f32 is
// rounded to bf16, W (n rows of k elements of type t) is dequantised into
// shared memory as bf16:
//
//	matmul(const u8* W, const float* x, float* y, int m)
//
// With residual the product is added to y. grid (⌈n/BN⌉, ⌈m/BM⌉).
func MatMulMMA(t dtype.Type, n, k int, residual bool, arm MMAArm) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: matmul with %d rows", ErrUnsupported, n)
	}
	rowBytes, _ := t.RowBytes(k)
	threads := 32 * arm.WarpsM * arm.WarpsN
	epi := ""
	if residual {
		epi = "_res"
	}
	name := fmt.Sprintf("mma_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(false)
	if arm.Pipe == 1 {
		if k%64 != 0 {
			return nil, fmt.Errorf("%w: pipelined matmul (tiles of 64) with K %d", ErrUnsupported, k)
		}
		return matMulMMAPipe(t, n, k, residual, arm, name, rowBytes)
	}
	src := source(fmt.Sprintf("tensor-core matmul (mma.sync bf16): %v weights, N %d, K %d, residual %v, %v", t, n, k, residual, arm),
		[]string{dqHelper(t), "bf16", "pdl"}, func(w *Writer) {
			emitMMADefines(w, n, k, rowBytes, 32, arm)
			w.Emit(Func{Name: name, Global: true, LaunchBounds: threads, Params: params, Body: func(w *Writer) {
				w.Line("__shared__ __align__(16) u16 As[BM * LDS];")
				w.Line("__shared__ __align__(16) u16 Bs[BN * LDS];")
				w.Line("const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;")
				w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
				emitMMAWarpStart(w, arm)
				w.Line("pdl_wait();")
				w.For("k0", "0", "K", "BK", 0, func() {
					w.Comment("activations: f32 → bf16, zero rows past m")
					w.For("idx", "threadIdx.x", "BM * BK", "NT", 0, func() {
						w.Line("const int r = idx / BK, c = idx % BK;")
						w.Line("const float v = (m0 + r < m) ? x[(size_t)(m0 + r) * K + k0 + c] : 0.f;")
						w.Line("As[r * LDS + c] = f32_to_bf16(v);")
					})
					w.Comment("weights: one 32-element unit per row, dequantised to bf16")
					w.For("r", "threadIdx.x", "BN", "NT", 0, func() {
						w.Line("float v[32];")
						if n%arm.BN != 0 {
							w.IfElse("n0 + r < N", func() { w.Linef("%s(W + (size_t)(n0 + r) * ROW_BYTES, k0 / 32, v);", dqFunc(t)) }, func() {
								w.For("i", "0", "32", "1", -1, func() { w.Line("v[i] = 0.f;") })
							})
						} else {
							w.Linef("%s(W + (size_t)(n0 + r) * ROW_BYTES, k0 / 32, v);", dqFunc(t))
						}
						w.For("i", "0", "32", "1", -1, func() { w.Line("Bs[r * LDS + i] = f32_to_bf16(v[i]);") })
					})
					w.Line("__syncthreads();")
					emitMMATile(w, "As", "Bs")
					w.Line("__syncthreads();")
				})
				emitMMAStore(w, n%arm.BN != 0, residual)
				w.Line("pdl_launch();")
			}})
		})
	return &Kernel{Family: "mma", Name: name, Source: src, Params: params, Product: &ProductShape{Type: t, N: n, K: k, Residual: residual}, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.BN), ceilDiv(d.Tokens, arm.BM), 1), Block: dim3(threads, 1, 1)}
	}}, nil
}

// emitMMABF16 writes mma_bf16(c, a, b): one m16n8k16 bf16 product into
// four f32 accumulators.
func emitMMABF16(w *Writer) {
	w.Emit(Func{Name: "mma_bf16", Params: []Param{{"float*", "c"}, {"const u32*", "a"}, {"const u32*", "b"}}, Body: func(w *Writer) {
		w.Line(`asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "`)
		w.Line(`    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"`)
		w.Line(`    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])`)
		w.Line(`    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));`)
	}})
}

// emitMMAWarpStart writes the warp's place in the block tile (wm0, wn0),
// its lane's fragment coordinates (g, tg) and the zeroed accumulators.
func emitMMAWarpStart(w *Writer, arm MMAArm) {
	w.Linef("const int wm0 = (warp / %d) * (BM / %d), wn0 = (warp %% %d) * (BN / %d);", arm.WarpsN, arm.WarpsM, arm.WarpsN, arm.WarpsN)
	w.Line("const int g = lane >> 2, tg = lane & 3;")
	w.Line("float acc[WM][WN][4];")
	w.For("i", "0", "WM", "1", -1, func() {
		w.For("j", "0", "WN", "1", -1, func() {
			w.For("e", "0", "4", "1", -1, func() { w.Line("acc[i][j][e] = 0.f;") })
		})
	})
}

// emitMMATile writes the warp's products over one K tile of BK held in
// shared rows of LDS bf16 (activations as, weights bs).
func emitMMATile(w *Writer, as, bs string) {
	w.For("kk", "0", "BK", "16", -1, func() {
		w.Line("u32 a[WM][4], b[WN][2];")
		w.For("i", "0", "WM", "1", -1, func() {
			w.Linef("const u16* p = %s + (wm0 + 16 * i + g) * LDS + kk + 2 * tg;", as)
			w.Line("a[i][0] = *(const u32*)p;")
			w.Line("a[i][1] = *(const u32*)(p + 8 * LDS);")
			w.Line("a[i][2] = *(const u32*)(p + 8);")
			w.Line("a[i][3] = *(const u32*)(p + 8 * LDS + 8);")
		})
		w.For("j", "0", "WN", "1", -1, func() {
			w.Linef("const u16* p = %s + (wn0 + 8 * j + g) * LDS + kk + 2 * tg;", bs)
			w.Line("b[j][0] = *(const u32*)p;")
			w.Line("b[j][1] = *(const u32*)(p + 8);")
		})
		w.For("i", "0", "WM", "1", -1, func() {
			w.For("j", "0", "WN", "1", -1, func() { w.Line("mma_bf16(acc[i][j], a[i], b[j]);") })
		})
	})
}

// emitMMAStore writes the accumulators to y (added with residual); ragged
// guards the columns past N.
func emitMMAStore(w *Writer, ragged, residual bool) {
	w.For("i", "0", "WM", "1", -1, func() {
		w.For("j", "0", "WN", "1", -1, func() {
			w.Line("const int col = n0 + wn0 + 8 * j + 2 * tg;")
			w.For("h", "0", "2", "1", -1, func() {
				w.Line("const int row = m0 + wm0 + 16 * i + g + 8 * h;")
				cond := "row < m"
				if ragged {
					cond += " && col < N"
				}
				w.If(cond, func() {
					w.Line("float* o = y + (size_t)row * N + col;")
					op := "="
					if residual {
						op = "+="
					}
					w.Linef("o[0] %s acc[i][j][2 * h];", op)
					w.Linef("o[1] %s acc[i][j][2 * h + 1];", op)
				})
			})
		})
	})
}

// emitMMADefines writes the constants of a MatMulMMA kernel with K tiles
// of bk (shared rows of bk + 8 bf16: conflict-free fragment loads) and
// mma_bf16.
func emitMMADefines(w *Writer, n, k, rowBytes, bk int, arm MMAArm) {
	w.Linef("#define N %d", n)
	w.Linef("#define K %d", k)
	w.Linef("#define ROW_BYTES %d", rowBytes)
	w.Linef("#define BM %d", arm.BM)
	w.Linef("#define BN %d", arm.BN)
	w.Linef("#define BK %d", bk)
	w.Linef("#define LDS %d // shared row stride in bf16 (BK + 8: conflict-free fragment loads)", bk+8)
	w.Linef("#define WM %d // m16 tiles per warp", arm.BM/arm.WarpsM/16)
	w.Linef("#define WN %d // n8 tiles per warp", arm.BN/arm.WarpsN/8)
	w.Linef("#define NT %d", 32*arm.WarpsM*arm.WarpsN)
	w.Blank()
	emitMMABF16(w)
}
