package dtype

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"testing"
)

// fuzzTypes are the types the fuzz targets pick from: every type Dequantize
// handles, plus some it must reject.
var fuzzTypes = []Type{F32, F16, BF16, F8E4M3, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K,
	Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, I8, I32, F64, Type(4), Type(99), Type(1 << 31)}

func FuzzDequantize(f *testing.F) {
	for i, v := range blockVectors {
		blk, _ := hex.DecodeString(v.hex)
		f.Add(blk, uint8(4+i), uint16(v.t.BlockElems()))
		f.Add(blk, uint8(4+i), uint16(v.t.BlockElems()+1))
	}
	f.Add([]byte{1, 2, 3, 4}, uint8(0), uint16(1))
	f.Add([]byte{}, uint8(20), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, which uint8, n uint16) {
		ty := fuzzTypes[int(which)%len(fuzzTypes)]
		dst := make([]float32, int(n)%4096)
		err := Dequantize(ty, data, dst)
		want, rerr := ty.RowBytes(len(dst))
		_, supported := dequantizers[ty]
		switch {
		case !supported:
			if !errors.Is(err, ErrType) {
				t.Fatalf("%v: want ErrType, got %v", ty, err)
			}
		case rerr != nil || want != len(data):
			if !errors.Is(err, ErrLength) {
				t.Fatalf("%v: %d bytes for %d elements: want ErrLength, got %v", ty, len(data), len(dst), err)
			}
		default:
			if err != nil {
				t.Fatalf("%v: %v", ty, err)
			}
			Dot(ty, data, dst) // lengths are valid: must not panic
		}
	})
}

func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0xc0, 0x7f}, uint8(0))
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0x80, 0xff, 1, 0, 0, 0}, uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		ty := fuzzTypes[int(which)%len(fuzzTypes)]
		if _, ok := quantizers[ty]; !ok {
			return
		}
		// Tile the fuzzed floats (NaN, Inf, subnormals…) over one block of 256.
		x := make([]float32, 256)
		for i := range x {
			if len(data) >= 4 {
				j := (4 * i) % (len(data) - len(data)%4)
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[j:]))
			}
		}
		q, err := Quantize(ty, x)
		if err != nil {
			t.Fatalf("%v: %v", ty, err)
		}
		if err := Dequantize(ty, q, make([]float32, len(x))); err != nil {
			t.Fatalf("%v: %v", ty, err)
		}
	})
}
