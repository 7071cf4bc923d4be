package codegen

import (
	"fmt"
	"math"
	"strings"
)

// The sampling kernel (Sample) chooses each sequence's next token from its
// logits on the device, in the order runtime.Sampler documents: the
// allowed-token mask, the logit bias, the repetition, presence and
// frequency penalties, then the argmax (temperature ≤ 0) or temperature,
// top-k, top-p, min-p and a draw. Its inputs are host-written buffers
// (SampleInput): one record a sequence (SampleRecord) and the pairs and
// mask words the records point into.

// SampleInput is one of the host-written buffers the sampling kernel
// reads; a launch argument of kind ArgSample names it by Index.
type SampleInput int

const (
	// SampleRecords [S][SampleRecordWords] u32: the sequences' records.
	SampleRecords SampleInput = iota
	// SampleBias: (id u32, bias f32) pairs, SampleRecord.BiasOff on.
	SampleBias
	// SamplePenalties: (id u32, count u32) pairs, SampleRecord.PenOff on.
	SamplePenalties
	// SampleMasks: u32 mask words (bit id%32 of word id/32 allows id),
	// SampleRecord.MaskOff on.
	SampleMasks
	// NumSampleInputs is the number of sampling inputs.
	NumSampleInputs
)

var sampleInputNames = [NumSampleInputs]string{"records", "bias", "penalties", "masks"}

// String names the input.
func (in SampleInput) String() string {
	if in < 0 || in >= NumSampleInputs {
		return fmt.Sprintf("sample%d", int(in))
	}
	return sampleInputNames[in]
}

// MaxSampleTop is the most top logprobs the kernel reports a sequence.
const MaxSampleTop = 20

// Words of a record: field at word sr*. The kernel's R_* defines are
// written from these.
const (
	srFlags     = 0
	srTopK      = 1
	srTopP      = 2
	srMinP      = 3
	srInvTemp   = 4
	srRepeat    = 5
	srPresence  = 6
	srFrequency = 7
	srSeedLo    = 8
	srSeedHi    = 9
	srIndexLo   = 10
	srIndexHi   = 11
	srBiasOff   = 12
	srBiasN     = 13
	srPenOff    = 14
	srPenN      = 15
	srMaskOff   = 16
	srMaskWords = 17
	srTopN      = 18
	// SampleRecordWords is the u32 words of one record (one reserved).
	SampleRecordWords = 20
)

// Record flags.
const (
	sfActive   = 1 << 0
	sfGreedy   = 1 << 1
	sfMasked   = 1 << 2
	sfLogprobs = 1 << 3
)

// Words of a sequence's output: field at word so*.
const (
	soToken    = 0
	soLogprob  = 1
	soTopN     = 2
	soTopIDs   = 4
	soTopProbs = soTopIDs + MaxSampleTop
	// SampleOutWords is the u32 words of one sequence's output.
	SampleOutWords = soTopProbs + MaxSampleTop
)

// Token codes of a sequence the kernel chose no token for.
const (
	// SampleNone: no candidate is left after the mask, bias and penalties
	// (runtime.ErrNoCandidates) while some raw logit is finite.
	SampleNone = -1
	// SampleNaN: the raw logits hold a NaN.
	SampleNaN = -2
	// SampleNoFinite: no candidate is left and no raw logit is finite.
	SampleNoFinite = -3
)

// SampleStream is the third word of the Philox counter: the sampling
// kernel's stream, apart from any other use of a request's seed.
const SampleStream = 0x73616d70 // "samp"

