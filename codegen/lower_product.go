package codegen

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// One product of the decode and prefill programs: its kernel and arms
// (one row, batch, large, wide), its int8 or f16 activation rows and its
// fused prologue and epilogues.

// roundUp32 rounds n up to a multiple of 32.
func roundUp32(n int) int { return (n + 31) / 32 * 32 }

// floatType reports whether rows of t can be padded with zero elements.
func floatType(t dtype.Type) bool { return t == dtype.F32 || t == dtype.F16 || t == dtype.BF16 }

// feedsSwiGLU reports whether n (or its bias epilogue) is an operand of a swiglu.
func (l *lowerer) feedsSwiGLU(n *ir.Node) bool {
	for _, u := range l.users[n.ID] {
		if u.Op == ir.OpSwiGLU || (u.Op == ir.OpBiasAdd && l.feedsSwiGLU(u)) {
			return true
		}
	}
	return false
}

// epilogue returns the epilogue node of product mm (its only user, in its
// fusion group), or nil.
func (l *lowerer) epilogue(mm *ir.Node) *ir.Node {
	if mm.Kernel == 0 || len(l.users[mm.ID]) != 1 {
		return nil
	}
	u := l.users[mm.ID][0]
	if u.Kernel == mm.Kernel && u.Role == "epilogue" {
		return u
	}
	return nil
}

