package dtype

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestF16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		got := F32ToF16(f)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 { // NaN: stays a NaN, quiet bit set
			require.True(t, math.IsNaN(float64(f)), "%#04x", h)
			require.Equal(t, h|0x200, got, "%#04x", h)
			continue
		}
		require.Equal(t, h, got, "%#04x -> %v", h, f)
	}
}

func TestF16ToF32Values(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.333251953125}, {0x7bff, 65504},
		{0x0400, 1.0 / 16384}, {0x0001, 1.0 / 16777216}, {0x03ff, 1023.0 / 16777216},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	} {
		require.Equal(t, c.want, F16ToF32(c.h), "%#04x", c.h)
	}
	require.Equal(t, uint32(0x80000000), math.Float32bits(F16ToF32(0x8000)), "negative zero")
	require.True(t, math.IsNaN(float64(F16ToF32(0x7e00))))
}

func TestF32ToF16Rounding(t *testing.T) {
	p := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	for _, c := range []struct {
		name string
		f    float32
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"tie to even down", 1 + p(-11), 0x3c00},
		{"tie to even up", 1 + 3*p(-11), 0x3c02},
		{"above tie", 1 + p(-11) + p(-20), 0x3c01},
		{"below tie", 1 + p(-11) - p(-22), 0x3c00},
		{"max", 65504, 0x7bff},
		{"below overflow tie", 65519, 0x7bff},
		{"overflow tie to inf", 65520, 0x7c00},
		{"huge", 1e10, 0x7c00},
		{"neg huge", -1e10, 0xfc00},
		{"smallest subnormal", p(-24), 0x0001},
		{"half smallest subnormal ties to zero", p(-25), 0x0000},
		{"above half smallest subnormal", p(-25) + p(-40), 0x0001},
		{"1.5 subnormal units", 3 * p(-25), 0x0002},
		{"2.5 subnormal units ties to even", 5 * p(-25), 0x0002},
		{"largest subnormal", 1023 * p(-24), 0x03ff},
		{"subnormal rounds up to normal", 2047 * p(-25), 0x0400},
		{"smallest normal", p(-14), 0x0400},
		{"tiny", 1e-30, 0x0000},
		{"neg tiny", -1e-30, 0x8000},
		{"neg zero", float32(math.Copysign(0, -1)), 0x8000},
		{"inf", float32(math.Inf(1)), 0x7c00},
		{"neg inf", float32(math.Inf(-1)), 0xfc00},
		{"nan", float32(math.NaN()), 0x7e00},
		{"third", 1.0 / 3, 0x3555},
	} {
		require.Equal(t, c.want, F32ToF16(c.f), c.name)
	}
}

func TestBF16(t *testing.T) {
	p := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	for _, c := range []struct {
		name string
		f    float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"tie to even down", 1 + p(-8), 0x3f80},
		{"tie to even up", 1 + 3*p(-8), 0x3f82},
		{"above tie", 1 + p(-8) + p(-20), 0x3f81},
		{"neg", -2, 0xc000},
		{"max f32 rounds to inf", math.MaxFloat32, 0x7f80},
		{"inf", float32(math.Inf(-1)), 0xff80},
		{"subnormal", p(-133), 0x0001},
		{"subnormal tie to even", p(-133) + p(-134), 0x0002},
		{"nan quiet", math.Float32frombits(0x7fc00000), 0x7fc0},
		{"nan signalling gets quiet bit", math.Float32frombits(0x7f800001), 0x7fc0},
		{"nan payload kept", math.Float32frombits(0xff812345), 0xffc1},
	} {
		require.Equal(t, c.want, F32ToBF16(c.f), c.name)
	}
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := BF16ToF32(h)
		require.Equal(t, uint32(h)<<16, math.Float32bits(f))
		if math.IsNaN(float64(f)) {
			require.Equal(t, h|0x40, F32ToBF16(f))
		} else {
			require.Equal(t, h, F32ToBF16(f))
		}
	}
}

func TestF8E4M3(t *testing.T) {
	for _, c := range []struct {
		v    uint8
		want float32
	}{
		{0x00, 0}, {0x38, 1}, {0xb8, -1}, {0x40, 2}, {0x3c, 1.5}, {0x7e, 448}, {0xfe, -448},
		{0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x77, 240}, {0x78, 256},
	} {
		require.Equal(t, c.want, F8E4M3ToF32(c.v), "%#02x", c.v)
	}
	require.Equal(t, uint32(0x80000000), math.Float32bits(F8E4M3ToF32(0x80)))
	nan := 0
	for i := 0; i < 256; i++ {
		f := F8E4M3ToF32(uint8(i))
		require.False(t, math.IsInf(float64(f), 0), "no infinities in E4M3fn")
		if math.IsNaN(float64(f)) {
			nan++
		} else {
			require.LessOrEqual(t, math.Abs(float64(f)), 448.0)
		}
	}
	require.Equal(t, 2, nan, "only S.1111.111 is NaN")
	require.True(t, math.IsNaN(float64(F8E4M3ToF32(0x7f))))
	require.True(t, math.IsNaN(float64(F8E4M3ToF32(0xff))))
}
