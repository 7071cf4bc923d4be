package dtype

import (
	"math"
	"strconv"
	"unsafe"
)

// The int8 products: a numerical class of its own beside Dot.
//
// Dot multiplies a stored row with float32 activations and is the CPU
// reference executor's product. The int8 products instead quantise the
// activations once per product, per group of 32 elements, to int8 with a
// float32 scale (Acts), and multiply them with the weights' integer codes in
// integer arithmetic (vpdpbusd, vpmaddubsw): per weight group an exact int32
// sum P of code × code, then a few float32 operations that apply the scales.
// The result differs from Dot by the activations' rounding (a relative
// error of a few 1e-3 of the product's magnitude).
//
// Within the class every result is defined to the bit: P is exact, and the
// float32 operations (a product of two scales, a fused multiply-add into the
// row's accumulator) come in an order fixed per type, group after group, the
// same whatever the ISA, the tile of tokens or the split of rows between
// threads. The portable Go kernels (q8ref.go) are the definition; the
// assembly kernels must equal them bit for bit (q8_amd64_test.go).
//
// Weights are read in a tile layout made once at load (Pack): 16 rows at a
// time, each group's codes interleaved so that one 64-byte vector holds four
// consecutive codes of each of the 16 rows. A vector instruction then
// computes 16 rows' partial sums at once against four broadcast activation
// bytes, and each lane of the accumulator is one output row: no horizontal
// sums, and the float32 operations run per row in the defined order.

// ActGroup is one group of 32 quantised activations' scale and the
// corrections the products of the weight types need, all derived from the
// codes q (x ≈ D·q). Its layout (32 bytes) is read by the assembly kernels.
type ActGroup struct {
	D    float32  // scale
	SD   float32  // D·Σq (types with a min)
	N8   int32    // −8·Σq (Q4_0: codes less 8)
	N128 int32    // −128·Σq (codes offset by 128 to be unsigned)
	N32  [2]int32 // −32·Σq of each half of 16 (Q6_K: codes less 32, a scale per 16)
	N16  int32    // −16·Σq (codes less 16)
	_    int32
}

// Byte offsets of ActGroup's fields, for the assembly kernels.
const (
	actD    = 0
	actSD   = 4
	actN8   = 8
	actN128 = 12
	actN32  = 16
	actN16  = 24
	actSize = 32
)

var _ [actSize - unsafe.Sizeof(ActGroup{})]byte
var _ [unsafe.Sizeof(ActGroup{}) - actSize]byte

// ActGroupSize is the number of activations that share a scale.
const ActGroupSize = 32

// Acts holds M rows of K activations quantised for the int8 products: the
// codes Q (row m at Q[m·K:]) and each row's K/32 groups (G[m·K/32:]).
type Acts struct {
	K, M int
	Q    []int8
	G    []ActGroup
	buf  []byte
}

// Reset sizes a for m rows of k elements (k a multiple of 32), reusing its
// memory. Rows keep whatever they held until quantised.
func (a *Acts) Reset(m, k int) {
	if k%ActGroupSize != 0 {
		panic("BUG: dtype.Acts: row of " + strconv.Itoa(k) + " elements is not a whole number of groups of 32")
	}
	// One buffer: the codes, then the groups at a 64-byte boundary. The
	// kernels reach a row's groups from its codes by one constant offset.
	codes := (m*k + 63) &^ 63
	need := codes + m*k + 64
	if cap(a.buf) < need {
		a.buf = make([]byte, need)
	}
	a.buf = a.buf[:need]
	base := int(uintptr(unsafe.Pointer(&a.buf[0])) & 63)
	off := 0
	if base != 0 {
		off = 64 - base
	}
	a.K, a.M = k, m
	a.Q = unsafe.Slice((*int8)(unsafe.Pointer(&a.buf[off])), m*k)
	a.G = unsafe.Slice((*ActGroup)(unsafe.Pointer(&a.buf[off+codes])), m*k/ActGroupSize)
}

// Quantize sizes a for the len(x)/k rows of x and quantises them all.
func (a *Acts) Quantize(x []float32, k int) {
	a.Reset(len(x)/k, k)
	a.QuantizeRows(x, 0, a.M)
}

// QuantizeRows quantises rows [m0, m1) of x (M rows of K) into a. Rows are
// independent, so workers may quantise disjoint ranges at once.
func (a *Acts) QuantizeRows(x []float32, m0, m1 int) {
	K := a.K
	if m1 <= m0 {
		return
	}
	_ = x[m1*K-1]
	if s := q8Active.Load(); s != nil && s.quantize != nil {
		s.quantize(&x[m0*K], &a.Q[m0*K], &a.G[m0*K/ActGroupSize], (m1-m0)*K/ActGroupSize)
		return
	}
	for m := m0; m < m1; m++ {
		xr := x[m*K : (m+1)*K]
		qr := a.Q[m*K : (m+1)*K]
		gr := a.G[m*K/ActGroupSize : (m+1)*K/ActGroupSize]
		for g := range gr {
			quantizeGroup(xr[32*g:32*g+32], qr[32*g:32*g+32], &gr[g])
		}
	}
}

// actTiny is the float32 bits of 2⁻¹⁰⁰: a group whose largest magnitude is
// below it quantises to zero (its scale's reciprocal would overflow).
const actTiny = 0x0d800000

// quantizeGroup quantises 32 activations: D = amax/127 and q = x·(127/amax)
// rounded to the nearest integer, ties to even (both float32 operations).
// A group with a NaN or an infinity gets codes 0 and D NaN, so every
// product that reads it is NaN, as the float products would be; a group of
// magnitude below 2⁻¹⁰⁰ gets codes 0 and D 0.
func quantizeGroup(x []float32, q []int8, g *ActGroup) {
	x, q = x[:32], q[:32]
	var amaxBits uint32
	for _, v := range x {
		amaxBits = max(amaxBits, math.Float32bits(v)&0x7fffffff)
	}
	if amaxBits >= 0x7f800000 {
		clear(q)
		*g = ActGroup{D: float32(math.NaN()), SD: float32(math.NaN())}
		return
	}
	if amaxBits < actTiny {
		clear(q)
		*g = ActGroup{}
		return
	}
	amax := math.Float32frombits(amaxBits)
	id := 127 / amax
	var lo, hi int32
	for i, v := range x {
		r := int32(math.RoundToEven(float64(v * id)))
		r = min(max(r, -127), 127)
		q[i] = int8(r)
		if i < 16 {
			lo += r
		} else {
			hi += r
		}
	}
	d := amax / 127
	s := lo + hi
	*g = ActGroup{D: d, SD: d * float32(s), N8: -8 * s, N128: -128 * s, N32: [2]int32{-32 * lo, -32 * hi}, N16: -16 * s}
}

// FMA32 returns a·b + c rounded once to float32, as VFMADD231PS computes it:
// the portable kernels of the CPU's fast classes are written with it.
func FMA32(a, b, c float32) float32 { return fma32(a, b, c) }

// fma32 returns a·b + c rounded once to float32, as VFMADD231PS computes it.
// The product of two float32 is exact in float64; the sum is rounded to
// float64 by rounding to odd (a correct rounding to the nearest float32
// follows from any rounding to odd with two bits to spare).
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// s + e = p + c exactly (TwoSum).
	bp := s - cc
	e := (p - bp) + (cc - (s - bp))
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}
