package codegen

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// TestCacheQ8RoundTrip: rows stored as the 8-bit cache take kvw·9/8
// bytes, each block's scale is its max|x|/127, every value comes back
// within half a step (max|x|/254) of itself, a block of zeros comes back
// zero, and roundCacheRow (the reference's rounding) is the round trip.
func TestCacheQ8RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	const kvw, rows = 256, 3
	v := make([]float32, kvw*rows)
	for i := range v {
		v[i] = float32(r.NormFloat64()) * float32(1+i/CacheBlock%4*10)
	}
	clear(v[kvw+CacheBlock : kvw+2*CacheBlock]) // one block of zeros
	data, err := EncodeCache(CacheQ8, kvw, v)
	require.NoError(t, err)
	require.Len(t, data, rows*kvw*9/8)
	require.Equal(t, kvw*9/8, CacheRowBytes(CacheQ8, kvw))
	back, err := DecodeCache(CacheQ8, kvw, data)
	require.NoError(t, err)
	rounded := append([]float32(nil), v...)
	for row := range rows {
		roundCacheRow(CacheQ8, rounded[row*kvw:(row+1)*kvw])
	}
	for b := 0; b < len(v); b += CacheBlock {
		var amax float32
		for _, x := range v[b : b+CacheBlock] {
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		row, blk := b/kvw, b%kvw/CacheBlock
		s := math.Float32frombits(uint32(data[row*kvw*9/8+kvw+4*blk]) | uint32(data[row*kvw*9/8+kvw+4*blk+1])<<8 |
			uint32(data[row*kvw*9/8+kvw+4*blk+2])<<16 | uint32(data[row*kvw*9/8+kvw+4*blk+3])<<24)
		require.Equal(t, amax/127, s, "block %d", b/CacheBlock)
		for i := b; i < b+CacheBlock; i++ {
			require.InDelta(t, v[i], back[i], float64(amax/254)*1.0001, "element %d", i)
			require.Equal(t, back[i], rounded[i], "element %d", i)
		}
	}
	for i := kvw + CacheBlock; i < kvw+2*CacheBlock; i++ {
		require.Zero(t, back[i])
	}
}

// TestCacheRowErrors: what the 8-bit cache cannot hold is an error, not
// a wrong layout.
func TestCacheRowErrors(t *testing.T) {
	require.NoError(t, CheckCacheRow(CacheQ8, 2, 64))
	require.NoError(t, CheckCacheRow(dtype.F16, 1, 8))
	for _, c := range []struct {
		t        dtype.Type
		kv, head int
	}{{CacheQ8, 1, 64}, {CacheQ8, 4, 48}, {CacheQ8, 3, 96}, {dtype.Q4_K, 2, 64}} {
		require.ErrorIs(t, CheckCacheRow(c.t, c.kv, c.head), ErrUnsupported, "%v %d×%d", c.t, c.kv, c.head)
	}
	_, err := EncodeCache(CacheQ8, 48, make([]float32, 96))
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = EncodeCache(CacheQ8, 64, make([]float32, 96))
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = DecodeCache(CacheQ8, 64, make([]byte, 64))
	require.ErrorIs(t, err, ErrUnsupported, "a row of 64 is 72 bytes")
	_, err = EncodeCache(dtype.Q4_K, 256, make([]float32, 256))
	require.ErrorIs(t, err, ErrUnsupported)
}

// prmt is PTX prmt.b32 (CUDA __byte_perm) in its default mode: byte n of
// the result is byte s[n] (the selector's nibble n, low 3 bits) of the
// eight bytes {y, x} (x the low four).
func prmt(x, y, s uint32) uint32 {
	b := uint64(y)<<32 | uint64(x)
	var out uint32
	for n := range 4 {
		sel := s >> (4 * n) & 7
		out |= uint32(b>>(8*sel)&0xff) << (8 * n)
	}
	return out
}

// TestQ8VecBytes: the ld_vec the 8-bit cache's kernels are written with,
// evaluated as written (each word's xor, each element's byte permute and
// subtraction parsed from the source), gives every int8 value back as its
// float in every byte position.
func TestQ8VecBytes(t *testing.T) {
	w := &Writer{}
	emitQ8Vec(w, 16)
	src := w.String()
	xors := regexp.MustCompile(`const u32 w(\d) = r\.([xyzw]) \^ 0x([0-9a-f]+)u;`).FindAllStringSubmatch(src, -1)
	elems := regexp.MustCompile(`v\[(\d+)\] = __int_as_float\(__byte_perm\(w(\d), 0x([0-9a-f]+)u, 0x([0-9a-f]+)\)\) - ([0-9.]+)f;`).FindAllStringSubmatch(src, -1)
	require.Len(t, xors, 4, src)
	require.Len(t, elems, 16, src)
	hex := func(s string) uint32 {
		v, err := strconv.ParseUint(s, 16, 32)
		require.NoError(t, err)
		return uint32(v)
	}
	for _, e := range elems {
		i, _ := strconv.Atoi(e[1])
		word, _ := strconv.Atoi(e[2])
		require.Equal(t, i/4, word, e[0])
		require.Equal(t, "xyzw"[word:word+1], xors[word][2])
		sub, err := strconv.ParseFloat(e[5], 32)
		require.NoError(t, err)
		for q := -128; q < 128; q++ {
			for _, fill := range []uint32{0, 0xffffffff, 0x5a3c96e1} {
				shift := 8 * (i % 4)
				raw := fill&^(0xff<<shift) | uint32(uint8(int8(q)))<<shift
				got := math.Float32frombits(prmt(raw^hex(xors[word][3]), hex(e[3]), hex(e[4]))) - float32(sub)
				require.Equal(t, float32(q), got, "element %d, byte %d", i, q)
			}
		}
	}
}

// TestLowerCacheQ8: a decode program over the 8-bit cache keeps its
// RopeKV launches and sizes its cache at 9/16 of the f16 one; a model
// whose cache rows are not whole 16-byte-aligned blocks fails to lower
// with an error naming the 8-bit cache.
func TestLowerCacheQ8(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	o := LowerOptions{Class: Decode, MaxSeqs: 2, Context: 256, Cache: dtype.F16}
	f16, err := Lower(g, o)
	require.NoError(t, err)
	o.Cache = CacheQ8
	q8, err := Lower(g, o)
	require.NoError(t, err)
	require.Equal(t, smallQwen3.Layers, launchesOf(q8, "rope_kv"))
	require.Equal(t, f16.PageBytes()*9/16, q8.PageBytes())
	for _, k := range q8.Kernels {
		if k.Family == "rope_kv" || k.Family == "attn_decode" {
			require.Contains(t, k.Source, "CROW (HKV * HD + HKV * HD / 8)", k.Name)
		}
	}

	narrow := smallQwen3
	narrow.HeadsKV = 1
	_, err = Lower(buildGraph(t, narrow, synthTensors(narrow, dtype.Q4_K, dtype.Q6_K)), o)
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "8-bit KV cache")
}