// SampleRecord is one sequence's sampling parameters as the kernel reads
// them (Encode). A zero record is inactive: the kernel leaves the
// sequence's output alone (padded sequences of a captured graph, entries
// that want no token).
type SampleRecord struct {
	Active   bool // choose a token for this sequence
	Greedy   bool // the argmax of the working logits (temperature ≤ 0)
	Masked   bool // only the tokens of the mask words may be chosen
	Logprobs bool // report the chosen token's logprob (of the raw logits)
	// TopK keeps the TopK most likely candidates (ties: lowest ids); ≤ 0
	// or at least the candidates: off.
	TopK int32
	// TopP keeps the most likely candidates whose probability reaches TopP
	// (ties: lowest ids); off unless 0 < TopP < 1.
	TopP float32
	// MinP drops candidates whose probability is below MinP × the
	// largest; ≤ 0: off.
	MinP float32
	// InvTemp is 1/temperature, computed on the host as runtime.Sampler
	// does (the kernel multiplies by it).
	InvTemp float32
	// Repeat is the repetition penalty (llama.cpp): a penalised token's
	// positive logit is divided by it, a negative one multiplied; off
	// unless > 0 and ≠ 1.
	Repeat float32
	// Presence and Frequency (OpenAI) are subtracted from the logit of a
	// penalised token generated n > 0 times as Presence + Frequency·n.
	Presence, Frequency float32
	// Seed is the Philox key of the sequence's random stream, Index the
	// token's index in it (the counter's low words): the same seed and
	// index draw the same number whatever else the step holds.
	Seed, Index uint64
	// BiasOff and BiasN: the sequence's logit bias is pairs
	// [BiasOff, BiasOff+BiasN) of SampleBias.
	BiasOff, BiasN uint32
	// PenOff and PenN: the tokens the penalties touch, with their counts
	// among the window's generated tokens (0: seen in the prompt only),
	// are pairs [PenOff, PenOff+PenN) of SamplePenalties; ids are unique.
	PenOff, PenN uint32
	// MaskOff and MaskWords: with Masked, the allowed tokens are words
	// [MaskOff, MaskOff+MaskWords) of SampleMasks; ids past them are not
	// allowed.
	MaskOff, MaskWords uint32
	// TopN is the top logprobs to report (0..MaxSampleTop), of the raw
	// logits, most likely first, ties by id.
	TopN int32
}

// Encode writes r into dst[:SampleRecordWords].
func (r *SampleRecord) Encode(dst []uint32) {
	dst = dst[:SampleRecordWords]
	clear(dst)
	var flags uint32
	for _, f := range []struct {
		on  bool
		bit uint32
	}{{r.Active, sfActive}, {r.Greedy, sfGreedy}, {r.Masked, sfMasked}, {r.Logprobs, sfLogprobs}} {
		if f.on {
			flags |= f.bit
		}
	}
	dst[srFlags] = flags
	dst[srTopK] = uint32(r.TopK)
	dst[srTopP] = math.Float32bits(r.TopP)
	dst[srMinP] = math.Float32bits(r.MinP)
	dst[srInvTemp] = math.Float32bits(r.InvTemp)
	dst[srRepeat] = math.Float32bits(r.Repeat)
	dst[srPresence] = math.Float32bits(r.Presence)
	dst[srFrequency] = math.Float32bits(r.Frequency)
	dst[srSeedLo], dst[srSeedHi] = uint32(r.Seed), uint32(r.Seed>>32)
	dst[srIndexLo], dst[srIndexHi] = uint32(r.Index), uint32(r.Index>>32)
	dst[srBiasOff], dst[srBiasN] = r.BiasOff, r.BiasN
	dst[srPenOff], dst[srPenN] = r.PenOff, r.PenN
	dst[srMaskOff], dst[srMaskWords] = r.MaskOff, r.MaskWords
	dst[srTopN] = uint32(r.TopN)
}

