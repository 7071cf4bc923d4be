package codegen

import (
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir/dtype"
)

// AttnShape is the constant shape of the attention kernels. Queries are read
// from rows of QStride floats (the fused QKV row: q heads first); the KV
// cache holds rows of [HeadsKV][HeadDim] elements of type Cache.
type AttnShape struct {
	Heads, HeadsKV, HeadDim int
	QStride                 int // floats between consecutive tokens' query rows
	Cache                   dtype.Type
	Scale                   float32 // score scale; 0 means 1/sqrt(HeadDim)
}

func (s AttnShape) scale() float32 {
	if s.Scale != 0 {
		return s.Scale
	}
	return float32(1 / math.Sqrt(float64(s.HeadDim)))
}

func (s AttnShape) validate() error {
	switch {
	case s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0:
		return fmt.Errorf("%w: heads %d/%d", ErrUnsupported, s.Heads, s.HeadsKV)
	case s.HeadDim <= 0 || s.HeadDim%32 != 0 || s.HeadDim > 256:
		return fmt.Errorf("%w: attention head dim %d (a multiple of 32, ≤ 256)", ErrUnsupported, s.HeadDim)
	case s.QStride < s.Heads*s.HeadDim:
		return fmt.Errorf("%w: query stride %d < %d", ErrUnsupported, s.QStride, s.Heads*s.HeadDim)
	}
	return checkCache(s.Cache)
}

func (s AttnShape) tag() string {
	return fmt.Sprintf("h%d_%d_d%d_%s", s.Heads, s.HeadsKV, s.HeadDim, typeTag(s.Cache))
}

func (s AttnShape) defines(w *Writer) {
	w.Linef("#define HQ %d", s.Heads)
	w.Linef("#define HKV %d", s.HeadsKV)
	w.Linef("#define HD %d", s.HeadDim)
	w.Linef("#define GROUP %d // query heads per kv head", s.Heads/s.HeadsKV)
	w.Linef("#define QSTRIDE %d", s.QStride)
	w.Linef("#define SCALE %s", cfloat(s.scale()))
}

// DecodeArm is the tuning of split-KV decode attention.
type DecodeArm struct {
	Threads int // threads per block of the partial kernel
	Chunk   int // keys per split
	// Live selects how the splits follow the sequence's live KV length
	// (read from kv_len on the device, so the launch geometry stays that of
	// the capacity and graph replay holds):
	//   0: fixed CHUNK-key splits; an empty split writes a zero output and a
	//      neutral (max −inf, sum 0) pair; the combine reads every split.
	//   1: fixed CHUNK-key splits; an empty split writes only the neutral
	//      pair and exits; the combine reads only the live splits.
	//   2: as 1, with the live length spread over all splits: chunk =
	//      min(CHUNK, ⌈len/splits⌉ rounded up to 32, at least 32), so short contexts use
	//      every block instead of the first few.
	Live int
}

// DefaultDecodeArm is the arm used before tuning.
var DefaultDecodeArm = DecodeArm{Threads: 128, Chunk: 256}

// DecodeKnobs is the search space of DecodeArm.
var DecodeKnobs = []Knob{{"threads", []int{64, 128, 256}}, {"chunk", []int{64, 128, 256, 512, 1024}}}

// Validate reports whether a is well formed.
func (a DecodeArm) Validate() error {
	if a.Threads < 32 || a.Threads > 1024 || a.Threads%32 != 0 || a.Chunk < 32 || a.Chunk > 4096 || a.Live < 0 || a.Live > 2 {
		return fmt.Errorf("%w: decode attention arm %+v", ErrUnsupported, a)
	}
	return nil
}

// DecodeArms lists every valid DecodeArm of the search space.
func DecodeArms() []DecodeArm {
	return enumerate(DecodeKnobs, func(v map[string]int) DecodeArm { return DecodeArm{Threads: v["threads"], Chunk: v["chunk"]} }, DecodeArm.Validate)
}

// DecodeLiveKnobs is the search space of the live-length arms (Live 1
// and 2), tuned as family "attn_decode_live" so that the attn_decode space
// and its recorded entries stay as they are.
var DecodeLiveKnobs = []Knob{{"threads", []int{64, 128, 256}}, {"chunk", []int{64, 128, 256, 512, 1024}}, {"live", []int{1, 2}}}

// DefaultDecodeLiveArm is the live-length arm used before tuning.
var DefaultDecodeLiveArm = DecodeArm{Threads: 128, Chunk: 256, Live: 2}

