package cuda

import (
	"fmt"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// The cuBLASLt arm of the prefill products (BackendOptions.PrefillBLAS):
// each launch of a MatMulMMA kernel in the prefill program becomes three
// steps on the same stream: the weights dequantised to bf16 rows in a
// scratch buffer (codegen.DequantBF16; bf16 weights are used as they are),
// the activations rounded to bf16 (codegen.RoundHalf), and cuBLASLt's
// product with f32 accumulation into the same output (added to it for a
// residual product). The operands are bit for bit those MatMulMMA
// multiplies, so the two arms differ only in the order of the f32 sums.
// F16 weights are the exception: they are multiplied as they are, against
// activations rounded to f16 (finer than bf16, with f16's range), which
// saves rewriting every weight at each prefill.

// blasPrefill is the arm's state on the device.
type blasPrefill struct {
	bl         *blas
	prods      map[int]*blasProduct // by prefill kernel index
	wbuf, xbuf DevicePtr            // bf16 weights of the largest product, bf16 activations
}

// blasProduct is one product kernel's replacement.
type blasProduct struct {
	shape        codegen.ProductShape
	op           dtype.Type      // the operands' type (codegen.BLASOperands)
	deq, round   *codegen.Kernel // deq nil for bf16 and f16 weights
	fdeq, fround Function
}

// prefillPlan is the arm's plan of a prefill program: the products it runs,
// by kernel index, and the scratch bytes of the largest product's bf16
// weights and of the activations.
type prefillPlan struct {
	prods          map[int]*blasProduct
	wbytes, xbytes int
}

// planPrefill lists the prefill program's products the arm runs and the
// helper kernels they need.
func planPrefill(p *codegen.Program, maxTokens int) (*prefillPlan, error) {
	plan := &prefillPlan{prods: map[int]*blasProduct{}}
	for i, k := range p.Kernels {
		s := k.Product
		if k.Family != "mma" || s == nil {
			continue
		}
		op, dequant := codegen.BLASOperands(s.Type)
		bp := &blasProduct{shape: *s, op: op}
		var err error
		if dequant {
			if bp.deq, err = codegen.DequantBF16(s.Type, s.N, s.K); err != nil {
				return nil, err
			}
			plan.wbytes = max(plan.wbytes, 2*s.N*s.K)
		}
		if bp.round, err = codegen.RoundHalf(op, s.K); err != nil {
			return nil, err
		}
		plan.xbytes = max(plan.xbytes, 2*maxTokens*s.K)
		plan.prods[i] = bp
	}
	return plan, nil
}

// bytes is the device memory the arm adds: the scratch and the workspace.
func (p *prefillPlan) bytes() int64 {
	return alignBytes(int64(p.wbytes)) + alignBytes(int64(p.xbytes)) + BLASWorkspace
}

// kernels lists the helper kernels of the plan's products, for the
// backend to compile with the programs' own.
func (p *prefillPlan) kernels() []*codegen.Kernel {
	var ks []*codegen.Kernel
	for _, bp := range p.prods {
		if bp.deq != nil {
			ks = append(ks, bp.deq)
		}
		ks = append(ks, bp.round)
	}
	return ks
}

// newBLASPrefill resolves the plan's helper kernels in images (compiled
// with the programs') and allocates the scratch buffers and workspace.
func (b *Backend) newBLASPrefill(c *Ctx, plan *prefillPlan, images map[string][]byte) (*blasPrefill, error) {
	fns := map[string]Function{}
	var err error
	for _, bp := range plan.prods {
		if bp.deq != nil {
			if bp.fdeq, err = b.function(c, images, bp.deq, fns); err != nil {
				return nil, err
			}
		}
		if bp.fround, err = b.function(c, images, bp.round, fns); err != nil {
			return nil, err
		}
	}
	bpf := &blasPrefill{prods: plan.prods}
	if bpf.wbuf, err = b.alloc(c, plan.wbytes); err != nil {
		return nil, err
	}
	if bpf.xbuf, err = b.alloc(c, plan.xbytes); err != nil {
		return nil, err
	}
	ws, err := b.alloc(c, BLASWorkspace)
	if err != nil {
		return nil, err
	}
	if bpf.bl, err = newBLAS(ws); err != nil {
		return nil, err
	}
	if b.opts.BatchInvariant {
		bpf.bl.pinM = b.opts.PrefillTokens
	}
	return bpf, nil
}

// run queues the product bp of m rows: y (+)= x · Wᵀ. The helper kernels
// launch without programmatic dependent launch: they do not wait for the
// kernel before them, and the scratch they write may still be read by
// the previous product.
func (bpf *blasPrefill) run(c *Ctx, bp *blasProduct, w, x, y DevicePtr, m int, s Stream) error {
	d := codegen.Dims{Tokens: m, Seqs: 1}
	if bp.deq != nil {
		g := bp.deq.Launch(d)
		if err := c.Launch(bp.fdeq, LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: s}, w, bpf.wbuf); err != nil {
			return fmt.Errorf("kernel %s: %w", bp.deq.Name, err)
		}
		w = bpf.wbuf
	}
	g := bp.round.Launch(d)
	if err := c.Launch(bp.fround, LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: s}, x, bpf.xbuf, int32(m)); err != nil {
		return fmt.Errorf("kernel %s: %w", bp.round.Name, err)
	}
	key := blasKey{m: m, n: bp.shape.N, k: bp.shape.K, residual: bp.shape.Residual, f16: bp.op == dtype.F16}
	if err := bpf.bl.matmul(key, w, bpf.xbuf, y, s); err != nil {
		return fmt.Errorf("prefill product %v %d×%d×%d: %w", bp.shape.Type, m, bp.shape.N, bp.shape.K, err)
	}
	return nil
}

// blasProduct returns the cuBLASLt replacement of kernel ki of ps (the
// prefill or the embedding program), or nil where it runs as generated.
func (b *Backend) blasProduct(ps *progState, ki int) *blasProduct {
	switch {
	case b.bpf == nil:
		return nil
	case ps == b.progs[codegen.Prefill]:
		return b.bpf.prods[ki]
	case b.emb != nil && ps == b.emb.ps:
		return b.emb.blas[ki]
	}
	return nil
}

// PrefillArm names how the prefill program's products run: "gemv" (the
// exact configuration's float GEMV), "blas" (cuBLASLt) or "mma" (the
// generated tensor-core product).
func (b *Backend) PrefillArm() string {
	switch {
	case b.opts.PrefillGEMV:
		return "gemv"
	case b.bpf != nil:
		return "blas"
	}
	return "mma"
}

// close releases the cuBLASLt handle and plans (the buffers are the backend's).
func (bpf *blasPrefill) close() error {
	if bpf == nil || bpf.bl == nil {
		return nil
	}
	return bpf.bl.close()
}
