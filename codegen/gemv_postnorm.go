package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir"
)

// A Gemma layer's post-norms in the products before them (XQEnds.PostNorm):
// in a one-sequence decode program the attention output and FFN down
// products end with the post-norm's work, done by the block that finishes
// its row's products last, so the layer launches no PostNormAddQuant.

// xqPostNormParams are the parameters of an XQ 2 product with
// XQEnds.PostNorm: the residual stream x the normalised rows are added
// to, the post-norm's weight pw, the next norm's weight nw and its
// quantised rows xo, and a ticket a block row (ArgTickets):
//
//	gemv_…_pnT(W, xq, y, int m, float* x, const float* pw, const float* nw, u8* xo, int* tickets)
var xqPostNormParams = append(slices.Clone(xqGlobalParams), Param{"float* __restrict__", "x"}, Param{"const float* __restrict__", "pw"},
	Param{"const float* __restrict__", "nw"}, Param{"u8* __restrict__", "xo"}, Param{"int* __restrict__", "tickets"})

// postNormFits reports why an XQ 2 product of n rows with arm cannot take
// e's PostNorm epilogue (nil if it can, or if e has none): it writes its
// rows plainly (no residual, no other epilogue, no output stride) and has
// at least the post-norm's threads, whose rows of n need at most
// xquantMaxLoads chunks of 8 a thread, as PostNormAddQuant's.
func (e XQEnds) postNormFits(n int, residual bool, arm GEMVArm, ystride int) error {
	if !e.PostNorm {
		return nil
	}
	tb := e.PostNormThreads
	if residual || ystride != 0 || e.QuantOut || e.SwiGLUOut || e.Rope || arm.XQ != 2 || tb < 32 || tb%32 != 0 || tb > arm.Threads ||
		n%32 != 0 || ceilDiv(n/8, tb) > xquantMaxLoads {
		return fmt.Errorf("%w: post-norm epilogue of %d threads for N %d, arm %v, residual %v, output stride %d",
			ErrUnsupported, tb, n, arm, residual, ystride)
	}
	return nil
}

// emitPostNormTail writes the end of a PostNorm product of n rows: each
// block takes a ticket of its block row once its results are stored and
// fenced; the block that takes the last sets the counter back to zero and,
// for each activation row of the block row, does PostNormAddQuant's work
// by its first PostNormThreads threads (the sums of PostNormAddQuant's
// block: emitPostNormAddRow) on the rows of h the grid wrote (read past
// L1): x += norm(h)·pw, then the next norm's x·nw quantised into xo.
func emitPostNormTail(w *Writer, n int, e XQEnds) {
	tb := e.PostNormThreads
	w.Comment("the post-norm and the next norm's quantisation, in the block that finishes its block row last")
	emitLastBlock(w, "tickets + blockIdx.y", "(int)gridDim.x", "this block's rows of h", func() {
		w.Comment("from here K, XR and SL are the post-norm's rows, as PostNormAddQuant's")
		emitRowDefines(w, n, tb)
		w.Linef("#define DIM %d", n)
		w.Linef("#define EPS %s", cfloat(e.PostNormEps))
		w.Line("const float* h = y; // the grid's rows")
		w.Line("const float* __restrict__ w = pw;")
		w.Line("#pragma unroll 1")
		w.Block("for (int j = 0; j < mrows; ++j)", func() {
			w.Line("const int row = m0 + j;")
			emitPostNormAddRow(w, tb, true, "row", "__ldcg")
			w.Line("__syncthreads(); // the row's x written before it is quantised")
			w.If(fmt.Sprintf("threadIdx.x < %d", tb), func() {
				emitNormRowQuant(w, "x + (size_t)row * K", "xo + (size_t)row * XR", tb, "")
			})
			w.Line("__syncthreads(); // the next row reuses red")
		})
	})
	w.Comment("the trigger after every write of the block, as the quantising epilogues have it")
	w.Line("pdl_launch();")
}

// postNormInProduct gives post-norm n (adding into residual y, its next
// norm's products taking XQ 2 rows: na) to the product launch that wrote
// its input h, when that is the last launch and a one-sequence program's
// plain XQ 2 product (one kernel for every width, h read by n alone): the
// launch's kernel becomes the PostNorm form (XQEnds.PostNorm with the
// post-norm kernel's threads, so x and the quantised rows are
// PostNormAddQuant's) and takes the norm's operands and a ticket a block
// row. It reports whether it did.
func (l *lowerer) postNormInProduct(n, add *ir.Node, h, y view, eps float32, na *normAfter) (bool, error) {
	i := len(l.p.Launches) - 1
	xl, ok := l.xqLaunches[i]
	if !ok || !l.tailOn(TailPostNorm) || l.o.Class != Decode || l.o.MaxSeqs != 1 || xl.y != h || xl.e.Rope || xl.arm.XQ != 2 ||
		xl.one != (GEMVArm{}) || xl.large != (GEMVArm{}) || len(l.users[n.Args[0].ID]) != 1 {
		return false, nil
	}
	e := xl.e
	e.PostNorm, e.PostNormEps, e.PostNormThreads = true, eps, l.arms.Block.Threads
	kern, err := l.optionalKernel(xl.gen(xl.arm, e))
	if err != nil || kern < 0 {
		return false, err
	}
	l.repacked[kern] = true
	width := XQRowBytes(h.width) / 4
	xq := view{buf: l.buffer("xq", n.Shape[0], width), width: width, stride: width}
	ln := &l.p.Launches[i]
	ln.Kernel = kern
	more := []Arg{bufArg(y), wArg(l.vectorOf(n.Args[1])), wArg(na.nw), bufArg(xq), l.ticketsArg(l.o.MaxTokens)} // a block row each
	l.liveAt(i, more)
	ln.Args = append(ln.Args, more...)
	ln.Nodes = append(ln.Nodes, n.ID, add.ID)
	l.preQuant[xqKey{x: y, pro: ProNorm, nw: na.nw}] = preQuant{xq: xq, launch: i, nodes: na.nodes}
	delete(l.xqLaunches, i)
	l.val[add.ID] = y
	l.done[add.ID] = true
	return true, nil
}
