package codegen

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

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
		arm := l.gemvArm(class, t, k)
		if _, tuned := l.picked("gemv", class); !tuned {
			arm = l.splitArm(arm, n, k)
		}
		var batch GEMVArm
		hasBatch := false
		if arm.Layout == 1 {
			batch, hasBatch = l.batchArm(arm, class, k)
			if hasBatch && l.o.BatchInvariant {
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
				a, okA := FitQuantOut(arm, n, qe)
				b, ok := FitQuantOut(batch, n, qe)
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
				if a, ok := l.largeArm(class, batch); ok {
					a = l.smallArm(class, a) // the tunedb's arm of up to 16 rows
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
// sequences only with QuantOutBatch on as well).
func (l *lowerer) quantOutOn(f QuantOuts) bool {
	off := l.o.NoQuantOut
	if l.o.MaxSeqs >= 2 && off&QuantOutBatch != 0 {
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

// halfFrom is the step rows from which the f16 tensor-core products (and
// the XHalf launches before them) run: LowerOptions.HalfFrom, else
// HalfLargeRows.
func (l *lowerer) halfFrom() int {
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
	b = FitXQ(b, k)
	if b.Layout != 1 || b == one {
		return GEMVArm{}, false
	}
	return b, true
}

// matPart is one product of a fusion group.
type matPart struct {
	mm       *ir.Node
	t        dtype.Type
	name     string
	n, padN  int
	k        int
	bias     *ir.Node // bias_add epilogue, or nil
	residual *ir.Node // add epilogue, or nil
}

func (l *lowerer) part(mm *ir.Node) (matPart, error) {
	w := mm.Args[1]
	ne := w.Ints("ne")
	p := matPart{mm: mm, t: w.DType("type"), name: w.Str("name"), k: ne[0], n: ne[1], padN: ne[1]}
	if e := l.epilogue(mm); e != nil {
		switch e.Op {
		case ir.OpBiasAdd:
			p.bias = e
		case ir.OpAdd:
			p.residual = e
		default:
			return p, fmt.Errorf("epilogue %v is not lowered", e.Op)
		}
	}
	if p.n%32 != 0 && l.feedsSwiGLU(mm) {
		if !floatType(p.t) {
			return p, fmt.Errorf("%s: %d rows of %v cannot be padded", p.name, p.n, p.t)
		}
		p.padN = roundUp32(p.n)
	}
	return p, nil
}

// matrix registers the device weight of parts (rows concatenated), rows of
// k elements padded to padK.
func (l *lowerer) matrix(parts []matPart, padK int) (int, error) {
	return l.matrixInterleaved(parts, padK, 0)
}

// matrixInterleaved is matrix with the rows of two parts interleaved by il
// (WeightRef.Interleave; 0: concatenated).
func (l *lowerer) matrixInterleaved(parts []matPart, padK, il int) (int, error) {
	t := parts[0].t
	if padK != parts[0].k && !floatType(t) {
		return 0, fmt.Errorf("%s: rows of %d %v cannot be padded to %d", parts[0].name, parts[0].k, t, padK)
	}
	var names []string
	var wp []WeightPart
	for _, p := range parts {
		names = append(names, p.name)
		wp = append(wp, WeightPart{Name: p.name, Rows: p.n, PadRows: p.padN})
	}
	name := strings.Join(names, "+")
	key := fmt.Sprintf("mat:%s/%d", name, padK)
	for _, p := range wp {
		key += fmt.Sprintf("/%d", p.PadRows)
	}
	if il > 0 {
		key += fmt.Sprintf("/interleave%d", il)
	}
	return l.weight(key, WeightRef{Name: name, Kind: WeightMatrix, Type: t, Parts: wp, Cols: parts[0].k, PadCols: padK, Interleave: il}), nil
}

// normGroup lowers an rms_norm prologue and the products of its group.
func (l *lowerer) normGroup(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if !x.contiguous() {
		return fmt.Errorf("rms_norm of a strided value")
	}
	rows := n.Shape[0]
	var parts []matPart
	for _, mm := range l.users[n.ID] {
		if mm.Op != ir.OpMatmul || mm.Args[0] != n || mm.Kernel != n.Kernel {
			return fmt.Errorf("prologue user %%%d is not a product of its group", mm.ID)
		}
		p, err := l.part(mm)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	eps := float32(n.Float("eps"))
	if l.fuseNorm(parts, x.width) {
		return l.fusedProducts(parts, x, rows, &proIn{pro: Prologue{Kind: ProNorm, Eps: eps}, w: l.vectorOf(n.Args[1]), node: n.ID})
	}
	kn, err := l.kernel(RMSNormAdd(x.width, eps, false, l.blockArm("rmsnorm", RMSNormClass(x.width, false))))
	if err != nil {
		return err
	}
	nb := l.buffer("norm", rows, x.width)
	nv := view{buf: nb, width: x.width, stride: x.width}
	l.launch(kn, rows, []int{n.ID}, bufArg(x), nullArg(), wArg(l.vectorOf(n.Args[1])), bufArg(nv), rowsArg())

	if len(parts) == 1 && parts[0].residual != nil {
		return l.residualProduct(parts[0], nv, rows, nil)
	}
	for _, p := range parts {
		if p.residual != nil {
			return fmt.Errorf("residual epilogue in a group of %d products", len(parts))
		}
		if p.k != x.width {
			return fmt.Errorf("%s has rows of %d, the norm gives %d", p.name, p.k, x.width)
		}
	}
	return l.fusedProducts(parts, nv, rows, nil)
}

// proIn is a prologue computed inside the product that reads its value
// (GEMVNorm, GEMVSwiGLU): the prologue, the norm's weight vector and the
// prologue's IR node.
type proIn struct {
	pro  Prologue
	w    int
	node int
}

// fuseNorm reports whether the norm before parts (rows of k) runs inside
// their products: a decode program outside the exact configuration and
// GEMVNorm kernels for the arms of the one product over weights of one
// type, or of each part's product when their types differ (each then
// normalises x itself).
func (l *lowerer) fuseNorm(parts []matPart, k int) bool {
	if !l.fusing() {
		return false
	}
	total, same := 0, true
	for _, p := range parts {
		if p.residual != nil || p.k != k {
			return false
		}
		total += p.padN
		same = same && p.t == parts[0].t
	}
	if same {
		return l.fusable(parts[0].t, total, k, false)
	}
	// one product per part (types differ): each normalises x itself
	for _, p := range parts {
		if !l.fusable(p.t, p.padN, k, false) {
			return false
		}
	}
	return true
}

// fusing reports whether products of this program take fused prologues: a
// decode program outside the exact configuration.
func (l *lowerer) fusing() bool {
	return l.o.Class == Decode && !l.o.PrefillGEMV && !l.o.NoFusePrologue && !l.o.SmallBatch
}

// fusable reports whether the GEMV arms of a product of n rows of k
// elements of type t (the one-row and the batch arm) have prologue kernels.
func (l *lowerer) fusable(t dtype.Type, n, k int, residual bool) bool {
	if k%8 != 0 {
		return false
	}
	one := l.gemvArm(ProductClass(t, n, k, residual), t, k)
	if !PrologueFusable(t, one) || (one.XQ == 0 && !l.o.FuseFloat) {
		return false
	}
	if one.Layout == 1 {
		if b, ok := l.batchArm(one, ProductClass(t, n, k, residual), k); ok && (!PrologueFusable(t, b) || (b.XQ == 0 && !l.o.FuseFloat)) {
			return false
		}
	}
	return true
}

// fuseSwiGLU reports whether SwiGLU node n (ffn columns) runs inside the
// product that reads it: its only user, a product without bias or padding
// whose arms have prologue kernels.
func (l *lowerer) fuseSwiGLU(n *ir.Node, ffn int) bool {
	if !l.fusing() || len(l.users[n.ID]) != 1 {
		return false
	}
	mm := l.users[n.ID][0]
	if mm.Op != ir.OpMatmul || mm.Args[0] != n {
		return false
	}
	p, err := l.part(mm)
	if err != nil || p.k != ffn || p.bias != nil || p.padN != p.n {
		return false
	}
	return l.fusable(p.t, p.n, ffn, p.residual != nil)
}

// swigluIn returns the prologue of a product whose input x is a fused
// SwiGLU's [gate | up] rows, and x narrowed to the activations it gives.
func (l *lowerer) swigluIn(in *ir.Node, x view) (view, *proIn) {
	if !l.swiglus[in.ID] {
		return x, nil
	}
	return view{buf: x.buf, off: x.off, width: x.width / 2, stride: x.stride}, &proIn{pro: Prologue{Kind: ProSwiGLU}, node: in.ID}
}

// typeRuns splits parts into runs of adjacent parts of one weight type.
func typeRuns(parts []matPart) [][]matPart {
	var runs [][]matPart
	for i, p := range parts {
		if i > 0 && p.t == parts[i-1].t {
			runs[len(runs)-1] = append(runs[len(runs)-1], p)
			continue
		}
		runs = append(runs, []matPart{p})
	}
	return runs
}

// fusedProducts computes the products of parts from x into one fused row
// [part0 | part1 | …]: one product over concatenated weights when their
// types agree, else one per part and a concat; then the bias epilogue.
// With norm set (fuseNorm) x is the norm's input and the product
// normalises it.
func (l *lowerer) fusedProducts(parts []matPart, x view, rows ir.Dim, norm *proIn) error {
	l.xqShare = &xqInput{x: view{buf: -1}, launch: -1}
	defer func() { l.xqShare = nil }()
	total, same := 0, true
	var nodes, widths []int
	var names []string
	for _, p := range parts {
		total += p.padN
		same = same && p.t == parts[0].t
		nodes = append(nodes, p.mm.ID)
		widths = append(widths, p.padN)
		names = append(names, shortName(p.name))
	}
	fb := l.buffer(strings.Join(names, "+"), rows, total)
	fused := view{buf: fb, width: total, stride: total}
	if so, ok := l.swigluOut(parts, x.width); ok {
		if err := l.gateUpQuantised(parts, x, fused, rows, norm, so); err != nil {
			return err
		}
	} else if same {
		w, err := l.matrix(parts, x.width)
		if err != nil {
			return err
		}
		if norm != nil {
			nodes = append([]int{norm.node}, nodes...)
		}
		if err := l.product(parts[0].t, total, x.width, w, x, fused, rows, false, nodes, norm); err != nil {
			return err
		}
	} else if norm != nil {
		// each run of adjacent parts of one type (Q and K of Q4_K beside a
		// Q6_K V) is one product over their concatenated weights; each
		// normalises x and writes its columns of the fused row (GEMVInto's
		// output stride): no concatenation
		off := 0
		for i, run := range typeRuns(parts) {
			w, err := l.matrix(run, x.width)
			if err != nil {
				return err
			}
			rn := 0
			var pnodes []int
			if i == 0 {
				pnodes = append(pnodes, norm.node)
			}
			for _, p := range run {
				rn += p.padN
				pnodes = append(pnodes, p.mm.ID)
			}
			y := view{buf: fb, off: off, width: rn, stride: total}
			if err := l.product(run[0].t, rn, x.width, w, x, y, rows, false, pnodes, norm); err != nil {
				return err
			}
			off += rn
		}
	} else {
		var srcs []Arg
		for _, p := range parts {
			w, err := l.matrix([]matPart{p}, x.width)
			if err != nil {
				return err
			}
			b := l.buffer(shortName(p.name), rows, p.padN)
			y := view{buf: b, width: p.padN, stride: p.padN}
			if err := l.product(p.t, p.padN, x.width, w, x, y, rows, false, []int{p.mm.ID}, nil); err != nil {
				return err
			}
			srcs = append(srcs, bufArg(y))
		}
		kc, err := l.kernel(Concat(widths, l.arms.Block))
		if err != nil {
			return err
		}
		l.launch(kc, rows, nodes, append(srcs, bufArg(fused), rowsArg())...)
	}
	var bparts []WeightPart
	var bnodes []int
	for _, p := range parts {
		bp := WeightPart{Rows: p.n, PadRows: p.padN}
		if p.bias != nil {
			bp.Name = p.bias.Args[1].Str("name")
			bnodes = append(bnodes, p.bias.ID)
		}
		bparts = append(bparts, bp)
	}
	if len(bnodes) > 0 {
		kb, err := l.kernel(BiasAdd(total, l.arms.Block))
		if err != nil {
			return err
		}
		var bnames []string
		for _, bp := range bparts {
			if bp.Name != "" {
				bnames = append(bnames, bp.Name)
			}
		}
		bw := l.vector(strings.Join(bnames, "+"), bparts)
		l.launch(kb, rows, bnodes, bufArg(fused), wArg(bw), rowsArg())
	}
	off := 0
	for _, p := range parts {
		v := view{buf: fb, off: off, width: p.padN, stride: total}
		l.val[p.mm.ID] = v
		l.done[p.mm.ID] = true
		if p.bias != nil {
			l.val[p.bias.ID] = v
			l.done[p.bias.ID] = true
		}
		off += p.padN
	}
	return nil
}

// swigluOutArms are the arms of a gate/up product that computes the
// SwiGLU after it and quantises it for the down product (XQEnds.SwiGLUOut).
type swigluOutArms struct {
	sw  *ir.Node // the SwiGLU node
	one GEMVArm
}

// swigluOut reports whether the products parts (rows of k) are a gate and
// an up product whose product can compute the SwiGLU after them and
// quantise it for the down product (XQEnds.SwiGLUOut): a decode program
// outside the exact configuration, two parts of one type and n rows (a
// multiple of 32) without bias, read only by one SwiGLU that the down
// product computes (fuseSwiGLU) from XQ 2 rows, and an XQ 2 arm for the
// gate/up product that holds whole pairs of 32 gate and 32 up rows a block
// (FitQuantOut), in a program without batch arms (one sequence).
// LowerOptions.NoQuantOut can turn it off.
func (l *lowerer) swigluOut(parts []matPart, k int) (swigluOutArms, bool) {
	var so swigluOutArms
	if !l.fusing() || !l.quantOutOn(QuantOutSwiGLU) || len(parts) != 2 {
		return so, false
	}
	g, u := parts[0], parts[1]
	if g.t != u.t || g.n != u.n || g.n%32 != 0 || g.padN != g.n || u.padN != u.n || g.bias != nil || u.bias != nil ||
		g.residual != nil || u.residual != nil || len(l.users[g.mm.ID]) != 1 || len(l.users[u.mm.ID]) != 1 {
		return so, false
	}
	sw := l.users[g.mm.ID][0]
	if sw.Op != ir.OpSwiGLU || l.users[u.mm.ID][0] != sw || sw.Args[0] != g.mm || sw.Args[1] != u.mm || !l.fuseSwiGLU(sw, g.n) {
		return so, false
	}
	down, err := l.part(l.users[sw.ID][0])
	if err != nil || l.gemvArm(ProductClass(down.t, down.n, g.n, down.residual != nil), down.t, g.n).XQ < 2 {
		return so, false
	}
	n := 2 * g.n
	class := ProductClass(g.t, n, k, false)
	one := l.gemvArm(class, g.t, k)
	e := XQEnds{SwiGLUOut: true}
	so.sw = sw
	if _, batch := l.batchArm(one, class, k); batch {
		// the batch arm would need pairs of 32 rows a block: twice the
		// warps of the 16-row arm, and half its activation rows to keep
		// the accumulators in registers, which read the gate/up weights
		// twice at batch 16 (1435 against 1742 tok/s on the H200)
		return so, false
	}
	var ok bool
	so.one, ok = FitQuantOut(one, n, e)
	return so, ok
}

// gateUpQuantised lowers gate/up products parts with their SwiGLU and its
// quantisation in the product's epilogue (swigluOut said it can): one
// product over the rows of both parts interleaved by 32, writing the down
// product's XQ 2 rows; the float [gate | up] row fused is not written.
func (l *lowerer) gateUpQuantised(parts []matPart, x, fused view, rows ir.Dim, norm *proIn, so swigluOutArms) error {
	t, n, k := parts[0].t, 2*parts[0].n, x.width
	w, err := l.matrixInterleaved(parts, k, 32)
	if err != nil {
		return err
	}
	xq, src, err := l.quantised(x, k, rows, norm)
	if err != nil {
		return err
	}
	if err := l.halfReader(src, false); err != nil {
		return err
	}
	e := XQEnds{SwiGLUOut: true}
	if norm != nil {
		e.NormIn, e.NormEps = true, norm.pro.Eps
	}
	kern, err := l.kernel(GEMVXQ(t, n, k, false, so.one, e, 0))
	if err != nil {
		return err
	}
	l.repacked[kern] = true
	width := XQRowBytes(n/2) / 4
	xo := view{buf: l.buffer("xq", rows, width), width: width, stride: width}
	// the down product finds these rows by the SwiGLU's input, as swigluIn gives it
	in := view{buf: fused.buf, off: fused.off, width: n / 2, stride: fused.stride}
	l.preQuant[xqKey{x: in, pro: ProSwiGLU}] = preQuant{xq: xo, launch: len(l.p.Launches), nodes: []int{so.sw.ID}}
	l.launch(kern, rows, []int{parts[0].mm.ID, parts[1].mm.ID}, wArg(w), bufArg(xq), bufArg(xo), rowsArg())
	return nil
}

// residualProduct computes y += x·Wᵀ into the buffer of the residual
// stream the add epilogue reads, which must die at the add.
func (l *lowerer) residualProduct(p matPart, x view, rows ir.Dim, pro *proIn) error {
	add := p.residual
	other := add.Args[0]
	if other == p.mm {
		other = add.Args[1]
	}
	y, err := l.valueOf(other)
	if err != nil {
		return err
	}
	if !y.contiguous() || y.width != p.n {
		return fmt.Errorf("residual operand %%%d is not a contiguous row of %d", other.ID, p.n)
	}
	for _, u := range l.users[other.ID] {
		if u.ID > add.ID {
			return fmt.Errorf("residual operand %%%d is read after the add (%%%d), cannot add in place", other.ID, u.ID)
		}
	}
	padK := x.width
	if p.k != padK && (padK != roundUp32(p.k) || !floatType(p.t)) {
		return fmt.Errorf("%s has rows of %d, its input gives %d", p.name, p.k, padK)
	}
	w, err := l.matrix([]matPart{p}, padK)
	if err != nil {
		return err
	}
	nodes := []int{p.mm.ID, add.ID}
	if pro != nil {
		nodes = append([]int{pro.node}, nodes...)
	}
	l.quantOut = l.nextNormXQ(add, p.n)
	err = l.product(p.t, p.n, padK, w, x, y, rows, true, nodes, pro)
	l.quantOut = nil
	if err != nil {
		return err
	}
	l.val[p.mm.ID] = y // not readable alone; only the add's value is used
	l.val[add.ID] = y
	l.done[add.ID] = true
	return nil
}

// matmul lowers a product outside a norm group (the attention output and
// down projections, with their residual epilogue).
func (l *lowerer) matmul(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	x, pro := l.swigluIn(n.Args[0], x)
	p, err := l.part(n)
	if err != nil {
		return err
	}
	if p.residual != nil {
		return l.residualProduct(p, x, n.Shape[0], pro)
	}
	if x.width != p.k {
		if x.width != roundUp32(p.k) || !floatType(p.t) {
			return fmt.Errorf("%s has rows of %d, its input gives %d", p.name, p.k, x.width)
		}
	}
	if p.bias != nil || p.padN != p.n {
		if pro != nil {
			panic("BUG: fused SwiGLU before a product with bias or padding")
		}
		return l.fusedProducts([]matPart{p}, x, n.Shape[0], nil)
	}
	w, err := l.matrix([]matPart{p}, x.width)
	if err != nil {
		return err
	}
	b := l.buffer(shortName(p.name), n.Shape[0], p.n)
	y := view{buf: b, width: p.n, stride: p.n}
	nodes := []int{n.ID}
	if pro != nil {
		nodes = append([]int{pro.node}, nodes...)
	}
	if err := l.product(p.t, p.n, x.width, w, x, y, n.Shape[0], false, nodes, pro); err != nil {
		return err
	}
	l.val[n.ID] = y
	return nil
}

// outputXQ reports whether the only reader of attention node att's output
// (rows of width, through reshapes) is a product whose arm reads XQ 2 rows
// (the attention output projection), so the decode attention's combine can
// quantise for it (DecodeAttentionXQ).
func (l *lowerer) outputXQ(att *ir.Node, width int) bool {
	if !l.fusing() || !l.quantOutOn(QuantOutAttn) {
		return false
	}
	n := att
	for len(l.users[n.ID]) == 1 && l.users[n.ID][0].Op == ir.OpReshape {
		n = l.users[n.ID][0]
	}
	if len(l.users[n.ID]) != 1 {
		return false
	}
	mm := l.users[n.ID][0]
	if mm.Op != ir.OpMatmul || mm.Args[0] != n {
		return false
	}
	p, err := l.part(mm)
	if err != nil || p.k != width || p.bias != nil {
		return false
	}
	return l.gemvArm(ProductClass(p.t, p.n, p.k, p.residual != nil), p.t, p.k).XQ >= 2
}

// shortName drops the ".weight" suffix and the "blk.N." prefix of a tensor name.
func shortName(name string) string {
	name = strings.TrimSuffix(name, ".weight")
	if strings.HasPrefix(name, "blk.") {
		if i := strings.IndexByte(name[4:], '.'); i >= 0 {
			return name[4+i+1:]
		}
	}
	return name
}

// ropeKV lowers a kv_write with the two RoPE nodes of its layer into one
// RoPE + KV-cache-write launch over the fused QKV row.
func (l *lowerer) ropeKV(kvw *ir.Node) error {
	k, v := kvw.Args[0], kvw.Args[1]
	if k.Op != ir.OpRope || len(l.users[kvw.ID]) != 1 || l.users[kvw.ID][0].Op != ir.OpAttention {
		return fmt.Errorf("kv_write is not rope(k) → cache → one attention")
	}
	att := l.users[kvw.ID][0]
	q := att.Args[0]
	if q.Op != ir.OpRope || q.Arg(2) != k.Arg(2) || q.Args[1] != k.Args[1] || q.Args[1].Op != ir.OpPositions {
		return fmt.Errorf("attention query is not roped like the key")
	}
	qp, kp := ir.RopeOf(q), ir.RopeOf(k)
	if qp != kp {
		return fmt.Errorf("query and key rope attributes differ")
	}
	if len(l.users[q.Args[0].ID]) != 1 || len(l.users[q.ID]) != 1 {
		return fmt.Errorf("query is used besides its rope and attention, cannot rotate in place")
	}
	qv, err := l.valueOf(q.Args[0])
	if err != nil {
		return err
	}
	kv, err := l.valueOf(k.Args[0])
	if err != nil {
		return err
	}
	vv, err := l.valueOf(v)
	if err != nil {
		return err
	}
	H, D, Hkv := int(q.Shape[1]), int(q.Shape[2]), int(k.Shape[1])
	stride := (H + 2*Hkv) * D
	if qv.buf != kv.buf || qv.buf != vv.buf || qv.stride != stride || kv.off != qv.off+H*D || vv.off != qv.off+(H+Hkv)*D {
		return fmt.Errorf("q, k and v are not one fused [q|k|v] row of %d", stride)
	}
	factors := ""
	if f := q.Arg(2); f != nil {
		factors = f.Str("name")
	}
	w := l.weight(fmt.Sprintf("rope:%+v:%s", qp, factors), WeightRef{Name: "rope_inv_freq", Kind: WeightRope, Type: dtype.F32, Rope: qp, Factors: factors})
	rs := RopeShape{Heads: H, HeadsKV: Hkv, HeadDim: D, RopeDim: qp.Dims, Half: qp.Style == ir.RopeHalf, Cache: l.o.Cache}
	layer := kvw.Int("layer")
	if ok, err := l.ropeInProducts(q, k, v, qv, rs, w, layer, []int{q.ID, k.ID, kvw.ID}); err != nil || ok {
		l.val[q.ID] = qv
		return err
	}
	kern, err := l.kernel(RopeKV(rs, l.blockArm("rope_kv", RopeKVClass(rs))))
	if err != nil {
		return err
	}
	rows := q.Shape[0]
	l.launch(kern, rows, []int{q.ID, k.ID, kvw.ID}, bufArg(view{buf: qv.buf, off: qv.off}), inArg(InPositions), inArg(InSlots), wArg(w),
		cacheArg(layer, false), cacheArg(layer, true), rowsArg())
	l.val[q.ID] = qv
	return nil
}

// ropeInProducts gives the product launches that wrote the fused [q | k |
// v] rows qkv the RoPE epilogue (XQEnds.Rope; LowerOptions.RopeInProduct)
// and reports whether it did: q, k and v must come straight from XQ 2
// products covering the row, and every kernel of those launches must have
// the epilogue (a large-batch kernel without it is dropped: the batch
// kernel serves those steps; none may read XHalf's f16 rows, XQ 4; the
// 8-bit cache, whose blocks of 32 a product's lanes do not hold together,
// keeps RopeKV). It changes nothing unless all of that holds.
func (l *lowerer) ropeInProducts(q, k, v *ir.Node, qkv view, rs RopeShape, inv, layer int, nodes []int) (bool, error) {
	if !l.o.RopeInProduct || l.o.Class != Decode || rs.Half || rs.Cache == CacheQ8 {
		return false, nil
	}
	for _, n := range []*ir.Node{q.Args[0], k.Args[0], v} {
		for n.Op == ir.OpReshape {
			n = n.Args[0]
		}
		if n.Op != ir.OpMatmul {
			return false, nil
		}
	}
	var idx []int
	width := 0
	for i, xl := range l.xqLaunches {
		if xl.y.buf == qkv.buf {
			idx = append(idx, i)
			width += xl.y.width
			if xl.large.XQ == 4 {
				// its large steps read f16 rows, which the batch kernel
				// taking them without an XQ 4 RoPE epilogue could not
				return false, nil
			}
		}
	}
	if width != rs.QKVStride() {
		return false, nil
	}
	slices.Sort(idx)
	type patch struct{ kern, one, large int }
	patches := make([]patch, len(idx))
	for j, i := range idx {
		xl := l.xqLaunches[i]
		e := xl.e
		e.Rope, e.RopeShape, e.RopeCol0 = true, rs, xl.y.off-qkv.off
		// gen is the kernel of arm a with the epilogue (-1: none), or
		// -1 for no arm
		gen := func(a GEMVArm) (int, error) {
			if a == (GEMVArm{}) {
				return -1, nil
			}
			kn, err := l.optionalKernel(xl.gen(a, e))
			if kn >= 0 {
				l.repacked[kn] = true
			}
			return kn, err
		}
		p := &patches[j]
		var err error
		if p.kern, err = gen(xl.arm); err != nil || p.kern < 0 {
			return false, err
		}
		if p.one, err = gen(xl.one); err != nil || (p.one < 0 && xl.one != (GEMVArm{})) {
			return false, err
		}
		if p.large, err = gen(xl.large); err != nil {
			return false, err
		} // a large kernel without the epilogue is dropped
	}
	for j, i := range idx {
		ln, p := &l.p.Launches[i], patches[j]
		ln.Kernel, ln.One, ln.Large = p.kern, p.one+1, p.large+1
		ln.Args = append(ln.Args, inArg(InPositions), inArg(InSlots), wArg(inv), cacheArg(layer, false), cacheArg(layer, true))
		if j == 0 {
			ln.Nodes = append(ln.Nodes, nodes...)
		}
	}
	return true, nil
}

// attention lowers causal attention over the layer's cache: split-KV decode
// attention (partials + combine) for decode, prefill attention otherwise,
// and the one-warp-per-query kernel for head sizes not a multiple of 32.
func (l *lowerer) attention(att *ir.Node) error {
	q, err := l.valueOf(att.Args[0])
	if err != nil {
		return err
	}
	if !att.Bool("causal") {
		return fmt.Errorf("non-causal attention is not lowered")
	}
	if isNaNOrInf(att.Float("scale")) {
		return fmt.Errorf("attention scale %g", att.Float("scale"))
	}
	cn := att.Args[1]
	layer := cn.Int("layer")
	H, D, Hkv := int(att.Shape[1]), int(att.Shape[2]), int(cn.Args[0].Shape[1])
	s := AttnShape{Heads: H, HeadsKV: Hkv, HeadDim: D, QStride: q.stride, Cache: l.o.Cache, Scale: attnScale(att), PageSize: l.o.PageSize,
		Softcap: float32(ir.AttnSoftcap(att)), Window: ir.AttnWindow(att)}
	rows := att.Shape[0]
	ob := l.buffer("attn", rows, H*D)
	out := view{buf: ob, width: H * D, stride: H * D}
	qa := bufArg(view{buf: q.buf, off: q.off})
	kc, vc := cacheArg(layer, false), cacheArg(layer, true)
	switch {
	case D%32 != 0:
		k, err := l.kernel(WarpAttention(s, l.arms.Prefill))
		if err != nil {
			return err
		}
		l.launch(k, rows, []int{att.ID}, qa, kc, vc, pagesArg(), inArg(InTokBase), inArg(InPositions), bufArg(out), rowsArg())
	case l.o.Class == Decode:
		arm := l.decodeArm(AttnClass(s))
		if arm.Preload {
			// the previous kernel (RopeKV, or the QKV product with RoPE in its
			// epilogue) lets attention start, and read its older keys, while it runs
			if err := l.earlyTrigger(len(l.p.Launches) - 1); err != nil {
				return err
			}
		}
		// the output projection reads XQ 2 rows: the combine writes them
		xq := l.outputXQ(att, H*D)
		splits := arm.Splits(s.KeySpan(l.o.Context)) // a sliding window's splits cover the window
		po := l.buffer("attn_part_o", ir.S, H*splits*D)
		pml := l.buffer("attn_part_ml", ir.S, H*splits*2)
		pov, pmlv := view{buf: po, width: H * splits * D, stride: H * splits * D}, view{buf: pml, width: H * splits * 2, stride: H * splits * 2}
		// dst is the output the combine writes, quantised for the output projection with xq
		dst := out
		if xq {
			width := XQRowBytes(H*D) / 4
			dst = view{buf: l.buffer("xq", rows, width), width: width, stride: width}
		}
		// writeDst launches k, the kernel that writes dst (recorded for the projection with xq)
		writeDst := func(k int, args ...Arg) {
			if xq {
				l.preQuant[xqKey{x: out}] = preQuant{xq: dst, launch: len(l.p.Launches)}
			}
			l.launch(k, ir.S, []int{att.ID}, args...)
		}
		attn := DecodeAttention
		if xq {
			attn = DecodeAttentionXQ
		}
		p, c, err := attn(s, arm)
		if err != nil {
			return err
		}
		kp, _ := l.kernel(p, nil)
		l.launch(kp, ir.S, []int{att.ID}, qa, kc, vc, pagesArg(), inArg(InKVBase), inArg(InKVLen), bufArg(pov), bufArg(pmlv), constArg(splits))
		kc2, _ := l.kernel(c, nil)
		writeDst(kc2, bufArg(pov), bufArg(pmlv), inArg(InKVLen), bufArg(dst), constArg(splits))
	default:
		var k int
		var err error
		if l.o.FlashPrefill && FlashSupported(s) {
			k, err = l.kernel(FlashPrefillAttention(s, DefaultFlashArm))
		} else {
			k, err = l.kernel(PrefillAttention(s, l.prefillArm(AttnClass(s))))
		}
		if err != nil {
			return err
		}
		l.launch(k, rows, []int{att.ID}, qa, kc, vc, pagesArg(), inArg(InTokBase), inArg(InPositions), bufArg(out), rowsArg())
	}
	l.val[att.ID] = out
	return nil
}

// earlyTrigger gives launch i (none for i < 0) the EarlyTrigger variants
// of its kernels.
func (l *lowerer) earlyTrigger(i int) error {
	if i < 0 {
		return nil
	}
	ln := &l.p.Launches[i]
	early := func(k int) (int, error) {
		e, err := l.kernel(l.p.Kernels[k].EarlyTrigger(), nil)
		if err == nil && l.repacked[k] {
			l.repacked[e] = true // it reads the same repacked matrix
		}
		return e, err
	}
	var err error
	if ln.Kernel, err = early(ln.Kernel); err != nil {
		return err
	}
	for _, v := range []*int{&ln.One, &ln.Large, &ln.Wide} {
		if *v > 0 {
			k, err := early(*v - 1)
			if err != nil {
				return err
			}
			*v = k + 1
		}
	}
	return nil
}
