package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The operands of a prefill product run by a matrix library (cuBLASLt)
// instead of MatMulMMA: the weights dequantised to bf16 rows and the
// activations rounded to bf16, each exactly as MatMulMMA rounds them on
// their way into shared memory (dq32 of the type, then f32_to_bf16), so
// the library's product multiplies the same operands and only the order
// of the f32 sums differs. F16 weights are multiplied as they are, against
// activations rounded to f16 (RoundHalf).

// ProductShape is what a product kernel computes: y[m][N] (+)= x[m][K] ·
// W[N][K]ᵀ over weights of Type in the file's layout. MatMulMMA sets it
// (Kernel.Product), so a runtime can run the same product another way.
type ProductShape struct {
	Type     dtype.Type
	N, K     int
	Residual bool // y += rather than y =
}

// BLASOperands says how a library product over weights of type t takes its
// operands: their type (F16 for f16 weights, else BF16), and whether the
// weights must first be rewritten as bf16 rows (DequantBF16; not for f16
// and bf16 weights, which are used as they are).
func BLASOperands(t dtype.Type) (op dtype.Type, dequant bool) {
	switch t {
	case dtype.F16:
		return dtype.F16, false
	case dtype.BF16:
		return dtype.BF16, false
	}
	return dtype.BF16, true
}

// blasThreads is the block of the two operand kernels.
const blasThreads = 256

// DequantBF16 returns the kernel writing the n rows of k elements of W
// (type t, file layout) as bf16 rows of k, one 32-element unit a thread:
//
//	dequant_bf16(const u8* W, u16* out)
//
// grid (⌈n·k/32/256⌉).
func DequantBF16(t dtype.Type, n, k int) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: dequantise %d rows", ErrUnsupported, n)
	}
	rowBytes, _ := t.RowBytes(k)
	name := fmt.Sprintf("dequant_bf16_%s_n%d_k%d", typeTag(t), n, k)
	params := []Param{{"const u8* __restrict__", "W"}, {"u16* __restrict__", "out"}}
	units := n * (k / 32)
	src := source(fmt.Sprintf("dequantise to bf16 rows: %v weights, N %d, K %d", t, n, k), []string{dqHelper(t), "bf16"}, func(w *Writer) {
		w.Linef("#define K %d", k)
		w.Linef("#define ROW_BYTES %d", rowBytes)
		w.Linef("#define UNITS %d // 32-element units of the matrix", units)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: blasThreads, Params: params, Body: func(w *Writer) {
			w.Linef("const int i = blockIdx.x * %d + threadIdx.x;", blasThreads)
			w.If("i >= UNITS", func() { w.Line("return;") })
			w.Line("const int r = i / (K / 32), u = i % (K / 32);")
			w.Line("float v[32];")
			w.Linef("%s(W + (size_t)r * ROW_BYTES, u, v);", dqFunc(t))
			w.Line("uint4* dst = (uint4*)(out + (size_t)r * K + 32 * u);")
			w.For("j", "0", "4", "1", -1, func() {
				w.Line("u32 p[4];")
				w.For("e", "0", "4", "1", -1, func() {
					w.Line("p[e] = (u32)f32_to_bf16(v[8 * j + 2 * e]) | ((u32)f32_to_bf16(v[8 * j + 2 * e + 1]) << 16);")
				})
				w.Line("dst[j] = make_uint4(p[0], p[1], p[2], p[3]);")
			})
		}})
	})
	return &Kernel{Family: "dequant_bf16", Name: name, Source: src, Params: params, Launch: func(Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(units, blasThreads), 1, 1), Block: dim3(blasThreads, 1, 1)}
	}}, nil
}

// RoundHalf returns the kernel rounding rows of k floats to t (BF16 or
// F16, round to nearest even), eight a thread:
//
//	round_bf16(const float* x, u16* out, int m)
//
// grid (⌈m·k/8/256⌉) for m rows.
func RoundHalf(t dtype.Type, k int) (*Kernel, error) {
	if k <= 0 || k%8 != 0 {
		return nil, fmt.Errorf("%w: round rows of %d to %v (a multiple of 8)", ErrUnsupported, k, t)
	}
	if t != dtype.BF16 && t != dtype.F16 {
		return nil, fmt.Errorf("%w: round activations to %v", ErrUnsupported, t)
	}
	tag := typeTag(t)
	conv := "f32_to_" + tag
	name := fmt.Sprintf("round_%s_k%d", tag, k)
	params := []Param{{"const float* __restrict__", "x"}, {"u16* __restrict__", "out"}, {"int", "m"}}
	src := source(fmt.Sprintf("round activation rows of %d to %v", k, t), []string{tag}, func(w *Writer) {
		w.Linef("#define K %d", k)
		w.Linef("#define CONV %s", conv)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: blasThreads, Params: params, Body: func(w *Writer) {
			w.Linef("const size_t i = (size_t)blockIdx.x * %d + threadIdx.x; // chunk of 8", blasThreads)
			w.If("i >= (size_t)m * (K / 8)", func() { w.Line("return;") })
			w.Line("const float4 a = ((const float4*)x)[2 * i], b = ((const float4*)x)[2 * i + 1];")
			w.Line("((uint4*)out)[i] = make_uint4((u32)CONV(a.x) | ((u32)CONV(a.y) << 16), (u32)CONV(a.z) | ((u32)CONV(a.w) << 16),")
			w.Line("    (u32)CONV(b.x) | ((u32)CONV(b.y) << 16), (u32)CONV(b.z) | ((u32)CONV(b.w) << 16));")
		}})
	})
	return &Kernel{Family: "round_half", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(d.Tokens*k/8, blasThreads), 1, 1), Block: dim3(blasThreads, 1, 1)}
	}}, nil
}
