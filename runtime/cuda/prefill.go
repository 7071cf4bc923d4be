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
//
// Dequantising is a pass over every quantised weight at each prefill step
// (llama2-7b q4_k_m: 4 GB read, 13.5 GB of bf16 written, about 6 ms on
// an H100). Where the memory allows (BackendOptions.PrefillWeights,
// residentWeights), the bf16 rows are made once at load and kept: a step
// then multiplies them as they are, the same operands.

// blasPrefill is the arm's state on the device.
type blasPrefill struct {
	bl         *blas
	prods      map[int]*blasProduct    // by prefill kernel index
	wbuf, xbuf DevicePtr               // bf16 weights of the largest product, bf16 activations
	resident   map[DevicePtr]DevicePtr // a quantised weight's bf16 rows, kept from load
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
// weights and of the activations; and the weights it dequantises (by the
// prefill program's weight index, with their product) and their bf16
// bytes, what keeping them resident takes.
type prefillPlan struct {
	prods          map[int]*blasProduct
	wbytes, xbytes int
	deq            map[int]*blasProduct
	deqBytes       int64
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
	plan.deq = map[int]*blasProduct{}
	for _, l := range p.Launches {
		for _, ki := range []int{l.Kernel, l.One - 1, l.Large - 1, l.Wide - 1} {
			bp := plan.prods[ki]
			if ki < 0 || bp == nil || bp.deq == nil || len(l.Args) == 0 || l.Args[0].Kind != codegen.ArgWeight {
				continue
			}
			if _, seen := plan.deq[l.Args[0].Index]; !seen {
				plan.deq[l.Args[0].Index] = bp
				plan.deqBytes += 2 * int64(bp.shape.N) * int64(bp.shape.K)
			}
		}
	}
	return plan, nil
}

// residentWeights decides whether the plan's dequantised weights are kept
// resident: PrefillWeights "resident" yes, "dequant" no, and by default
// where their bf16 bytes are at most a quarter of what is left for the KV
// cache (left: free memory less everything else the backend needs), and
// fit beside the KV memory asked for (kvMemory, BackendOptions.KVMemory).
func residentWeights(mode string, deqBytes, left, kvMemory int64) (bool, error) {
	switch mode {
	case "resident":
		return deqBytes > 0, nil
	case "dequant":
		return false, nil
	case "":
		return deqBytes > 0 && 4*deqBytes <= left && (kvMemory <= 0 || deqBytes <= left-kvMemory), nil
	}
	return false, fmt.Errorf("%w: PrefillWeights %q: want resident, dequant or empty", ErrArg, mode)
}

// keepResident dequantises each of the plan's weights once (ws: the
// prefill program's device weights) into bf16 rows of its own, on s.
func (bpf *blasPrefill) keepResident(c *Ctx, b *Backend, plan *prefillPlan, ws []DevicePtr, s Stream) error {
	bpf.resident = map[DevicePtr]DevicePtr{}
	for wi, bp := range plan.deq {
		w := ws[wi]
		if _, done := bpf.resident[w]; done {
			continue
		}
		buf, err := b.alloc(c, 2*bp.shape.N*bp.shape.K)
		if err != nil {
			return err
		}
		if err := bp.dequant(c, w, buf, s); err != nil {
			return err
		}
		bpf.resident[w] = buf
	}
	return nil
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
	if b.opts.Numerics.Invariant() {
		bpf.bl.pinM = b.opts.PrefillTokens
	}
	return bpf, nil
}

// run queues the product bp of m rows: y (+)= x · Wᵀ. The helper kernels
// launch without programmatic dependent launch: they do not wait for the
// kernel before them, and the scratch they write may still be read by
// the previous product.
func (bpf *blasPrefill) run(c *Ctx, bp *blasProduct, w, x, y DevicePtr, m int, s Stream) error {
	if bp.deq != nil {
		if r, ok := bpf.resident[w]; ok {
			w = r
		} else {
			if err := bp.dequant(c, w, bpf.wbuf, s); err != nil {
				return err
			}
			w = bpf.wbuf
		}
	}
	g := bp.round.Launch(codegen.Dims{Tokens: m, Seqs: 1})
	if err := c.Launch(bp.fround, LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: s}, x, bpf.xbuf, int32(m)); err != nil {
		return fmt.Errorf("kernel %s: %w", bp.round.Name, err)
	}
	key := blasKey{m: m, n: bp.shape.N, k: bp.shape.K, residual: bp.shape.Residual, f16: bp.op == dtype.F16}
	if err := bpf.bl.matmul(key, w, bpf.xbuf, y, s); err != nil {
		return fmt.Errorf("prefill product %v %d×%d×%d: %w", bp.shape.Type, m, bp.shape.N, bp.shape.K, err)
	}
	return nil
}

// dequant queues the dequantisation of bp's weight w into bf16 rows at
// dst, on s.
func (bp *blasProduct) dequant(c *Ctx, w, dst DevicePtr, s Stream) error {
	g := bp.deq.Launch(codegen.Dims{Seqs: 1})
	if err := c.Launch(bp.fdeq, LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: s}, w, dst); err != nil {
		return fmt.Errorf("kernel %s: %w", bp.deq.Name, err)
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