// String is the arm's short name used in kernel names and tables.
func (a DecodeArm) String() string {
	if a.Live != 0 {
		return fmt.Sprintf("t%d_c%d_l%d", a.Threads, a.Chunk, a.Live)
	}
	return fmt.Sprintf("t%d_c%d", a.Threads, a.Chunk)
}

// liveChunk writes the device expression of the keys per split into
// "const int chunk": CHUNK, or for Live 2 the live length spread over the
// splits. The partial and the combine kernels share it.
func (a DecodeArm) liveChunk(w *Writer) {
	if a.Live == 2 {
		w.Line("const int chunk = min(CHUNK, max(32, ((len + splits - 1) / splits + 31) & ~31));")
		return
	}
	w.Line("const int chunk = CHUNK;")
}

// Splits returns the number of KV splits for a key length.
func (a DecodeArm) Splits(kvLen int) int { return max(1, ceilDiv(kvLen, a.Chunk)) }

// DecodeAttention returns the two kernels of flash-decoding for one query
// token per sequence. The partial kernel handles (query head, split, seq):
//
//	attn_part(const float* q, const cache_t* kc, const cache_t* vc,
//	          const int* kv_base, const int* kv_len, float* part_o, float* part_ml, int splits)
//
// writing the split's normalised output part_o [seq][head][split][HD] and
// its (max, sum) pair part_ml; keys of sequence s are cache rows
// kv_base[s] .. kv_base[s]+kv_len[s]-1. The combine kernel merges the splits
// by log-sum-exp into out [seq][HQ·HD]:
//
//	attn_combine(const float* part_o, const float* part_ml, const int* kv_len, float* out, int splits)
//
// splits is the launch-time split count, DecodeArm.Splits(Dims.KVLen).
func DecodeAttention(s AttnShape, arm DecodeArm) (partial, combine *Kernel, err error) {
	if err := s.validate(); err != nil {
		return nil, nil, err
	}
	if err := arm.Validate(); err != nil {
		return nil, nil, err
	}
	ct := cacheCType(s.Cache)
	pname := fmt.Sprintf("attn_part_%s_%s", s.tag(), arm)
	pparams := []Param{{"const float* __restrict__", "q"}, {"const " + ct + "* __restrict__", "kc"}, {"const " + ct + "* __restrict__", "vc"},
		{"const int* __restrict__", "kv_base"}, {"const int* __restrict__", "kv_len"}, {"float* __restrict__", "part_o"},
		{"float* __restrict__", "part_ml"}, {"int", "splits"}}
	nw := arm.Threads / 32
	psrc := source(fmt.Sprintf("split-KV decode attention, partials: %s, %v", s.tag(), arm), append(cacheHelpers(s.Cache), "warp", "pdl"), func(w *Writer) {
		s.defines(w)
		w.Linef("#define CHUNK %d", arm.Chunk)
		w.Linef("#define NW %d", nw)
		w.Blank()
		w.Emit(Func{Name: pname, Global: true, LaunchBounds: arm.Threads, Params: pparams, Body: func(w *Writer) {
			w.Line("__shared__ float qs[HD];")
			w.Line("__shared__ float sc[CHUNK];")
			w.Line("__shared__ float red[32];")
			w.Line("const int h = blockIdx.x, split = blockIdx.y, seq = blockIdx.z;")
			w.Line("const int kvh = h / GROUP;")
			w.Line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
			w.Line("pdl_wait();")
			w.Line("const int len = kv_len[seq];")
			if arm.Live == 0 {
				w.Line("const int j0 = split * CHUNK;")
				w.Line("const int n = min(CHUNK, len - j0);")
			} else {
				arm.liveChunk(w)
				w.Line("const int j0 = split * chunk;")
				w.Line("const int n = min(chunk, len - j0);")
			}
			w.Line("const size_t po = ((size_t)(seq * HQ + h) * splits + split);")
			w.If("n <= 0", func() {
				if arm.Live == 0 {
					w.For("d", "threadIdx.x", "HD", fmt.Sprint(arm.Threads), 0, func() { w.Line("part_o[po * HD + d] = 0.f;") })
				} else {
					w.Comment("past the live length: a neutral partial (the combine never reads its output)")
				}
				w.If("threadIdx.x == 0", func() {
					w.Linef("part_ml[2 * po] = %s;", cfloat(float32(math.Inf(-1))))
					w.Line("part_ml[2 * po + 1] = 0.f;")
				})
				w.Line("return;")
			})
			w.For("d", "threadIdx.x", "HD", fmt.Sprint(arm.Threads), 0, func() { w.Line("qs[d] = q[(size_t)seq * QSTRIDE + h * HD + d] * SCALE;") })
			w.Line("__syncthreads();")
			w.Line("const size_t row0 = (size_t)(kv_base[seq] + j0) * HKV * HD + kvh * HD;")
			w.Comment("scores: one warp per key")
			w.For("j", "warp", "n", "NW", 0, func() {
				w.Linef("const %s* kr = kc + row0 + (size_t)j * HKV * HD;", ct)
				w.Line("float a = 0.f;")
				w.For("d", "lane", "HD", "32", -1, func() { w.Linef("a += qs[d] * %s;", cacheLoad(s.Cache, "kr[d]")) })
				w.Line("a = warp_sum(a);")
				w.If("lane == 0", func() { w.Line("sc[j] = a;") })
			})
			w.Line("__syncthreads();")
			w.Linef("float mx = %s;", cfloat(float32(math.Inf(-1))))
			w.For("j", "threadIdx.x", "n", fmt.Sprint(arm.Threads), 0, func() { w.Line("mx = fmaxf(mx, sc[j]);") })
			blockReduce(w, "mx", "m", "max", arm.Threads)
			w.Line("__syncthreads();")
			w.Line("float l = 0.f;")
			w.For("j", "threadIdx.x", "n", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("const float p = expf(sc[j] - m);")
				w.Line("sc[j] = p;")
				w.Line("l += p;")
			})
			blockReduce(w, "l", "sum", "sum", arm.Threads)
			w.Comment("output: one thread per head dimension")
			w.For("d", "threadIdx.x", "HD", fmt.Sprint(arm.Threads), 0, func() {
				w.Line("float o = 0.f;")
				w.Linef("const %s* vr = vc + row0 + d;", ct)
				w.For("j", "0", "n", "1", 4, func() { w.Linef("o += sc[j] * %s;", cacheLoad(s.Cache, "vr[(size_t)j * HKV * HD]")) })
				w.Line("part_o[po * HD + d] = o / sum;")
			})
			w.If("threadIdx.x == 0", func() {
				w.Line("part_ml[2 * po] = m;")
				w.Line("part_ml[2 * po + 1] = sum;")
			})
			w.Line("pdl_launch();")
		}})
	})
	partial = &Kernel{Family: "attn_decode", Name: pname, Source: psrc, Params: pparams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(s.Heads, arm.Splits(d.KVLen), d.Seqs), Block: dim3(arm.Threads, 1, 1)}
	}}

	cname := fmt.Sprintf("attn_combine_%s_%s", s.tag(), arm)
	cparams := []Param{{"const float* __restrict__", "part_o"}, {"const float* __restrict__", "part_ml"}, {"const int* __restrict__", "kv_len"},
		{"float* __restrict__", "out"}, {"int", "splits"}}
	csrc := source(fmt.Sprintf("split-KV decode attention, combine: %s, %v", s.tag(), arm), []string{"types", "pdl"}, func(w *Writer) {
		s.defines(w)
		if arm.Live != 0 {
			w.Linef("#define CHUNK %d", arm.Chunk)
		}
		w.Blank()
		w.Emit(Func{Name: cname, Global: true, LaunchBounds: s.HeadDim, Params: cparams, Body: func(w *Writer) {
			w.Line("const int h = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;")
			w.Line("pdl_wait();")
			w.Line("const size_t p0 = (size_t)(seq * HQ + h) * splits;")
			live := "splits"
			if arm.Live != 0 {
				w.Line("const int len = kv_len[seq];")
				arm.liveChunk(w)
				w.Comment("only the splits holding keys; neutral partials (sum 0) are skipped as well")
				w.Line("const int live = min(splits, (len + chunk - 1) / chunk);")
				live = "live"
			}
			w.Linef("float m = %s;", cfloat(float32(math.Inf(-1))))
			w.For("i", "0", live, "1", 0, func() { w.Line("m = fmaxf(m, part_ml[2 * (p0 + i)]);") })
			w.Line("float num = 0.f, den = 0.f;")
			w.For("i", "0", live, "1", 0, func() {
				w.Line("const float l = part_ml[2 * (p0 + i) + 1];")
				w.If("l > 0.f", func() {
					w.Line("const float wgt = l * expf(part_ml[2 * (p0 + i)] - m);")
					w.Line("num += wgt * part_o[(p0 + i) * HD + d];")
					w.Line("den += wgt;")
				})
			})
			w.Line("out[(size_t)seq * HQ * HD + h * HD + d] = den > 0.f ? num / den : 0.f;")
			w.Line("pdl_launch();")
		}})
	})
	combine = &Kernel{Family: "attn_decode", Name: cname, Source: csrc, Params: cparams, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(s.Heads, d.Seqs, 1), Block: dim3(s.HeadDim, 1, 1)}
	}}
	return partial, combine, nil
}