// product emits y (+)= x·Wᵀ for device weight w of n rows of k elements of
// type t: the tensor-core product for prefill token rows, the GEMV otherwise.
// With pro set the GEMV computes that prologue from x first (GEMVNorm,
// GEMVSwiGLU; fuseNorm or fuseSwiGLU said its arms can); a SwiGLU's x
// is the [gate | up] rows, k of 2k floats.
func (l *lowerer) product(t dtype.Type, n, k, w int, x, y view, rows ir.Dim, residual bool, nodes []int, pro *proIn) error {
	swi := pro != nil && pro.pro.Kind == ProSwiGLU
	if x.width != k || x.off != 0 || (!swi && x.stride != k) || (swi && x.stride != 2*k) {
		return fmt.Errorf("product input is %d of %d floats at %d, want a contiguous row of %d", x.width, x.stride, x.off, k)
	}
	if y.width != n || y.stride < n || ((y.off != 0 || y.stride != n) && pro == nil) {
		return fmt.Errorf("product output of %d in rows of %d at %d, want %d", y.width, y.stride, y.off, n)
	}
	var kern int
	var err error
	args := l.productArgs(w, x, y, pro)
	one := -1   // the kernel of one-row steps, when it differs
	large := -1 // the kernel of steps of largeFrom rows or more, when it differs
	wide := -1  // the kernel of steps of wideFrom rows or more (an XQ 4 large arm's wider form)
	wideRows := 0
	largeFrom := 0
	var xl *xqLaunch // an XQ 2 or 3 product without a residual or quantising epilogue
	if l.o.Class == Prefill && !l.o.PrefillGEMV && rows == ir.T {
		kern, err = l.kernel(MatMulMMA(t, n, k, residual, l.mmaArm(ProductClass(t, n, k, residual), k)))
	} else if l.o.SmallBatch && l.o.Class == Decode && l.o.MaxSeqs >= 2 {
		kern, err = l.kernel(GemmSmall(t, n, k, residual, l.gemmSmallArm(GemmSmallClass(t, n, k, residual))))
	} else {
		gemv := func(arm GEMVArm) (*Kernel, error) { return GEMV(t, n, k, residual, arm) }
		if pro != nil {
			gemv = func(arm GEMVArm) (*Kernel, error) { return GEMVInto(t, n, k, residual, arm, pro.pro, y.stride) }
		} else if y.stride != n {
			panic("BUG: strided product output without a fused prologue")
		}
		class := ProductClass(t, n, k, residual)
		arm := l.productArm(class, t, n, k)
		var batch GEMVArm
		hasBatch := false
		if arm.Layout == 1 {
			batch, hasBatch = l.batchArm(arm, class, k)
			switch {
			case l.int8Class() && arm.XQ == 2:
				// XQ 2 kernels of one split and unroll add each row in one
				// order, whatever their geometry: one row keeps a one-row
				// kernel, and a one-sequence program the decode program's
				arm = int8One(arm)
				if hasBatch {
					if batch, err = int8Batch(arm, batch); err != nil {
						return err
					}
					batch = l.seqRows(batch) // int8Batch's default arm has 16
				}
			case hasBatch && l.o.BatchInvariant:
				arm = batch // one row runs the batch kernel too
			}
		}
		var qo *preQuant
		src := xqInput{launch: -1} // the XQuant launch of the product's rows, when it has one
		if arm.XQ >= 2 {
			// the rows an XQuant launch (or the residual product before
			// the norm) quantised, computing the prologue
			xq, in, err := l.quantised(x, k, rows, pro)
			if err != nil {
				return err
			}
			src = in
			e := XQEnds{}
			if pro != nil && pro.pro.Kind == ProNorm {
				e.NormIn, e.NormEps = true, pro.pro.Eps
			}
			args = []Arg{wArg(w), bufArg(xq), bufArg(y), rowsArg()}
			if na := l.quantOut; na != nil && residual && y.stride == n && l.quantOutOn(QuantOutNorm) {
				qe := XQEnds{QuantOut: true}
				// whole groups of 32 rows a block, in both arms
				a, okA := fitQuantOut(arm, n, qe, l.int8Class())
				b, ok := fitQuantOut(batch, n, qe, l.int8Class())
				if okA && (!hasBatch || ok) {
					arm, batch = a, b
					e.QuantOut = true
					width := XQRowBytes(n) / 4
					qo = &preQuant{xq: view{buf: l.buffer("xq", rows, width), width: width, stride: width}, nodes: na.nodes}
					args = append(args, wArg(na.nw), bufArg(qo.xq))
				}
			}
			gen := func(a GEMVArm, e XQEnds) (*Kernel, error) { return GEMVXQ(t, n, k, residual, a, e, y.stride) }
			gemv = func(arm GEMVArm) (*Kernel, error) { return gen(arm, e) }
			if !residual && !e.QuantOut {
				xl = &xqLaunch{gen: gen, e: e, arm: arm, y: y}
			}
			if pro != nil {
				nodes = slices.DeleteFunc(slices.Clone(nodes), func(n int) bool { return n == pro.node })
			}
		}
		kern, err = l.kernel(gemv(arm))
		if err == nil && arm.Layout == 1 {
			l.repacked[kern] = true
			if hasBatch {
				one = kern
				if kern, err = l.kernel(gemv(batch)); err != nil {
					return err
				}
				l.repacked[kern] = true
				if xl != nil {
					xl.one, xl.arm = arm, batch
				}
				half := false
				if a, ok := l.orderedArm(t, batch); ok {
					// the int8 class of the batch-invariant configuration: the
					// tensor-core product in the batch kernel's order
					if large, err = l.optionalKernel(gemv(a)); err != nil {
						return err
					}
					if large >= 0 {
						l.repacked[large] = true
						largeFrom = GEMVLargeRows
						if xl != nil {
							xl.large = a
						}
					}
				} else if a, ok := l.largeArm(class, batch); ok {
					if HalfProduct(t, k) {
						a = l.smallArm(class, a) // the tunedb's arm of up to 16 rows
					}
					// f16 rows only from an XQuant launch none of whose
					// readers takes int8 rows at large steps
					if half = a.XQ == 4; half && (src.launch < 0 || l.halfRows[src.launch] == halfInt8) {
						a, half = DefaultXQMMAPipeArm, false
					}
					// -1 for an epilogue it cannot compute, or for an arm that starts
					// at more rows than the program has (the int8 arm in place of an
					// f16 one): the batch kernel serves those steps
					kernel := func(a GEMVArm) (int, error) {
						if l.o.MaxTokens < l.largeFrom(a) {
							return -1, nil
						}
						return l.optionalKernel(gemv(a))
					}
					if large, err = kernel(a); err != nil {
						return err
					}
					if half && large < 0 {
						a, half = DefaultXQMMAPipeArm, false
						if large, err = kernel(a); err != nil {
							return err
						}
					}
					if l.o.BatchInvariant && !half {
						// the int8 tensor-core product from 16 rows would be a
						// second class beside the batch kernel's
						large = -1
					}
					if large >= 0 {
						l.repacked[large] = true
						largeFrom = l.largeFrom(a)
						if xl != nil {
							xl.large = a
						}
						if wa, ok := l.wideArm(class, a); ok && half {
							if wide, err = l.optionalKernel(gemv(wa)); err != nil {
								return err
							}
							if wide >= 0 {
								l.repacked[wide] = true
								wideRows = wideFrom(a)
							}
						}
					}
				}
				if err := l.halfReader(src, half); err != nil {
					return err
				}
			}
		}
		if err == nil && qo != nil {
			qo.launch = len(l.p.Launches)
			l.preQuant[xqKey{x: y, pro: ProNorm, nw: l.quantOut.nw}] = *qo
		}
	}
	if err != nil {
		return err
	}
	if pro != nil && l.p.Kernels[kern].Family != "gemv" {
		panic("BUG: fused prologue on a " + l.p.Kernels[kern].Family + " product")
	}
	l.launch(kern, rows, nodes, args...)
	if one >= 0 {
		l.p.Launches[len(l.p.Launches)-1].One = one + 1
	}
	if large >= 0 {
		l.p.Launches[len(l.p.Launches)-1].Large = large + 1
		l.p.Launches[len(l.p.Launches)-1].LargeFrom = largeFrom
	}
	if wide >= 0 {
		l.p.Launches[len(l.p.Launches)-1].Wide = wide + 1
		l.p.Launches[len(l.p.Launches)-1].WideFrom = wideRows
	}
	if xl != nil {
		l.xqLaunches[len(l.p.Launches)-1] = *xl
	}
	return nil
}

