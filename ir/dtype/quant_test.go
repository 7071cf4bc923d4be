package dtype

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// normalData returns n N(0,1) values from a fixed seed.
func normalData(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func roundTrip(t *testing.T, ty Type, x []float32) ([]byte, []float32) {
	t.Helper()
	q, err := Quantize(ty, x)
	require.NoError(t, err)
	y := make([]float32, len(x))
	require.NoError(t, Dequantize(ty, q, y))
	return q, y
}

func errStats(x, y []float32) (rmse, maxErr float64) {
	var se float64
	for i := range x {
		e := math.Abs(float64(x[i]) - float64(y[i]))
		se += e * e
		maxErr = max(maxErr, e)
	}
	return math.Sqrt(se / float64(len(x))), maxErr
}

// errorBounds are the RMSE and max|err| of each type on N(0,1) data. The
// types of the format reference's table use its figures; Q4_1, Q5_1, Q8_1
// and Q8_K, which it does not list, use figures measured here.
var errorBounds = map[Type][2]float64{
	F16: {0.00021, 0.0019}, BF16: {0.0017, 0.016}, Q8_0: {0.0054, 0.019},
	Q6_K: {0.0178, 0.076}, Q5_K: {0.0361, 0.166}, Q5_0: {0.0428, 0.197},
	Q4_K: {0.0714, 0.307}, IQ4_XS: {0.0767, 0.293}, IQ4_NL: {0.0762, 0.293},
	Q4_0: {0.0859, 0.398}, Q3_K: {0.151, 0.669}, Q2_K: {0.297, 1.34},
	Q4_1: {0.0785, 0.252}, Q5_1: {0.0381, 0.118}, Q8_1: {0.0054, 0.019}, Q8_K: {0.0071, 0.019},
}

func TestQuantizeErrorBounds(t *testing.T) {
	x := normalData(1<<16, 1)
	for ty, b := range errorBounds {
		_, y := roundTrip(t, ty, x)
		rmse, maxErr := errStats(x, y)
		require.LessOrEqual(t, rmse, 1.25*b[0], "%v rmse", ty)
		require.LessOrEqual(t, maxErr, 1.25*b[1], "%v max|err|", ty)
		// A quantiser that is far better than the reference is suspicious too.
		require.GreaterOrEqual(t, rmse, 0.8*b[0], "%v rmse", ty)
	}
	_, y := roundTrip(t, F32, x)
	require.Equal(t, x, y)
}

// TestQuantizeFixedPoint requantises dequantised data. The legacy types come
// back byte for byte: their codes sit exactly on the grid they were made from
// and the scale is re-derived from the same extreme element. The K- and IQ
// types are not fixed points, and the reference quantisers do not promise it:
// their scale searches (the make_qkx2/make_qx/make_q3 candidate grids, the
// IQ4 codebook fit, Q8_K's −127/max) re-fit each sub-block scale to the
// already-quantised values and round it again to 6 or 8 bits, so now and then
// a scale moves by one step (Q4_K keeps ~99.9% of its bytes, Q3_K ~89%; Q6_K
// moves ~3% of its bytes but decodes to the same values). For
// those the second generation must stay well within the type's own error.
func TestQuantizeFixedPoint(t *testing.T) {
	x := normalData(1<<14, 2)
	exact := map[Type]bool{F16: true, BF16: true, Q8_0: true, Q4_0: true, Q4_1: true, Q5_0: true, Q5_1: true}
	for ty, b := range errorBounds {
		q1, y1 := roundTrip(t, ty, x)
		q2, y2 := roundTrip(t, ty, y1)
		if exact[ty] {
			require.True(t, bytes.Equal(q1, q2), "%v is not a fixed point", ty)
			continue
		}
		same := 0
		for i := range q1 {
			if q1[i] == q2[i] {
				same++
			}
		}
		rmse, _ := errStats(y1, y2)
		t.Logf("%v: %.2f%% of bytes kept, second-generation rmse %.5f", ty, 100*float64(same)/float64(len(q1)), rmse)
		require.LessOrEqual(t, rmse, 0.5*b[0], "%v second generation drifts", ty)
		require.Greater(t, same, len(q1)*3/4, "%v requantisation changes most bytes", ty)
	}
}

// goldenInputs are the fixed inputs whose quantised bytes are pinned.
func goldenInputs() map[string][]float32 {
	cos := make([]float32, 512)
	for i := range cos {
		cos[i] = 0.1 + 2*float32(math.Cos(float64(i)))
	}
	outlier := make([]float32, 512)
	for i := range outlier {
		outlier[i] = float32(math.Sin(0.37*float64(i)) * (1 + float64(i%7)/7))
	}
	outlier[77] = 40
	outlier[300] = -25
	return map[string][]float32{"cos": cos, "outlier": outlier}
}

func TestQuantizeGolden(t *testing.T) {
	inputs := goldenInputs()
	for ty := range quantizers {
		for name, x := range inputs {
			q, err := Quantize(ty, x)
			require.NoError(t, err)
			path := filepath.Join("testdata", "quant", fmt.Sprintf("%s_%s.hex", ty, name))
			text := hexLines(q, ty.BlockBytes())
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
				continue
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -update to create it")
			if string(want) != text {
				require.Equal(t, strings.Split(string(want), "\n"), strings.Split(text, "\n"), "%s changed (go test -update if intended)", path)
			}
		}
	}
}

// hexLines writes b as hex, one block per line (scalar types 32 bytes a line).
func hexLines(b []byte, block int) string {
	if block < 16 {
		block = 32
	}
	var sb strings.Builder
	for len(b) > 0 {
		n := min(block, len(b))
		sb.WriteString(hex.EncodeToString(b[:n]))
		sb.WriteByte('\n')
		b = b[n:]
	}
	return sb.String()
}

func TestQuantizeZeroBlock(t *testing.T) {
	rep := func(s string, n int) string { return strings.Repeat(s, n) }
	want := map[Type]string{
		Q8_0: rep("00", 34),
		// d = max/−8 with max = +0 is −0 (f16 0x8000); every code is the
		// midpoint 8 (16 for Q5_0: low nibble 0, high bit set).
		Q4_0:   "0080" + rep("88", 16),
		Q5_0:   "0080" + "ffffffff" + rep("00", 16),
		Q4_K:   rep("00", 144),
		Q5_K:   rep("00", 176),
		Q6_K:   rep("00", 210),
		Q3_K:   rep("00", 110),
		Q2_K:   rep("00", 84),
		Q8_K:   rep("00", 292),
		IQ4_NL: "0000" + rep("88", 16),
		// d = −max_scale/32 = −0, every 6-bit scale the midpoint 32.
		IQ4_XS: "0080" + "aaaa" + "00000000" + rep("88", 128),
	}
	for ty := range quantizers {
		n := ty.BlockElems() * 8
		if n < 256 {
			n = 256
		}
		x := make([]float32, n)
		q, y := roundTrip(t, ty, x)
		require.Equal(t, make([]float32, n), y, "%v", ty)
		if w, ok := want[ty]; ok {
			require.Equal(t, w, hex.EncodeToString(q[:ty.BlockBytes()]), "%v", ty)
		}
	}
}

func TestQuantizeConstantAndTiny(t *testing.T) {
	for ty := range quantizers {
		for _, c := range []float32{1.5, -1.5, 1e-20} {
			x := make([]float32, 256)
			for i := range x {
				x[i] = c
			}
			_, y := roundTrip(t, ty, x)
			for i, v := range y {
				require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "%v %g [%d]", ty, c, i)
				if c == 1e-20 {
					// d rounds to 0 in f16: everything decodes to (nearly) zero.
					require.LessOrEqual(t, math.Abs(float64(v)), 1e-6, "%v tiny [%d]", ty, i)
				} else {
					require.InDelta(t, float64(c), float64(v), 0.01, "%v %g [%d]", ty, c, i)
				}
			}
		}
	}
	// Exact cases worked out from the reference rules.
	q, y := roundTrip(t, Q4_0, []float32{1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5,
		1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5})
	require.Equal(t, "00b2"+strings.Repeat("00", 16), hex.EncodeToString(q), "d = 1.5/−8, codes 0")
	require.Equal(t, float32(1.5), y[0])
	q, _ = roundTrip(t, Q8_0, append([]float32{-2}, make([]float32, 31)...))
	require.Equal(t, "0824"+"81"+strings.Repeat("00", 31), hex.EncodeToString(q), "d = 2/127, code −127")
}

