package cuda

import (
	"context"
	"fmt"
	"math"

	"github.com/memra-ai/memra/runtime"
)

// ParityReport compares two backends run side by side over the same steps.
type ParityReport struct {
	Seqs, Steps int
	// Mismatches counts the (sequence, step) pairs whose greedy token (the
	// argmax of the logits) differs between the backends.
	Mismatches int
	// MaxGap is, over the mismatches, the largest margin by which the
	// reference preferred its token to the one chosen here: how far from a
	// tie the worst disagreement was (0 without mismatches).
	MaxGap float64
	// MaxGapSigma is, over the mismatches, the largest ratio of that
	// margin to the RMS difference of the two backends' logits at the same
	// step: how far outside the step's own numerical noise the worst
	// disagreement was (0 without mismatches).
	MaxGapSigma float64
	// MinCosine is the smallest cosine similarity of two logit rows.
	MinCosine float64
	// Tokens are the reference's greedy tokens per sequence.
	Tokens [][]int32
	// Flips are the disagreements, in order.
	Flips []Flip
}

// Flip is one greedy disagreement: the reference's margin for its token
// over the one chosen here, and the RMS difference of the step's logits.
type Flip struct {
	Seq, Step int
	Gap, RMS  float64
}

// Sigma is the flip's margin in units of the step's RMS logit difference
// (+Inf where the logits agree to the last bit elsewhere).
func (f Flip) Sigma() float64 {
	if f.RMS == 0 {
		return math.Inf(1)
	}
	return f.Gap / f.RMS
}

// Pass reports whether every cosine reached minCos and every greedy token
// agreed, except near-ties: disagreements where the reference's own logits
// of the two tokens differ by at most tieTol, or by at most tieSigma times
// the RMS difference of the two backends' logits at that step (a flip
// inside the numerical class's own noise; zeros demand every token).
func (r ParityReport) Pass(minCos, tieTol, tieSigma float64) bool {
	if r.MinCosine < minCos {
		return false
	}
	for _, f := range r.Flips {
		if f.Gap > tieTol && f.Gap > tieSigma*f.RMS {
			return false
		}
	}
	return true
}

// Parity runs the prompts (one sequence each, ids from firstSeq) as one
// batch through ref and got, then steps-1 decode steps feeding both the
// reference's greedy token (teacher forcing, so one near-tie does not send
// the two down different paths), and compares the logits of every
// sequence at every step. Both backends' sequences are freed at the end.
func Parity(ctx context.Context, ref, got runtime.Backend, prompts [][]int32, steps int, firstSeq runtime.SeqID) (ParityReport, error) {
	rep := ParityReport{Seqs: len(prompts), Steps: steps, MinCosine: 1, Tokens: make([][]int32, len(prompts))}
	batch := make([]runtime.SeqStep, len(prompts))
	for i, p := range prompts {
		batch[i] = runtime.SeqStep{Seq: firstSeq + runtime.SeqID(i), Tokens: p, Logits: true}
	}
	defer func() {
		for i := range prompts {
			ref.Free(firstSeq + runtime.SeqID(i))
			got.Free(firstSeq + runtime.SeqID(i))
		}
	}()
	saved := make([][]float32, len(prompts))
	for step := 0; step < steps; step++ {
		rl, err := ref.Step(ctx, batch)
		if err != nil {
			return rep, fmt.Errorf("reference step %d: %w", step, err)
		}
		for i, l := range rl {
			saved[i] = append(saved[i][:0], l...)
		}
		gl, err := got.Step(ctx, batch)
		if err != nil {
			return rep, fmt.Errorf("step %d: %w", step, err)
		}
		for i := range batch {
			if len(saved[i]) == 0 || len(gl[i]) != len(saved[i]) {
				return rep, fmt.Errorf("step %d sequence %d: %d logits, reference %d", step, i, len(gl[i]), len(saved[i]))
			}
			rep.MinCosine = math.Min(rep.MinCosine, runtime.Cosine(saved[i], gl[i]))
			r, g := runtime.Argmax(saved[i]), runtime.Argmax(gl[i])
			if r != g {
				f := Flip{Seq: i, Step: step, Gap: float64(saved[i][r] - saved[i][g]), RMS: rmsDiff(saved[i], gl[i])}
				rep.Mismatches++
				rep.Flips = append(rep.Flips, f)
				rep.MaxGap = math.Max(rep.MaxGap, f.Gap)
				rep.MaxGapSigma = math.Max(rep.MaxGapSigma, f.Sigma())
			}
			rep.Tokens[i] = append(rep.Tokens[i], r)
			batch[i].Pos += len(batch[i].Tokens)
			batch[i].Tokens = []int32{r}
		}
	}
	return rep, nil
}

// rmsDiff is the root mean square of a - b.
func rmsDiff(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s / float64(max(1, len(a))))
}