// xqInput is an activation input quantised by an XQuant launch (with its
// prologue) into the buffer view xq.
type xqInput struct {
	x      view
	pro    Prologue
	nw     int // the norm weight of ProNorm
	xq     view
	k      int // the rows' elements
	launch int // the XQuant launch's index; -1 for rows an epilogue wrote
}

// xqKey is a norm input and its weight.
type xqKey struct {
	x   view
	pro PrologueKind
	nw  int
}

// preQuant are quantised rows of a norm's input that the residual product
// writing that input quantised in its epilogue (launch; the norm's IR
// nodes, once its products take them, are added to that launch's).
type preQuant struct {
	xq     view
	launch int
	nodes  []int
}

// normAfter is the norm after a residual product whose products read XQ 2
// rows (nextNormXQ): its weight vector and IR node.
type normAfter struct {
	nw    int
	nodes []int
}

// quantOutOn reports whether producer f quantises in its epilogue in this
// program (LowerOptions.NoQuantOut; in a decode program of two or more
// sequences only with QuantOutBatch on as well, or the narrow tail
// TailNarrowQuantOut).
func (l *lowerer) quantOutOn(f QuantOuts) bool {
	off := l.o.NoQuantOut
	if l.o.MaxSeqs >= 2 && off&QuantOutBatch != 0 && !l.narrowOn(TailNarrowQuantOut) {
		return false
	}
	return off&f == 0
}