// DecodeSampleRecord reads a record Encode wrote.
func DecodeSampleRecord(src []uint32) SampleRecord {
	src = src[:SampleRecordWords]
	f := src[srFlags]
	return SampleRecord{
		Active: f&sfActive != 0, Greedy: f&sfGreedy != 0, Masked: f&sfMasked != 0, Logprobs: f&sfLogprobs != 0,
		TopK: int32(src[srTopK]), TopP: math.Float32frombits(src[srTopP]), MinP: math.Float32frombits(src[srMinP]),
		InvTemp: math.Float32frombits(src[srInvTemp]), Repeat: math.Float32frombits(src[srRepeat]),
		Presence: math.Float32frombits(src[srPresence]), Frequency: math.Float32frombits(src[srFrequency]),
		Seed: uint64(src[srSeedLo]) | uint64(src[srSeedHi])<<32, Index: uint64(src[srIndexLo]) | uint64(src[srIndexHi])<<32,
		BiasOff: src[srBiasOff], BiasN: src[srBiasN], PenOff: src[srPenOff], PenN: src[srPenN],
		MaskOff: src[srMaskOff], MaskWords: src[srMaskWords], TopN: int32(src[srTopN]),
	}
}

// SampleResult is one sequence's output as the kernel writes it.
type SampleResult struct {
	Token   int32   // the chosen token, or SampleNone, SampleNaN, SampleNoFinite
	Logprob float32 // the chosen token's logprob (SampleRecord.Logprobs)
	// TopIDs and TopLogprobs are the SampleRecord.TopN most likely tokens
	// of the raw logits, most likely first, ties by id.
	TopIDs      []int32
	TopLogprobs []float32
}

// DecodeSampleOut reads one sequence's SampleOutWords output words.
func DecodeSampleOut(src []uint32) SampleResult {
	src = src[:SampleOutWords]
	r := SampleResult{Token: int32(src[soToken]), Logprob: math.Float32frombits(src[soLogprob])}
	n := min(int(int32(src[soTopN])), MaxSampleTop)
	for j := range max(n, 0) {
		r.TopIDs = append(r.TopIDs, int32(src[soTopIDs+j]))
		r.TopLogprobs = append(r.TopLogprobs, math.Float32frombits(src[soTopProbs+j]))
	}
	return r
}

// DefaultSampleArm is the sampling kernel's arm: a block of 1024 threads a
// sequence keeps 32 warps' loads in flight over the vocabulary.
var DefaultSampleArm = BlockArm{Threads: 1024}

// SampleClass is the class of Sample over vocab logits, e.g. "v128256".
func SampleClass(vocab int) string { return fmt.Sprintf("v%d", vocab) }

// sampleU is the rounds of loads each lane has in flight in a pass.
const sampleU = 8

// samplePivots is the keys a search pass tests: each pass narrows the
// interval of 32-bit keys to a (samplePivots+1)th.
const samplePivots = 3

// sampleCompact is the most candidates a search takes into shared memory
// (compact_search, refSampler.compactSearch); more, and it searches the
// row.
const sampleCompact = 8192

// sampleCompactSpan is how far below the largest (scaled or raw) logit
// top-k's and the top logprobs' candidates reach: where the k largest are
// within it (a model's usually are), they are searched in shared memory.
const sampleCompactSpan float32 = 16

// sampleFxBits is the fixed-point scale of the weights: a candidate's
// weight is ⌊e·2^40⌋ for e = exp(y − ymax) ≤ 1, so sums over any
// vocabulary up to 2^23 fit 64 bits and are exact (no order dependence).
const sampleFxBits = 40

// sampleMaxVocab bounds the vocabulary of Sample (the weights' sums).
const sampleMaxVocab = 1 << 23

// SampleLayout is how one block of a Sample kernel covers a vocabulary:
// warp w owns the chunk of ids [w·Chunk, (w+1)·Chunk), visited in rounds
// of 32 consecutive ids (lane l takes id w·Chunk + 32r + l in round r),
// Rounds of them, a multiple of the loads in flight.
type SampleLayout struct {
	Vocab, Warps int
	Rounds       int // rounds of a warp's chunk
	Split        int // rounds of one chunk each warp takes when the block splits a chunk: ⌈Rounds/Warps⌉
}

// Chunk is the ids a warp owns.
func (l SampleLayout) Chunk() int { return 32 * l.Rounds }