func TestQuantizeErrors(t *testing.T) {
	_, err := Quantize(Q4_K, make([]float32, 255))
	require.ErrorIs(t, err, ErrLength)
	_, err = Quantize(Q8_0, make([]float32, 33))
	require.ErrorIs(t, err, ErrLength)
	_, err = Quantize(F8E4M3, make([]float32, 4))
	require.ErrorIs(t, err, ErrType)
	_, err = Quantize(Type(1234), make([]float32, 4))
	require.ErrorIs(t, err, ErrType)
	q, err := Quantize(Q6_K, nil)
	require.NoError(t, err)
	require.Empty(t, q)
}

// TestQuantizeBlockIndependence checks that each block is quantised from its
// own elements only: quantising blocks one at a time gives the same bytes.
func TestQuantizeBlockIndependence(t *testing.T) {
	x := normalData(1024, 3)
	types := make([]Type, 0, len(quantizers))
	for ty := range quantizers {
		types = append(types, ty)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	for _, ty := range types {
		all, err := Quantize(ty, x)
		require.NoError(t, err)
		var parts []byte
		n := max(ty.BlockElems(), 256)
		for i := 0; i < len(x); i += n {
			p, err := Quantize(ty, x[i:i+n])
			require.NoError(t, err)
			parts = append(parts, p...)
		}
		require.True(t, bytes.Equal(all, parts), "%v", ty)
	}
}