// nextNormXQ returns the norm that reads the value of residual add add
// when its group's products all read XQ 2 rows (fuseNorm holds and each
// product's arm is XQ 2 or 3), so the residual product can quantise for them.
func (l *lowerer) nextNormXQ(add *ir.Node, width int) *normAfter {
	if !l.fusing() || !l.quantOutOn(QuantOutNorm) {
		return nil
	}
	users := l.users[add.ID]
	for _, u := range users {
		if u.Op == ir.OpLastTokens && l.o.Class == Decode {
			users = append(slices.Clone(users), l.users[u.ID]...) // the same rows (lastTokens)
			break
		}
	}
	for _, u := range users {
		if u.Op != ir.OpRMSNorm || u.Role != "prologue" || (u.Args[0] != add && u.Args[0].Op != ir.OpLastTokens) {
			continue
		}
		var parts []matPart
		for _, mm := range l.users[u.ID] {
			if mm.Op != ir.OpMatmul || mm.Args[0] != u || mm.Kernel != u.Kernel {
				return nil
			}
			p, err := l.part(mm)
			if err != nil {
				return nil
			}
			parts = append(parts, p)
		}
		if len(parts) == 0 || !l.fuseNorm(parts, width) {
			return nil
		}
		total, same := 0, true
		for _, p := range parts {
			total += p.padN
			same = same && p.t == parts[0].t
		}
		if same {
			parts = []matPart{{t: parts[0].t, n: total, padN: total}}
		}
		for _, p := range parts {
			if l.gemvArm(ProductClass(p.t, p.padN, width, false), p.t, width).XQ < 2 {
				return nil
			}
		}
		return &normAfter{nw: l.vectorOf(u.Args[1]), nodes: []int{u.ID}}
	}
	return nil
}

// quantised returns the XQuant rows of x after the prologue pro: those a
// residual product quantised for this norm in its epilogue, or those of the
// fusion group's earlier product when it quantised the same input, else a
// new buffer written by a new XQuant launch. A norm's rows hold x·nw and
// their groups' sums of squares (the products apply 1/rms). in is the
// XQuant launch's input (in.launch -1 for rows an epilogue wrote).
func (l *lowerer) quantised(x view, k int, rows ir.Dim, pro *proIn) (_ view, in xqInput, _ error) {
	want := xqInput{x: x, launch: -1}
	var nodes []int
	if pro != nil {
		want.pro, nodes = pro.pro, []int{pro.node}
		if pro.pro.Kind == ProNorm {
			want.nw = pro.w
		}
	}
	if q, ok := l.preQuant[xqKey{x: x, pro: want.pro.Kind, nw: want.nw}]; ok {
		ln := &l.p.Launches[q.launch]
		for _, n := range q.nodes {
			if !slices.Contains(ln.Nodes, n) {
				ln.Nodes = append(ln.Nodes, n)
			}
		}
		return q.xq, want, nil
	}
	if s := l.xqShare; s != nil && s.x == want.x && s.pro == want.pro && s.nw == want.nw {
		return s.xq, *s, nil
	}
	kq, err := l.kernel(XQuant(k, want.pro))
	if err != nil {
		return view{}, want, err
	}
	want.k, want.launch = k, len(l.p.Launches)
	width := XQRowBytes(k) / 4 // halfReader widens it for XHalf's rows
	want.xq = view{buf: l.buffer("xq", rows, width), width: width, stride: width}
	args := []Arg{bufArg(x), bufArg(want.xq), rowsArg()}
	if want.pro.Kind == ProNorm {
		args = []Arg{bufArg(x), wArg(want.nw), bufArg(want.xq), rowsArg()}
	}
	l.launch(kq, rows, nodes, args...)
	if l.xqShare != nil {
		*l.xqShare = want
	}
	return want.xq, want, nil
}

// halfReader records how a product reading the rows of XQuant launch
// in.launch runs steps of halfFrom rows or more (half: an XQ 4 kernel),
// giving that launch XHalf for those steps on the first f16 reader. A
// program whose readers of one launch disagree cannot be lowered so (an
// f16 reader came first and a later one has no XQ 4 kernel, e.g. a weight
// type XQ 4 does not cover sharing the norm): errHalfShared, on which
// Lower lowers the program again with the int8 large arm.
func (l *lowerer) halfReader(in xqInput, half bool) error {
	if in.launch < 0 || l.o.MaxTokens < l.halfFrom() {
		return nil
	}
	use := halfInt8
	if half {
		use = halfF16
	}
	switch was := l.halfRows[in.launch]; {
	case was == use:
		return nil
	case was != 0:
		return fmt.Errorf("%w (weight types beside %v)", errHalfShared, HalfTypes())
	}
	l.halfRows[in.launch] = use
	if !half {
		return nil
	}
	kh, err := l.kernel(XHalf(in.k, in.pro))
	if err != nil {
		return err
	}
	l.p.Launches[in.launch].Large = kh + 1
	l.p.Launches[in.launch].LargeFrom = l.halfFrom()
	b := &l.p.Buffers.Buffers[in.xq.buf] // XHalf's rows are wider than XQuant's
	b.Width = max(b.Width, XHRowBytes(in.k)/4)
	return nil
}

