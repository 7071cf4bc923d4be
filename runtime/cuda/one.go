package cuda

import (
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
)

// A decode program lowered for two or more sequences runs its one-row
// steps with the one-row kernels but the batch's launches: the activation
// rows quantised by launches of their own, RoPE and the KV write apart
// from the QKV product (the epilogues that fuse them lost at batch,
// docs/AUTOTUNE.md). A one-sequence program fuses them: about a third
// fewer launches a layer. On the H100, llama2-7b q4_k_m, a server with
// --max-running 64 took 2.48 ms of device time a one-stream step, one
// with --max-running 1 2.29 ms (docs/PERFORMANCE.md, session 23). So a
// backend of two or more sequences also lowers a one-sequence decode
// program (Backend.one) and runs every one-row decode step on it, plain,
// graphed or pipelined alike. It shares the decode program's weights (its
// SwiGLU-output gate/up product reads the same [gate | up] rows,
// codegen.GateUpRow); a program that would need any weight of its own is
// not used. Not for the f16 class of --batch-invariant (one row must run
// the batch's kernels there), pipeline stages, or a compiled artifact
// that does not hold its kernels (one compiled before it; memra compile
// includes them, ArtifactKernels). The int8 class keeps it: its products
// are XQ 2 kernels of the same split and unroll in both programs, and
// each epilogue the one-sequence program fuses writes the floats of the
// launch it replaces (the quantising epilogues sum a group by XQuant's
// tree, warp_sum_up; RoPE rotates through rope_rot in both), so a lone
// sequence's tokens stay those it has in any batch.

// lowerOne returns the one-sequence decode program of a whole-model
// backend of opts beside decode, lowered from decode's graph g and options
// base, or nil where there is none (see above).
func lowerOne(g *ir.Graph, base codegen.LowerOptions, opts BackendOptions, decode *codegen.Program) (*codegen.Program, error) {
	if opts.MaxSeqs < 2 || opts.Numerics.Resolve() == NumericsF16 || opts.diag.noOne {
		return nil, nil
	}
	base.Class, base.MaxSeqs = codegen.Decode, 1
	base.RopeInProduct = !opts.diag.oneNoRope
	base.NoQuantOut |= opts.diag.oneNoQuantOut
	one, err := codegen.Lower(g, base)
	if err != nil {
		return nil, err
	}
	why := ""
	switch {
	case !sharesWeights(one, decode):
		why = "it needs weights of its own"
	case opts.Artifact != nil && !opts.Artifact.holds(one.Kernels):
		why = "the artifact in " + opts.Artifact.Dir + " does not hold its kernels (compiled before it: compile again to have it)"
	}
	if why != "" {
		if opts.Logf != nil {
			opts.Logf("no one-sequence decode program: %s; one-row steps run the decode program", why)
		}
		return nil, nil
	}
	return one, nil
}

// oneDiag are the GPU tests' handles on the one-sequence program, which
// find out which of its fusions parts it from the decode program: none
// at all (noOne), RoPE in the QKV products left to RopeKV (oneNoRope),
// and producers that quantise in their epilogues (oneNoQuantOut).
type oneDiag struct {
	noOne, oneNoRope bool
	oneNoQuantOut    codegen.QuantOuts
}

// sharesWeights reports whether every weight of p is one of q's.
func sharesWeights(p, q *codegen.Program) bool {
	have := map[string]bool{}
	for i := range q.Weights {
		have[weightKey(&q.Weights[i])] = true
	}
	for i := range p.Weights {
		if !have[weightKey(&p.Weights[i])] {
			return false
		}
	}
	return true
}

// decodeState is the program a decode step of S sequences runs.
func (b *Backend) decodeState(S int) *progState {
	if S == 1 && b.one != nil {
		return b.one
	}
	return b.progs[codegen.Decode]
}

// isDecode reports whether ps is a decode program.
func (b *Backend) isDecode(ps *progState) bool {
	return ps == b.progs[codegen.Decode] || (ps != nil && ps == b.one)
}