// SampleLayoutOf returns the layout of Sample(vocab, arm).
func SampleLayoutOf(vocab int, arm BlockArm) SampleLayout {
	warps := arm.Threads / 32
	rounds := ceilDiv(ceilDiv(ceilDiv(vocab, 32), warps), sampleU) * sampleU
	return SampleLayout{Vocab: vocab, Warps: warps, Rounds: rounds, Split: ceilDiv(rounds, warps)}
}

// Sample returns the sampling kernel over rows of vocab logits:
//
//	sample(const float* logits, float* work, const u32* rec, const u32* bias,
//	       const u32* pen, const u32* mask, int* out, int rows)
//
// grid (rows), one block per sequence. work is [rows][vocab] floats of
// scratch (the working logits, then the survivors' weights); out is
// [rows][SampleOutWords]. A sequence whose record is not active is left
// alone. The logits are not modified.
//
// The top-k, top-p and top-N selections find their threshold by a search
// over 32-bit keys (samplePivots keys a pass over the row, counts or
// weights summed per pivot), then keep the elements above it and, of
// those equal to it, the lowest ids needed: the CPU sampler's order
// (logit, then id). Top-k and the top-N logprobs compare logits; top-p
// and min-p compare the float32 weights exp(y − ymax), so two candidates
// whose logits differ but whose weights round to the same float32 are
// ties there (resolved by id) where the CPU orders them by logit. The
// draw is exact integer arithmetic over fixed-point weights: a 64-bit
// Philox4x32-10 number (key: the seed; counter: the token index and
// SampleStream) picks a point of [0, the survivors' weight), and the
// token is the survivor where the running weight in id order passes it.
func Sample(vocab int, arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	if vocab <= 0 || vocab > sampleMaxVocab {
		return nil, fmt.Errorf("%w: sampling over a vocabulary of %d", ErrUnsupported, vocab)
	}
	lay := SampleLayoutOf(vocab, arm)
	name := fmt.Sprintf("sample_v%d_%s", vocab, arm)
	params := []Param{{"const float*", "logits"}, {"float*", "work"}, {"const u32* __restrict__", "rec"},
		{"const u32* __restrict__", "bias"}, {"const u32* __restrict__", "pen"}, {"const u32* __restrict__", "mask"},
		{"int* __restrict__", "out"}, {"int", "rows"}}
	src := source(fmt.Sprintf("sample: vocab %d, %v", vocab, arm), []string{"types", "warp", "pdl"}, func(w *Writer) {
		sampleDefines(w, lay, arm)
		sampleHelpers(w)
		sampleSearch(w)
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: sampleBody})
	})
	return &Kernel{Family: "sample", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(d.Tokens, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// lines writes a block of C, one source line a line, at w's indentation.
func lines(w *Writer, src string) {
	for _, l := range strings.Split(strings.Trim(src, "\n"), "\n") {
		w.Line(l)
	}
}

func sampleDefines(w *Writer, lay SampleLayout, arm BlockArm) {
	w.Line("typedef unsigned long long u64;")
	w.Blank()
	w.Linef("#define VOCAB %d", lay.Vocab)
	w.Linef("#define NT %d // threads a block", arm.Threads)
	w.Linef("#define NW %d // warps a block", lay.Warps)
	w.Linef("#define ROUNDS %d // rounds of 32 ids of a warp's chunk", lay.Rounds)
	w.Line("#define CHUNK (ROUNDS * 32) // ids of a warp's chunk")
	w.Linef("#define SPLIT %d // rounds of one chunk a warp takes when the block splits it", lay.Split)
	w.Linef("#define SAMPLE_U %d // rounds of loads in flight", sampleU)
	w.Linef("#define PIV %d // keys a search pass tests", samplePivots)
	w.Linef("#define COMPACT %d // a search's candidates in shared memory (compact_search)", sampleCompact)
	w.Linef("#define COMPACT_SPAN %s // top-k's and top logprobs' candidates: within this of the largest", cfloat(sampleCompactSpan))
	w.Linef("#define FX_ONE %s // the fixed-point weight of exp(0)", cfloat(float32(uint64(1)<<sampleFxBits)))
	w.Line("#define NEG_INF __int_as_float(0xff800000)")
	w.Line("#define FULL 0xffffffffu")
	for _, d := range []struct {
		name string
		v    int
	}{{"REC_WORDS", SampleRecordWords}, {"R_FLAGS", srFlags}, {"R_TOP_K", srTopK}, {"R_TOP_P", srTopP}, {"R_MIN_P", srMinP},
		{"R_INV_T", srInvTemp}, {"R_REPEAT", srRepeat}, {"R_PRESENCE", srPresence}, {"R_FREQUENCY", srFrequency},
		{"R_SEED_LO", srSeedLo}, {"R_SEED_HI", srSeedHi}, {"R_INDEX_LO", srIndexLo}, {"R_INDEX_HI", srIndexHi},
		{"R_BIAS_OFF", srBiasOff}, {"R_BIAS_N", srBiasN}, {"R_PEN_OFF", srPenOff}, {"R_PEN_N", srPenN},
		{"R_MASK_OFF", srMaskOff}, {"R_MASK_WORDS", srMaskWords}, {"R_TOP_N", srTopN},
		{"F_ACTIVE", sfActive}, {"F_GREEDY", sfGreedy}, {"F_MASKED", sfMasked}, {"F_LOGPROBS", sfLogprobs},
		{"OUT_WORDS", SampleOutWords}, {"O_TOKEN", soToken}, {"O_LOGPROB", soLogprob}, {"O_TOP_N", soTopN},
		{"O_TOP_IDS", soTopIDs}, {"O_TOP_LPS", soTopProbs}, {"MAX_TOP", MaxSampleTop},
		{"SAMPLE_NONE", SampleNone}, {"SAMPLE_NAN", SampleNaN}, {"SAMPLE_NO_FINITE", SampleNoFinite},
		{"STREAM", SampleStream},
		{"KEY_Y", keyY}, {"KEY_RAW", keyRaw}, {"KEY_W", keyW}, {"RANK_TIE", rankTie}, {"RANK_DRAW", rankDraw}} {
		w.Linef("#define %s %d", d.name, d.v)
	}
	w.Blank()
}

// Key modes of the sampling kernel's passes (sample_key): the row a pass
// reads and what an element's key and quantity are.
const (
	keyY   = 0 // working logits: the temperature-scaled logit of a candidate, count 1
	keyRaw = 1 // raw logits: the logit, count 1
	keyW   = 2 // weights: the bits of e ≥ 0, quantity ⌊e·2^40⌋
)

// What find_rank counts: the ties of a search (RANK_TIE) or the drawn
// weights (RANK_DRAW).
const (
	rankTie  = 0
	rankDraw = 1
)

// sampleLoop writes a pass of the calling thread over its elements of the
// warp's chunk of row p (base and lane in scope): SAMPLE_U rounds of loads
// in flight, then body for each element, ids increasing, with v its value
// and i its id.
func sampleLoop(w *Writer, p string, body func()) {
	w.For("r0", "0", "ROUNDS", "SAMPLE_U", 0, func() {
		w.Line("float vs[SAMPLE_U];")
		w.For("u", "0", "SAMPLE_U", "1", -1, func() {
			w.Line("const int i = base + (r0 + u) * 32 + lane;")
			w.Linef("vs[u] = i < VOCAB ? %s[i] : 0.f;", p)
		})
		w.For("u", "0", "SAMPLE_U", "1", -1, func() {
			w.Line("const int i = base + (r0 + u) * 32 + lane;")
			w.If("i < VOCAB", func() {
				w.Line("const float v = vs[u];")
				body()
			})
		})
	})
}