// productArgs are the arguments of a product launch (GEMV, MMA, gemm_small),
// with the norm weight after x for GEMVNorm.
func (l *lowerer) productArgs(w int, x, y view, pro *proIn) []Arg {
	if pro != nil && pro.pro.Kind == ProNorm {
		return []Arg{wArg(w), bufArg(x), wArg(pro.w), bufArg(y), rowsArg()}
	}
	return []Arg{wArg(w), bufArg(x), bufArg(y), rowsArg()}
}

// largeArm returns the arm of the launches at largeFrom rows or more of a
// product of class whose batch arm is batch: the tunedb's pick for
// GEMVLargeClass(class), else Arms.GEMVLarge, a tensor-core (XQ 3 or 4)
// arm, in a program of that many sequences when batch reads XQuant rows
// on CUDA cores (XQ 2, tuned or not).
func (l *lowerer) largeArm(class string, batch GEMVArm) (GEMVArm, bool) {
	a := l.largePick(class)
	if batch.XQ != 2 || (a.XQ != 3 && a.XQ != 4) || l.o.MaxTokens < l.largeFrom(a) {
		return GEMVArm{}, false
	}
	return a, true
}

// largeFrom is the step rows from which a product runs its large arm a:
// halfFrom for the f16 tensor-core arms (XQ 4), GEMVLargeRows for the
// int8 ones.
func (l *lowerer) largeFrom(a GEMVArm) int {
	if a.XQ == 4 {
		return l.halfFrom()
	}
	return GEMVLargeRows
}

// int8Class reports whether l lowers the int8 class of the
// batch-invariant configuration (LowerOptions.InvariantInt8).
func (l *lowerer) int8Class() bool { return l.o.BatchInvariant && l.o.InvariantInt8 }

// productArm is the one-row arm of a product of class (n rows of k of
// type t): the tunedb's pick, else the untuned arm, split over two warps
// where lowering splits it (splitArm).
func (l *lowerer) productArm(class string, t dtype.Type, n, k int) GEMVArm {
	arm := l.gemvArm(class, t, k)
	if _, tuned := l.picked("gemv", class); !tuned {
		arm = l.splitArm(arm, n, k)
	}
	return arm
}

// int8One is the one-row XQ 2 arm one in the int8 class: as it is when
// unsplit or split over two warps, whose order the batch arm and the
// ordered arm keep (int8Batch, OrderedFor), else unsplit.
func int8One(one GEMVArm) GEMVArm {
	if one.kSplit() <= 2 {
		return one
	}
	return one.Split(1)
}

// int8Batch is the batch arm of a product whose one-row arm is one
// (int8One) in the int8 class: an XQ 2 arm (DefaultXQGlobalBatchArm for a
// pick of another kind) with one's split and, when split, its unroll, so
// that each row adds its groups in one's order; a split arm keeps the
// block's threads with half its row sets.
func int8Batch(one, batch GEMVArm) (GEMVArm, error) {
	if batch.XQ != 2 {
		batch = DefaultXQGlobalBatchArm
	}
	ks := one.kSplit()
	if ks == 1 {
		return batch.Split(1), nil
	}
	batch.Unroll = one.Unroll
	if batch.RowsPerBlock%ks == 0 && batch.kSplit() == 1 {
		batch.RowsPerBlock /= ks
	}
	batch = batch.Split(ks)
	if err := batch.Validate(); err != nil {
		return GEMVArm{}, fmt.Errorf("the int8 invariant class's batch arm in the order of %v: %w", one, err)
	}
	return batch, nil
}

