package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// The products of a graph as groups: the matrices of a fusion group, the
// norm before them and the SwiGLU after, residual and output products.

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
	return l.weight(key, WeightRef{Name: name, Kind: WeightMatrix, Type: t, Parts: wp, Cols: parts[0].k, PadCols: padK}), nil
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
	p, ok := l.gluReader(n, ffn)
	return ok && l.fusable(p.t, p.n, ffn, p.residual != nil)
}

// gluReader returns the product that is gated unit n's only reader, in a
// fusing program, when it reads rows of ffn without bias or padding.
func (l *lowerer) gluReader(n *ir.Node, ffn int) (matPart, bool) {
	if !l.fusing() || len(l.users[n.ID]) != 1 {
		return matPart{}, false
	}
	mm := l.users[n.ID][0]
	if mm.Op != ir.OpMatmul || mm.Args[0] != n {
		return matPart{}, false
	}
	p, err := l.part(mm)
	return p, err == nil && p.k == ffn && p.bias == nil && p.padN == p.n
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
// SwiGLU (or GeGLU) after it and quantises it for the down product
// (XQEnds.SwiGLUOut).
type swigluOutArms struct {
	sw  *ir.Node // the SwiGLU or GeGLU node
	one GEMVArm
}

// ends are the gate/up product's epilogue for so's gated unit.
func (so swigluOutArms) ends() XQEnds {
	return XQEnds{SwiGLUOut: true, GeLU: so.sw.Op == ir.OpGeGLU}
}

// gluDown reports whether gated unit n (ffn columns) may leave its value
// to the gate/up product's SwiGLUOut epilogue: a SwiGLU that its down
// product computes from the [gate | up] rows (fuseSwiGLU), or a GeGLU
// whose only user is a product of rows of ffn without bias or padding,
// which then reads the epilogue's quantised rows as its input's.
func (l *lowerer) gluDown(n *ir.Node, ffn int) bool {
	if n.Op == ir.OpSwiGLU {
		return l.fuseSwiGLU(n, ffn)
	}
	_, ok := l.gluReader(n, ffn)
	return ok && n.Op == ir.OpGeGLU
}

// swigluOut reports whether the products parts (rows of k) are a gate and
// an up product whose product can compute the SwiGLU (or GeGLU) after them and
// quantise it for the down product (XQEnds.SwiGLUOut): a decode program
// outside the exact configuration, two parts of one type and n rows (a
// multiple of 32) without bias, read only by one SwiGLU or GeGLU whose down
// product takes its value (gluDown) from XQ 2 rows, and an XQ 2 arm for the
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
	if (sw.Op != ir.OpSwiGLU && sw.Op != ir.OpGeGLU) || l.users[u.mm.ID][0] != sw || sw.Args[0] != g.mm || sw.Args[1] != u.mm || !l.gluDown(sw, g.n) {
		return so, false
	}
	down, err := l.part(l.users[sw.ID][0])
	if err != nil || l.gemvArm(ProductClass(down.t, down.n, g.n, down.residual != nil), down.t, g.n).XQ < 2 {
		return so, false
	}
	n := 2 * g.n
	class := ProductClass(g.t, n, k, false)
	var one GEMVArm
	if l.int8Class() {
		one = int8One(l.productArm(class, g.t, n, k)) // as the decode program's gate/up product adds its rows
	} else {
		one = l.gemvArm(class, g.t, k)
	}
	so.sw = sw
	e := so.ends()
	if _, batch := l.batchArm(one, class, k); batch {
		// the batch arm would need pairs of 32 rows a block: twice the
		// warps of the 16-row arm, and half its activation rows to keep
		// the accumulators in registers, which read the gate/up weights
		// twice at batch 16 (1435 against 1742 tok/s on the H200)
		return so, false
	}
	var ok bool
	so.one, ok = fitQuantOut(one, n, e, l.int8Class())
	return so, ok
}

// gateUpQuantised lowers gate/up products parts with their SwiGLU and its
// quantisation in the product's epilogue (swigluOut said it can): one
// product over the rows of both parts interleaved by 32, writing the down
// product's XQ 2 rows; the float [gate | up] row fused is not written.
func (l *lowerer) gateUpQuantised(parts []matPart, x, fused view, rows ir.Dim, norm *proIn, so swigluOutArms) error {
	t, n, k := parts[0].t, 2*parts[0].n, x.width
	w, err := l.matrix(parts, k)
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
	e := so.ends()
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
	if so.sw.Op == ir.OpGeGLU {
		// the down product reads the GeGLU's value as plain rows and finds
		// these quantised ones by it: its value is a view that only names
		// them (the head of the fused buffer, which no launch writes), and
		// no GeGLU launch runs
		in := view{buf: fused.buf, width: n / 2, stride: n / 2}
		l.preQuant[xqKey{x: in, pro: ProNone}] = preQuant{xq: xo, launch: len(l.p.Launches), nodes: []int{so.sw.ID}}
		l.val[so.sw.ID] = in
		l.done[so.sw.ID] = true
	} else {
		// the down product finds these rows by the SwiGLU's input, as swigluIn gives it
		in := view{buf: fused.buf, off: fused.off, width: n / 2, stride: fused.stride}
		l.preQuant[xqKey{x: in, pro: ProSwiGLU}] = preQuant{xq: xo, launch: len(l.p.Launches), nodes: []int{so.sw.ID}}
	}
	l.launch(kern, rows, []int{parts[0].mm.ID, parts[1].mm.ID}, wArg(w), bufArg(xq), bufArg(xo), rowsArg())
	return nil
}

// residualProduct computes y += x·Wᵀ into the buffer of the residual
// stream the add epilogue reads, which must die at the add.
func (l *lowerer) residualProduct(p matPart, x view, rows ir.Dim, pro *proIn) error {
	add := p.residual
	y, err := l.inPlaceResidual(add, p.mm, p.n)
	if err != nil {
		return err
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

// inPlaceResidual returns the buffer of add's operand other than n (the
// residual stream) for n's kernel to add its rows of width into in place:
// a contiguous row of that width that nothing reads after the add.
func (l *lowerer) inPlaceResidual(add, n *ir.Node, width int) (view, error) {
	other := add.Args[0]
	if other == n {
		other = add.Args[1]
	}
	y, err := l.valueOf(other)
	if err != nil {
		return view{}, err
	}
	if !y.contiguous() || y.width != width {
		return view{}, fmt.Errorf("residual operand %%%d is not a contiguous row of %d", other.ID, width)
	}
	for _, u := range l.users[other.ID] {
		if u.ID > add.ID {
			return view{}, fmt.Errorf("residual operand %%%d is read after the add (%%%d), cannot add in place", other.ID, u.ID)
		}
	}
	return y, nil
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
