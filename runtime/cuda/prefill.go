package cuda

import (
	"errors"
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
	op           dtype.Type      // the operands' type: BF16, or F16 for f16 weights
	deq, round   *codegen.Kernel // deq nil for bf16 and f16 weights
	fdeq, fround Function
}

// blasPlanProducts lists the prefill program's products the arm runs and
// the helper kernels they need, with the scratch bytes of the weights and
// activations.
func blasPlanProducts(p *codegen.Program, maxTokens int) (map[int]*blasProduct, int, int, error) {
	prods := map[int]*blasProduct{}
	wbytes, xbytes := 0, 0
	for i, k := range p.Kernels {
		s := k.Product
		if k.Family != "mma" || s == nil {
			continue
		}
		bp := &blasProduct{shape: *s, op: dtype.BF16}
		var err error
		if s.Type == dtype.F16 {
			bp.op = dtype.F16
		} else if s.Type != dtype.BF16 {
			if bp.deq, err = codegen.DequantBF16(s.Type, s.N, s.K); err != nil {
				return nil, 0, 0, err
			}
			wbytes = max(wbytes, 2*s.N*s.K)
		}
		if bp.round, err = codegen.RoundHalf(bp.op, s.K); err != nil {
			return nil, 0, 0, err
		}
		xbytes = max(xbytes, 2*maxTokens*s.K)
		prods[i] = bp
	}
	return prods, wbytes, xbytes, nil
}

// blasScratchBytes is the device memory the arm adds for a prefill program.
func blasScratchBytes(p *codegen.Program, maxTokens int) int64 {
	prods, w, x, err := blasPlanProducts(p, maxTokens)
	if err != nil || len(prods) == 0 {
		return 0
	}
	return alignBytes(int64(w)) + alignBytes(int64(x)) + BLASWorkspace
}

// newBLASPrefill compiles and loads the helper kernels (through the
// backend's NVRTC cache) and allocates the scratch buffers and workspace.
func (b *Backend) newBLASPrefill(c *Ctx, target string) (*blasPrefill, error) {
	prods, wbytes, xbytes, err := blasPlanProducts(b.progs[codegen.Prefill].p, b.opts.PrefillTokens)
	if err != nil || len(prods) == 0 { // no tensor-core products (the exact configuration's GEMV prefill)
		return nil, err
	}
	nv, err := LoadNVRTC()
	if err != nil {
		return nil, err
	}
	cache, err := NewCache(b.opts.CacheDir, nv)
	if err != nil {
		return nil, err
	}
	fns := map[string]Function{}
	fn := func(k *codegen.Kernel) (Function, error) {
		if f, ok := fns[k.Name]; ok {
			return f, nil
		}
		img, _, err := cache.Compile(k.Source, k.Name+".cu", target, nil)
		if err != nil {
			return 0, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
		mod, err := c.LoadModule(img)
		if err != nil {
			return 0, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
		b.modules = append(b.modules, mod)
		f, err := c.Function(mod, k.Name)
		if err != nil {
			return 0, err
		}
		fns[k.Name] = f
		return f, nil
	}
	for _, bp := range prods {
		if bp.deq != nil {
			if bp.fdeq, err = fn(bp.deq); err != nil {
				return nil, err
			}
		}
		if bp.fround, err = fn(bp.round); err != nil {
			return nil, err
		}
	}
	bpf := &blasPrefill{prods: prods}
	if bpf.wbuf, err = b.alloc(c, wbytes); err != nil {
		return nil, err
	}
	if bpf.xbuf, err = b.alloc(c, xbytes); err != nil {
		return nil, err
	}
	ws, err := b.alloc(c, BLASWorkspace)
	if err != nil {
		return nil, err
	}
	if bpf.bl, err = newBLAS(ws); err != nil {
		return nil, err
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
	return errors.Join(bpf.bl.close())
}