// halfFrom is the step rows from which the f16 tensor-core products (and
// the XHalf launches before them) run: LowerOptions.HalfFrom, else
// HalfLargeRows; 1 in the batch-invariant configuration, never in its
// int8 class.
func (l *lowerer) halfFrom() int {
	if l.int8Class() {
		return math.MaxInt32 // no step takes the f16 products
	}
	if l.o.BatchInvariant {
		return 1
	}
	if l.o.HalfFrom > 0 {
		return l.o.HalfFrom
	}
	return HalfLargeRows
}

// splitArm is the untuned one-row arm of a product of n rows of k: arm,
// split over two warps a row set where LowerOptions.GEMVSplitBlocks (or
// GEMVSplitRows and GEMVSplitK) say so (a tunedb pick runs as picked).
func (l *lowerer) splitArm(arm GEMVArm, n, k int) GEMVArm {
	split := SplitUntuned(arm, n, l.o.GEMVSplitBlocks)
	if l.o.GEMVSplitRows > 0 {
		split = splittable(arm) && n <= l.o.GEMVSplitRows && k >= l.o.GEMVSplitK
	}
	if split {
		arm = arm.Split(2)
	}
	return arm
}

// splittable reports whether arm is an unsplit XQ 2 one-row arm that
// Split(2) keeps within 1024 threads.
func splittable(arm GEMVArm) bool {
	return arm.XQ == 2 && arm.BatchRows == 1 && arm.kSplit() == 1 && 2*arm.Threads <= 1024
}

// SplitUntuned reports whether lowering runs arm, the untuned one-row arm
// of a product of n rows, split over two warps a row set on a card of
// multiprocessors multiprocessors (LowerOptions.GEMVSplitBlocks, without
// GEMVSplitRows): an unsplit XQ 2 one-row arm of fewer blocks than the
// card has multiprocessors. The autotuner measures that split arm as the
// baseline of such a product (check.Runner.LoweringDefaults).
func SplitUntuned(arm GEMVArm, n, multiprocessors int) bool {
	return splittable(arm) && ceilDiv(n, arm.RowsPerBlock*arm.rowsPerWarp()) < multiprocessors
}

// optionalKernel is kernel for a kernel a launch can do without: -1 and
// no error when k's generator returned ErrUnsupported.
func (l *lowerer) optionalKernel(k *Kernel, err error) (int, error) {
	if errors.Is(err, ErrUnsupported) {
		return -1, nil
	}
	return l.kernel(k, err)
}

// seqRows caps an XQ 2 batch arm's rows a block at the program's
// sequences: no step of the program has more rows, and accumulators for
// more would only hold registers (the sums are those of any rows a block,
// XQ 2's order being its split's and unroll's).
func (l *lowerer) seqRows(b GEMVArm) GEMVArm {
	if b.XQ == 2 && b.BatchRows > l.o.MaxSeqs {
		b.BatchRows = l.o.MaxSeqs
	}
	return b
}

// batchArm returns the arm of the launches at two or more rows of the
// product of class when it differs from the one-row arm one (a layout-1
// product of a decode program of two or more sequences, outside the exact
// configuration): the tunedb's pick for GEMVBatchClass(class), else
// Arms.GEMVBatch.
func (l *lowerer) batchArm(one GEMVArm, class string, k int) (GEMVArm, bool) {
	if l.o.Class != Decode || l.o.MaxSeqs < 2 || l.o.PrefillGEMV {
		return GEMVArm{}, false
	}
	b := l.arms.GEMVBatch
	if p, ok := l.picked("gemv", GEMVBatchClass(class)); ok {
		b = GEMVArmOf(p)
	}
	// the batch kernel replaces the one-row kernel with the same operands:
	// activations quantised by an XQuant launch (XQ 2) or float rows
	switch {
	case one.XQ >= 2 && b.XQ == 1:
		b.XQ = 2
	case one.XQ >= 2 && b.XQ == 0:
		return GEMVArm{}, false // the one-row kernel serves every row count
	case one.XQ < 2 && b.XQ >= 2:
		b.XQ = 1
	}
	b = l.seqRows(FitXQ(b, k))
	if b.Layout != 1 || b == one {
		return GEMVArm{}, false
	}
	return b, true
}
