package cuda

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// Per-sequence capacities of the sampling inputs (device buffers sized at
// load for MaxSeqs sequences); an entry whose data exceeds them is
// sampled on the host from its logits.
const (
	// SampleBiasCap is the logit bias entries of a sequence (OpenAI's
	// limit).
	SampleBiasCap = 300
	// SamplePenaltyCap is the distinct tokens the penalties of a sequence
	// may touch: the window's distinct tokens (the default window is 64).
	SamplePenaltyCap = 4096
)

// stepMode is what a step returns: logits, argmaxes, or sampled tokens.
type stepMode uint8

const (
	stepLogits stepMode = iota
	stepGreedy
	stepSample
)

// samplePack is the host side of the sampling inputs of one launch
// sequence: the records of its sequences and the bias pairs, penalty
// pairs and mask words they point into, each uploaded in one copy.
type samplePack struct {
	maskWords int // u32 mask words of a sequence: the vocabulary's
	rec       []uint32
	bias      []uint32
	pen       []uint32
	mask      []uint32
	active    []bool // by sequence: its record is active
}

func newSamplePack(vocab int) samplePack { return samplePack{maskWords: (vocab + 31) / 32} }

// fits reports whether d fits a sequence's share of the device buffers.
func (p *samplePack) fits(d *runtime.DeviceSampling) bool {
	return len(d.Bias) <= SampleBiasCap && len(d.Penalties) <= SamplePenaltyCap &&
		d.TopLogprobs >= 0 && d.TopLogprobs <= codegen.MaxSampleTop
}

// reset starts a launch sequence of rows records, all inactive.
func (p *samplePack) reset(rows int) {
	p.rec = append(p.rec[:0], make([]uint32, rows*codegen.SampleRecordWords)...)
	p.active = append(p.active[:0], make([]bool, rows)...)
	p.bias, p.pen, p.mask = p.bias[:0], p.pen[:0], p.mask[:0]
}

// set makes sequence s's record active for d, which fits.
func (p *samplePack) set(s int, d *runtime.DeviceSampling) {
	sp := d.Params
	r := codegen.SampleRecord{
		Active:   true,
		Greedy:   !(sp.Temperature > 0), // ≤ 0 or NaN, as runtime.Sampler
		Logprobs: d.Logprobs,
		TopK:     int32(min(max(sp.TopK, 0), math.MaxInt32)),
		TopP:     sp.TopP, MinP: sp.MinP,
		Repeat: sp.RepeatPenalty, Presence: sp.PresencePenalty, Frequency: sp.FrequencyPenalty,
		Seed: d.Seed, Index: d.Index, TopN: int32(d.TopLogprobs),
	}
	if !r.Greedy {
		r.InvTemp = 1 / sp.Temperature
	}
	r.BiasOff, r.BiasN = uint32(len(p.bias)/2), uint32(len(d.Bias))
	for _, b := range d.Bias {
		p.bias = append(p.bias, uint32(b.Token), math.Float32bits(b.Bias))
	}
	r.PenOff, r.PenN = uint32(len(p.pen)/2), uint32(len(d.Penalties))
	for _, c := range d.Penalties {
		p.pen = append(p.pen, uint32(c.Token), uint32(c.Count))
	}
	if d.Masked {
		r.Masked, r.MaskOff = true, uint32(len(p.mask))
		for _, w := range d.Mask {
			if len(p.mask)-int(r.MaskOff) >= p.maskWords {
				break
			}
			p.mask = append(p.mask, uint32(w), uint32(w>>32))
		}
		p.mask = p.mask[:min(len(p.mask), int(r.MaskOff)+p.maskWords)]
		r.MaskWords = uint32(len(p.mask)) - r.MaskOff
	}
	r.Encode(p.rec[s*codegen.SampleRecordWords:])
	p.active[s] = true
}

// pack prepares the sampling inputs of a launch sequence over pieces
// padded to rowsS sequences: a record for each piece that wants a token
// and has parameters that fit (stepSample), inactive records for the
// others, for the padding and for any row an earlier launch sequence left
// active (b.recLive): the sampling launch runs in every step.
func (b *Backend) pack(pieces []piece, rowsS int, mode stepMode) {
	rows := rowsS
	if mode != stepSample {
		rows = 0
	}
	b.spack.reset(max(rows, b.recLive))
	if mode == stepSample {
		for s, p := range pieces {
			if d := b.params[p.entry]; p.logits && d != nil && b.spack.fits(d) {
				b.spack.set(s, d)
			}
		}
	}
	b.recLive = 0
	for s, on := range b.spack.active {
		if on {
			b.recLive = s + 1
		}
	}
}

// samplingBytes returns the packed sampling inputs, by codegen.SampleInput.
func (b *Backend) samplingBytes() [codegen.NumSampleInputs][]byte {
	var out [codegen.NumSampleInputs][]byte
	out[codegen.SampleRecords] = u32AsBytes(b.spack.rec)
	out[codegen.SampleBias] = u32AsBytes(b.spack.bias)
	out[codegen.SamplePenalties] = u32AsBytes(b.spack.pen)
	out[codegen.SampleMasks] = u32AsBytes(b.spack.mask)
	return out
}

// sampleBytes returns the device bytes of each sampling input for
// maxSeqs sequences over a vocabulary of vocab tokens.
func sampleBytes(maxSeqs, vocab int) [codegen.NumSampleInputs]int {
	return [codegen.NumSampleInputs]int{
		codegen.SampleRecords:   4 * maxSeqs * codegen.SampleRecordWords,
		codegen.SampleBias:      8 * maxSeqs * SampleBiasCap,
		codegen.SamplePenalties: 8 * maxSeqs * SamplePenaltyCap,
		codegen.SampleMasks:     4 * maxSeqs * ((vocab + 31) / 32),
	}
}

// unpackSampled turns the sampling outputs of pieces (out: [S][SampleOutWords])
// into b.sampled, the pieces whose records were active.
func (b *Backend) unpackSampled(pieces []piece, out []uint32, vocab int) {
	for s, p := range pieces {
		if !b.spack.active[s] {
			continue
		}
		b.sampled[p.entry] = b.sampledOf(out[s*codegen.SampleOutWords:], vocab)
	}
}

// sampledOf is the choice a sequence's sampling output row holds.
func (b *Backend) sampledOf(row []uint32, vocab int) runtime.Sampled {
	r := codegen.DecodeSampleOut(row)
	d := runtime.Sampled{Token: b.tokenOf(r.Token, vocab), Logprob: r.Logprob}
	for j, id := range r.TopIDs {
		d.Top = append(d.Top, runtime.TokenLogprob{Token: id, Logprob: r.TopLogprobs[j]})
	}
	return d
}

// StepSample runs one forward pass and chooses on the device the next
// token of each entry whose params are set and fit the sampling buffers
// (SampleBiasCap, SamplePenaltyCap); the other entries that want logits
// get them. See runtime.SamplingStepper.
func (b *Backend) StepSample(ctx context.Context, batch []runtime.SeqStep, params []*runtime.DeviceSampling) ([]runtime.Sampled, error) {
	if len(params) != len(batch) {
		return nil, fmt.Errorf("%w: %d sampling parameters for %d entries", ErrBatch, len(params), len(batch))
	}
	b.params = params
	defer func() { b.params = nil }()
	if err := b.step(ctx, batch, stepSample); err != nil {
		return nil, err
	}
	return b.sampled, nil
}

func u32AsBytes(v []uint32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}
