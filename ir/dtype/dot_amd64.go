//go:build amd64 && !goexperiment.simd && !purego

package dtype

import "golang.org/x/sys/cpu"

// simdDot reports whether Dot uses the AVX2/FMA assembly kernels of
// dot_amd64.s for the types they cover; without those instructions it keeps
// the scalar ones. Each kernel ends with VZEROUPPER, so the scalar code that
// runs after it finds clean vector state.
var simdDot = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotQ8_0AVX2 returns the dot product of the len(x)/32 Q8_0 blocks of row
// with x; tab is the f16 → float32 table (f16Table) it reads block scales
// from. The caller guarantees len(row) ≥ 34·(len(x)/32).
//
//go:noescape
func dotQ8_0AVX2(row []byte, x []float32, tab *[1 << 16]float32) float32

func dotQ8_0Fast(row []byte, x []float32) float32 {
	if !simdDot || len(row) < 34*(len(x)/32) {
		return dotQ8_0(row, x)
	}
	return dotQ8_0AVX2(row, x, f16Table)
}

// dotQ4KAVX2 returns the dot product of the len(x)/256 Q4_K blocks of row
// with x; tab is f16Table and u6 maps a 6-bit scale or min to float32. The
// caller guarantees len(row) ≥ 144·(len(x)/256).
//
//go:noescape
func dotQ4KAVX2(row []byte, x []float32, tab *[1 << 16]float32, u6 *[64]float32) float32

// u6f maps a 6-bit scale or min to float32, for the assembly kernels.
var u6f = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(i)
	}
	return t
}()

func dotQ4KFast(row []byte, x []float32) float32 {
	if !simdDot || len(row) < 144*(len(x)/256) {
		return dotQ4K(row, x)
	}
	return dotQ4KAVX2(row, x, f16Table, &u6f)
}

// dotQ6KAVX2 returns the dot product of the len(x)/256 Q6_K blocks of row
// with x; tab is f16Table and i8 is i8f. The caller guarantees
// len(row) ≥ 210·(len(x)/256).
//
//go:noescape
func dotQ6KAVX2(row []byte, x []float32, tab *[1 << 16]float32, i8 *[256]float32) float32

func dotQ6KFast(row []byte, x []float32) float32 {
	if !simdDot || len(row) < 210*(len(x)/256) {
		return dotQ6K(row, x)
	}
	return dotQ6KAVX2(row, x, f16Table, &i8f)
}

// dotQ5_0AVX2 returns the dot product of the len(x)/32 Q5_0 blocks of row
// with x; tab is f16Table and shifts is q5Shifts. The caller guarantees
// len(row) ≥ 22·(len(x)/32).
//
//go:noescape
func dotQ5_0AVX2(row []byte, x []float32, tab *[1 << 16]float32, shifts *[32]uint32) float32

// q5Shifts holds 0..31: lane j of dotQ5_0AVX2 shifts the block's high-bit
// word right by j.
var q5Shifts = func() (t [32]uint32) {
	for i := range t {
		t[i] = uint32(i)
	}
	return t
}()

func dotQ5_0Fast(row []byte, x []float32) float32 {
	if !simdDot || len(row) < 22*(len(x)/32) {
		return dotQ5_0(row, x)
	}
	return dotQ5_0AVX2(row, x, f16Table, &q5Shifts)
}
