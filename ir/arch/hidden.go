package arch

import (
	"fmt"

	"github.com/memra-ai/memra/ir"
)

// FinalNorm is the RMSNorm the whole model applies to the residual stream
// before its output head: the norm weight's tensor name and epsilon.
type FinalNorm struct {
	Weight string
	Eps    float64
}

// BuildHidden builds and verifies the graph of the whole model without its
// head: every layer, then hidden_out of the residual stream after the last
// layer for every token of the step (no last_tokens, no output norm, no
// logits). It is what embeddings are made of: the caller applies the
// returned final norm to the rows it pools, so the CPU reference and a
// GPU backend (whose lowering has no standalone 2-D norm) share one host
// implementation of the norm and the pooling. Passes are not run.
//
// The head is recognised by the decoder's tail, output(matmul(rms_norm(
// last_tokens(x)), W)); a family whose graph ends otherwise is refused
// with ErrHParams.
func BuildHidden(hp ir.HParams, w Weights) (*ir.Graph, FinalNorm, error) {
	g, err := Build(hp, w)
	if err != nil {
		return nil, FinalNorm{}, err
	}
	out := g.Result()
	if out == nil || out.Op != ir.OpOutput {
		return nil, FinalNorm{}, fmt.Errorf("arch %s: %w: the graph does not end with the logits' output", hp.Arch, ErrHParams)
	}
	mm := out.Arg(0)
	var norm, last *ir.Node
	if mm != nil && mm.Op == ir.OpMatmul {
		norm = mm.Arg(0)
	}
	if norm != nil && norm.Op == ir.OpRMSNorm {
		last = norm.Arg(0)
	}
	if last == nil || last.Op != ir.OpLastTokens || norm.Arg(1) == nil || norm.Arg(1).Op != ir.OpWeight {
		return nil, FinalNorm{}, fmt.Errorf("arch %s: %w: the head is not output(matmul(rms_norm(last_tokens(x))))", hp.Arch, ErrHParams)
	}
	fn := FinalNorm{Weight: norm.Arg(1).Str("name"), Eps: norm.Float("eps")}
	// Everything from last_tokens on is the head: its norm, the norm and
	// projection weights, the product and the output.
	for _, n := range g.Nodes[last.ID:] {
		switch n {
		case last, norm, mm, out:
		default:
			if n.Op != ir.OpWeight {
				return nil, FinalNorm{}, fmt.Errorf("arch %s: %w: node %%%d (%v) follows last_tokens", hp.Arch, ErrHParams, n.ID, n.Op)
			}
		}
	}
	x := last.Arg(0)
	g.Nodes = g.Nodes[:last.ID]
	g.Add(ir.OpHiddenOut, nil, x)
	if err := g.Err(); err != nil {
		return nil, FinalNorm{}, fmt.Errorf("arch %s: %w", hp.Arch, err)
	}
	if err := ir.Verify(g); err != nil {
		return nil, FinalNorm{}, fmt.Errorf("arch %s: %w", hp.Arch, err)
	}
	return g, fn, nil
}
