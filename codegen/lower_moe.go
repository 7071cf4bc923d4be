package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// Lowering of the mixture-of-experts feed-forward (arch's moeFFN):
//
//	h = rms_norm(x)                       RMSNormAdd, a launch of its own
//	logits = matmul(h, router)            the float32 GEMV (routers are F32)
//	                                      (decode: RouterNorm, both in one)
//	ids = topk(logits); w = moe_weights   MoERoute: ids, weights, groups
//	a = swiglu(moe_matmul(h, gate), moe_matmul(h, up))   MoEGEMV, gate/up pair
//	d = moe_matmul(a, down)               MoEGEMV, a row of x a slot
//	x += moe_sum(d, w)                    MoESum into the residual stream
//
// Decode programs of two or more sequences run the grouped MoEGEMV arm and
// the one-row arm at one-row steps (Launch.One); a one-sequence program
// runs the one-row arm alone; prefill the grouped arm.

// moeRoute is what lowering keeps of a topk it lowered: the groups and
// the weights the products read.
type moeRoute struct {
	groups, wts view
	// pending, in a one-sequence decode program, is the MoERoute launch
	// not yet made: the first product lowered after it either chooses the
	// experts itself (MoEShape.Route) or launches it (launchRoute).
	pending *routeLaunch
	norm    bool
}

// routeLaunch is a MoERoute launch held back: its kernel, rows, nodes and
// arguments, and the logits a routing product reads instead.
type routeLaunch struct {
	kernel int
	rows   ir.Dim
	nodes  []int
	args   []Arg
	logits view
}

// launchRoute makes route's held-back MoERoute launch, if any.
func (l *lowerer) launchRoute(id int) {
	r := l.moeRoutes[id]
	if p := r.pending; p != nil {
		l.launch(p.kernel, p.rows, p.nodes, p.args...)
		r.pending = nil
		l.moeRoutes[id] = r
	}
}

// moeNode lowers the mixture-of-experts ops.
func (l *lowerer) moeNode(n *ir.Node) error {
	switch n.Op {
	case ir.OpTopK:
		return l.moeRoute(n)
	case ir.OpMoEMatmul:
		return l.moeMatmul(n)
	case ir.OpMoESum:
		return l.moeSum(n)
	}
	return fmt.Errorf("%v without the topk before it", n.Op)
}

// routerProduct reports whether matmul n is a router: every user a topk or
// moe_weights of its logits.
func (l *lowerer) routerProduct(n *ir.Node) bool {
	if len(l.users[n.ID]) == 0 || n.Kernel != 0 {
		return false
	}
	for _, u := range l.users[n.ID] {
		if u.Op != ir.OpTopK && u.Op != ir.OpMoEWeights {
			return false
		}
	}
	return true
}

// router lowers a router's product as the float32 GEMV on the file's
// layout in every step class, so the experts it chooses are those of the
// CPU reference's logits up to float32 rounding (a bf16 prefill product
// would move near ties): the tunedb's arm of its class (RouterArm), else
// DefaultRouterArm (or LowerOptions.Arms.GEMV's geometry where it is set).
func (l *lowerer) router(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	p, err := l.part(n)
	if err != nil {
		return err
	}
	if !x.contiguous() || x.width != p.k {
		return fmt.Errorf("router %s reads %d of rows of %d, want contiguous rows of %d", p.name, x.width, x.stride, p.k)
	}
	w, err := l.matrix([]matPart{p}, p.k)
	if err != nil {
		return err
	}
	k, err := l.kernel(GEMV(p.t, p.n, p.k, false, l.routerArm(p)))
	if err != nil {
		return err
	}
	y := view{buf: l.buffer("router", n.Shape[0], p.n), width: p.n, stride: p.n}
	l.launch(k, n.Shape[0], []int{n.ID}, wArg(w), bufArg(x), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

// routerArm is the arm of router product p: the tunedb's arm of its class
// (RouterArm), else DefaultRouterArm (or LowerOptions.Arms.GEMV's geometry
// where it is set).
func (l *lowerer) routerArm(p matPart) GEMVArm {
	if pk, ok := l.picked("gemv", ProductClass(p.t, p.n, p.k, false)); ok {
		return RouterArm(GEMVArmOf(pk))
	} else if l.o.Arms.GEMV != (GEMVArm{}) {
		return RouterArm(l.o.Arms.GEMV)
	}
	return DefaultRouterArm
}

// normRouter returns the router product among the readers of rms_norm n
// that computes the norm in its prologue (RouterNorm), in a fusing
// program whose router arm has that kernel; nil otherwise.
func (l *lowerer) normRouter(n *ir.Node, width int) (*ir.Node, matPart) {
	if !l.fusing() {
		return nil, matPart{}
	}
	for _, u := range l.users[n.ID] {
		if u.Op != ir.OpMatmul || u.Args[0] != n || !l.routerProduct(u) {
			continue
		}
		p, err := l.part(u)
		if err != nil || p.k != width || p.bias != nil || p.residual != nil || !RouterNormFits(l.routerArm(p)) {
			return nil, matPart{}
		}
		return u, p
	}
	return nil, matPart{}
}

// routerNorm lowers rms_norm n of x and router product r (part p) as one
// RouterNorm launch: it writes the router's logits and the normalised rows
// the experts' products read.
func (l *lowerer) routerNorm(n, r *ir.Node, p matPart, x view, eps float32) error {
	w, err := l.matrix([]matPart{p}, p.k)
	if err != nil {
		return err
	}
	quant := l.expertsTakeXQ(n)
	k, err := l.kernel(RouterNorm(p.t, p.n, p.k, l.routerArm(p), eps, quant))
	if err != nil {
		return err
	}
	rows := n.Shape[0]
	h := view{buf: l.buffer("norm", rows, x.width), width: x.width, stride: x.width}
	y := view{buf: l.buffer("router", rows, p.n), width: p.n, stride: p.n}
	args := []Arg{wArg(w), bufArg(x), wArg(l.vectorOf(n.Args[1])), bufArg(h), bufArg(y), rowsArg()}
	if quant {
		// the experts' int8 products read these rows instead of an XQuant launch's
		width := XQRowBytes(x.width) / 4
		xq := view{buf: l.buffer("xq", rows, width), width: width, stride: width}
		args = slices.Insert(args, 4, bufArg(xq))
		l.preQuant[xqKey{x: h, pro: ProNone}] = preQuant{xq: xq, launch: len(l.p.Launches)}
	}
	l.launch(k, rows, []int{n.ID, r.ID}, args...)
	l.val[n.ID], l.val[r.ID] = h, y
	l.done[r.ID] = true
	return nil
}

// expertsTakeXQ reports whether an experts' product reading rms_norm n
// runs int8 activations (moeArms' arm with XQ), so that the norm's
// RouterNorm writes its rows quantised for it.
func (l *lowerer) expertsTakeXQ(n *ir.Node) bool {
	for _, u := range l.users[n.ID] {
		if u.Op != ir.OpMoEMatmul || u.Args[0] != n || len(u.Args[0].Shape) != 2 {
			continue
		}
		s, _, _ := l.moeShape(u)
		if arm, _ := l.moeArms(s); arm.XQ == 1 {
			return true
		}
	}
	return false
}

// DefaultRouterArm is a router's product without a tunedb entry: two rows
// a block of 128 threads, so that 128 experts give 64 blocks. On an H100
// (kernel-check at qwen3-30b-a3b, docs/PERFORMANCE.md session 30) it ran
// the 128×2048 product in 2.9 µs at one token and 8.5 at 12, where the
// family's default of 8 rows a block (16 blocks) took 6.5 and 10.5.
var DefaultRouterArm = GEMVArm{Threads: 128, RowsPerBlock: 2, Unroll: 4, SharedX: 1}

// RouterArm is the arm a router's product runs for the gemv arm a of its
// class: a's geometry on float activations and the file's layout (no
// int8 activations, no repacked weights), so that every arm adds a row's
// float32 products, in an order that does not depend on the step's rows.
func RouterArm(a GEMVArm) GEMVArm {
	r := GEMVArm{Threads: a.Threads, RowsPerBlock: a.RowsPerBlock, Unroll: a.Unroll, SharedX: a.SharedX}
	if r.Validate() != nil {
		return DefaultGEMVArm
	}
	return r
}

// rowNorm lowers an rms_norm of [T,E] rows outside a product group (the
// norm before a mixture of experts, whose readers are not all products);
// in a fusing program the router's product computes it (RouterNorm).
func (l *lowerer) rowNorm(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if !x.contiguous() {
		return fmt.Errorf("rms_norm of a strided value")
	}
	eps := float32(n.Float("eps"))
	if r, p := l.normRouter(n, x.width); r != nil {
		return l.routerNorm(n, r, p, x, eps)
	}
	k, err := l.kernel(RMSNormAdd(x.width, eps, false, l.blockArm("rmsnorm", RMSNormClass(x.width, false))))
	if err != nil {
		return err
	}
	y := view{buf: l.buffer("norm", n.Shape[0], x.width), width: x.width, stride: x.width}
	l.launch(k, n.Shape[0], []int{n.ID}, bufArg(x), nullArg(), wArg(l.vectorOf(n.Args[1])), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

// moeRoute lowers a topk and the moe_weights of its logits into one
// MoERoute launch writing the ids, the weights and the groups.
func (l *lowerer) moeRoute(n *ir.Node) error {
	logits, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if !logits.contiguous() {
		return fmt.Errorf("topk of a strided value")
	}
	experts, used := int(n.Args[0].Shape[1]), n.Int("k")
	var wn *ir.Node
	for _, u := range l.users[n.ID] {
		if u.Op == ir.OpMoEWeights {
			if wn != nil || u.Args[0] != n.Args[0] {
				return fmt.Errorf("moe_weights %%%d weighs another router's choice or a second time", u.ID)
			}
			wn = u
		}
	}
	if wn == nil {
		return fmt.Errorf("topk without moe_weights is not lowered")
	}
	arm := DefaultMoERouteArm
	if p, ok := l.picked("moe_route", MoERouteClass(experts, used, wn.Bool("norm"))); ok {
		arm = BlockArmOf(p)
	}
	k, err := l.kernel(MoERoute(experts, used, wn.Bool("norm"), arm))
	if err != nil {
		return err
	}
	rows := n.Shape[0]
	ids := view{buf: l.buffer("moe_ids", rows, used), width: used, stride: used}
	wts := view{buf: l.buffer("moe_wts", rows, used), width: used, stride: used}
	// experts+1 offsets and rows·used slots fit rows of experts+1+used
	gw := experts + 1 + used
	groups := view{buf: l.buffer("moe_groups", rows, gw), width: gw, stride: gw}
	l.p.Buffers.Buffers[ids.buf].Int32 = true
	l.p.Buffers.Buffers[groups.buf].Int32 = true
	rl := &routeLaunch{kernel: k, rows: rows, nodes: []int{n.ID, wn.ID}, logits: logits,
		args: []Arg{bufArg(logits), bufArg(ids), bufArg(wts), bufArg(groups), rowsArg()}}
	l.val[n.ID], l.val[wn.ID] = ids, wts
	l.done[wn.ID] = true
	if l.moeRoutes == nil {
		l.moeRoutes = map[int]moeRoute{}
	}
	l.moeRoutes[n.ID] = moeRoute{groups: groups, wts: wts, pending: rl, norm: wn.Bool("norm")}
	if !l.fusing() || l.o.MaxSeqs != 1 {
		l.launchRoute(n.ID)
	}
	return nil
}

// expertWeight registers the 3-D expert tensor w ([E,N,K]) as a device
// matrix of E·N rows in the file's layout.
func (l *lowerer) expertWeight(w *ir.Node) (t dtype.Type, n, k, idx int) {
	ne := w.Ints("ne")
	t, k, n = w.DType("type"), ne[0], ne[1]
	name := w.Str("name")
	idx = l.weight(fmt.Sprintf("experts:%s", name), WeightRef{Name: name, Kind: WeightMatrix, Type: t,
		Parts: []WeightPart{{Name: name, Rows: n * ne[2], PadRows: n * ne[2], Experts: ne[2]}}, Cols: k, PadCols: k})
	return t, n, k, idx
}

// moeMatmul lowers a moe_matmul: with the moe_matmul beside it into the
// SwiGLU it feeds as one gate/up MoEGEMV, else alone.
func (l *lowerer) moeMatmul(n *ir.Node) error {
	route, ok := l.moeRoutes[n.Args[2].ID]
	if !ok {
		return fmt.Errorf("moe_matmul of ids no topk lowered wrote")
	}
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	s, sw, up := l.moeShape(n)
	used, perSlot, N := s.Used, s.PerSlot, s.N
	_, _, _, w := l.expertWeight(n.Args[1])
	if (perSlot && x.width != used*s.K) || (!perSlot && x.width != s.K) || !x.contiguous() {
		return fmt.Errorf("moe_matmul reads %d of rows of %d", x.width, x.stride)
	}
	arm, oneArm := l.moeArms(s)
	// a one-sequence decode program's first product after the routing
	// chooses the experts itself where it is the one-row product of a row
	// a token (MoEShape.Route, taking the routing's IR nodes and writing
	// its ids and weights); otherwise MoERoute runs first
	rid := n.Args[2].ID
	p := route.pending
	routed := p != nil && !perSlot
	if routed {
		s.Route, s.Norm = true, route.norm
		route.pending = nil
		l.moeRoutes[rid] = route
		oneArm = l.oneRowArm(s, oneArm, oneArm.XQ)
	} else {
		l.launchRoute(rid)
		if done, err := l.moeDownSum(n, s, w, x, arm.XQ); done || err != nil {
			return err
		}
	}
	args := []Arg{wArg(w)}
	nodes := []int{n.ID}
	if routed {
		nodes = append(slices.Clone(p.nodes), n.ID)
	}
	out := n
	if sw != nil {
		_, _, _, wu := l.expertWeight(up.Args[1])
		args = append(args, wArg(wu))
		nodes = append(nodes, up.ID, sw.ID)
		out = sw
		l.done[up.ID], l.done[sw.ID] = true, true
	}
	rows := n.Shape[0]
	y := view{buf: l.buffer("moe_"+shortName(n.Args[1].Str("name")), rows, used*N), width: used * N, stride: used * N}
	var kern, one int
	xin := x
	if arm.XQ == 1 {
		// int8 activations: a token's row (the down product's: its slots' rows side by side)
		if xin, _, err = l.quantised(x, x.width, rows, nil); err != nil {
			return err
		}
	}
	switch {
	case routed:
		args = append(args, bufArg(xin), bufArg(p.logits), bufArg(l.val[rid]), bufArg(route.wts), bufArg(y), rowsArg())
		kern, err = l.kernel(MoEGEMV(s, oneArm))
		one = -1
	default:
		args = append(args, bufArg(xin), bufArg(l.val[rid]), bufArg(route.groups), bufArg(y), rowsArg())
		kern, one, err = l.moeKernels(s, arm, oneArm)
	}
	if err != nil {
		return err
	}
	l.launch(kern, rows, nodes, args...)
	if one >= 0 {
		l.p.Launches[len(l.p.Launches)-1].One = one + 1
	}
	if arm.XQ == 1 {
		l.repacked[kern] = true // W (and Wu) in layout 1; the one-row kernel takes the same arguments
	}
	l.val[out.ID] = y
	if out != n {
		l.val[n.ID] = y // not readable alone; only the SwiGLU's value is used
	}
	return nil
}

// moeDownSum lowers down product n (shape s, weight w, input x) of a
// one-sequence decode program together with the moe_sum that is its only
// reader and the residual add after it, as one summing launch (MoEShape.Sum:
// the floats of the one-row product and MoESum, one launch fewer a layer;
// with xq the int8 product's, which quantises x itself, two fewer). It
// reports false, and lowers nothing, where that does not apply.
func (l *lowerer) moeDownSum(n *ir.Node, s MoEShape, w int, x view, xq int) (bool, error) {
	if l.o.Class != Decode || l.o.MaxSeqs != 1 || !s.PerSlot || len(l.users[n.ID]) != 1 {
		return false, nil
	}
	sum := l.users[n.ID][0]
	if sum.Op != ir.OpMoESum || sum.Args[0] != n || int(sum.Shape[1]) != s.N {
		return false, nil
	}
	wts, ok := l.val[sum.Args[1].ID]
	if !ok || !wts.contiguous() {
		return false, nil
	}
	add, y := l.moeResidual(sum)
	if add == nil {
		return false, nil
	}
	s.Sum = true
	if xq == 1 && MoEXQFits(s) != nil {
		return false, nil
	}
	arm := l.oneRowArm(s, DefaultMoEOneArm, xq)
	args := []Arg{wArg(w), bufArg(x), bufArg(l.val[n.Args[2].ID]), bufArg(wts), bufArg(y), rowsArg()}
	// the int8 product also quantises the new residual row for the next
	// norm's XQ 2 products, where they take one (the next layer's XQuant)
	var next *normAfter
	kern, err := MoEGEMV(s, arm)
	if xq == 1 && err == nil && l.tailOn(TailQuantNext) {
		if na := l.nextNormXQ(add, s.N); na != nil {
			q := s
			q.QuantNext = true
			if kq, qerr := MoEGEMV(q, arm); qerr == nil {
				s, kern, next = q, kq, na
			}
		}
	}
	k, err := l.kernel(kern, err)
	if err != nil {
		return false, err
	}
	if xq == 1 {
		l.repacked[k] = true
	}
	if next != nil {
		width := XQRowBytes(s.N) / 4
		xqv := view{buf: l.buffer("xq", n.Shape[0], width), width: width, stride: width}
		l.preQuant[xqKey{x: y, pro: ProNorm, nw: next.nw}] = preQuant{xq: xqv, launch: len(l.p.Launches), nodes: next.nodes}
		args = append(args, wArg(next.nw), bufArg(xqv), l.ticketsArg(1))
	}
	l.launch(k, n.Shape[0], []int{n.ID, sum.ID, add.ID}, args...)
	l.val[n.ID], l.val[sum.ID], l.val[add.ID] = y, y, y // n alone is not readable; its only reader is the sum
	l.done[sum.ID], l.done[add.ID] = true, true
	return true, nil
}

// oneRowArm is the arm of a one-sequence program's own one-row product s
// (the routing gate/up, the summing down): the geometry of its class's
// one-row pick, else def's, with the int8 or float kind xq of the
// products of its class (so that the one-row and the grouped steps add in
// one order).
func (l *lowerer) oneRowArm(s MoEShape, def MoEArm, xq int) MoEArm {
	a := def
	if p, ok := l.picked("moe_gemv", MoEClass(s)); ok && MoEArmOf(p).One == 1 {
		a = MoEArmOf(p)
	}
	a.XQ = xq
	return a
}

// moeShape returns the MoEGEMV shape of moe_matmul n (from its IR alone;
// expertWeight registers the weight), with the SwiGLU it feeds with its
// partner, if any (moeSwiGLU).
func (l *lowerer) moeShape(n *ir.Node) (s MoEShape, sw, up *ir.Node) {
	ne := n.Args[1].Ints("ne")
	s = MoEShape{Type: n.Args[1].DType("type"), N: ne[1], K: ne[0], Experts: int(n.Args[1].Shape[0]), Used: int(n.Shape[1]),
		PerSlot: len(n.Args[0].Shape) == 3}
	if sw, up = l.moeSwiGLU(n); sw != nil {
		s.SwiGLU, s.Up = true, up.Args[1].DType("type")
	}
	return s, sw, up
}

// moeSwiGLU returns the SwiGLU that gate/up moe_matmul n feeds with its
// partner (the other operand: the same x and ids, a weight of the same
// shape), when each is read by that SwiGLU alone.
func (l *lowerer) moeSwiGLU(n *ir.Node) (sw, partner *ir.Node) {
	if len(l.users[n.ID]) != 1 || l.users[n.ID][0].Op != ir.OpSwiGLU {
		return nil, nil
	}
	sw = l.users[n.ID][0]
	gate, up := sw.Args[0], sw.Args[1]
	if gate != n || up.Op != ir.OpMoEMatmul || len(l.users[up.ID]) != 1 || up.Args[0] != n.Args[0] || up.Args[2] != n.Args[2] ||
		!up.Args[1].Shape.Equal(n.Args[1].Shape) {
		return nil, nil
	}
	return sw, up
}

// moeArms returns the grouped and one-row arms of MoEGEMV s: the tunedb's
// pick of its class (a grouped pick's geometry for the grouped arm, a
// one-row pick's for the one-row arm, its XQ for both, so that one-row and
// grouped steps keep one order), else the defaults. An int8-activation pick
// (XQ 1) runs only where that class may (not the exact configuration, not
// the f16 class) and where MoEXQ takes s; elsewhere the float products do.
func (l *lowerer) moeArms(s MoEShape) (arm, one MoEArm) {
	arm, one = DefaultMoEArm, DefaultMoEOneArm
	if MoEXQFits(s) == nil {
		// untuned, the int8-activation products where they fit: 2.4-3.7x
		// the float ones on an H100 (docs/PERFORMANCE.md, session 32)
		arm.XQ, one.XQ = 1, 1
	}
	if p, ok := l.picked("moe_gemv", MoEClass(s)); ok {
		a := MoEArmOf(p)
		if a.One == 1 {
			one = a
		} else {
			arm = a
		}
		arm.XQ, one.XQ = a.XQ, a.XQ
	}
	if arm.XQ == 1 && (l.o.PrefillGEMV || (l.o.BatchInvariant && !l.o.InvariantInt8) || MoEXQFits(s) != nil) {
		arm.XQ, one.XQ = 0, 0
	}
	return arm, one
}

// moeKernels returns the kernel of MoEGEMV s a launch runs and the one-row
// kernel it runs at one-row steps (-1 for none): decode programs of two or
// more sequences run both, one-sequence programs the one-row arm alone,
// prefill the grouped arm (moeArms chooses them).
func (l *lowerer) moeKernels(s MoEShape, arm, oneArm MoEArm) (kern, one int, err error) {
	if l.o.Class == Decode && l.o.MaxSeqs == 1 {
		kern, err = l.kernel(MoEGEMV(s, oneArm))
		return kern, -1, err
	}
	if kern, err = l.kernel(MoEGEMV(s, arm)); err != nil || l.o.Class != Decode {
		return kern, -1, err
	}
	one, err = l.kernel(MoEGEMV(s, oneArm))
	return kern, one, err
}

// moeSum lowers a moe_sum: into the residual stream when an add of the
// stream is its only reader (the add is done with it), else into a buffer.
func (l *lowerer) moeSum(n *ir.Node) error {
	d, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	w, err := l.valueOf(n.Args[1])
	if err != nil {
		return err
	}
	used, N := int(n.Args[0].Shape[1]), int(n.Shape[1])
	if !d.contiguous() || d.width != used*N || !w.contiguous() {
		return fmt.Errorf("moe_sum of strided values")
	}
	rows := n.Shape[0]
	nodes := []int{n.ID}
	add, y := l.moeResidual(n)
	if add != nil {
		nodes = append(nodes, add.ID)
	} else {
		y = view{buf: l.buffer("moe_out", rows, N), width: N, stride: N}
	}
	k, err := l.kernel(MoESum(N, used, add != nil, l.blockArm("moe_sum", MoESumClass(N, used, add != nil))))
	if err != nil {
		return err
	}
	l.launch(k, rows, nodes, bufArg(d), bufArg(w), bufArg(y), rowsArg())
	l.val[n.ID] = y
	if add != nil {
		l.val[add.ID] = y
		l.done[add.ID] = true
	}
	return nil
}

// moeResidual returns the add of the residual stream that is moe_sum n's
// only reader and the stream's buffer, when the sum can be added into it
// in place (inPlaceResidual); nil otherwise.
func (l *lowerer) moeResidual(n *ir.Node) (*ir.Node, view) {
	if len(l.users[n.ID]) != 1 || l.users[n.ID][0].Op != ir.OpAdd {
		return nil, view{}
	}
	add := l.users[n.ID][0]
	y, err := l.inPlaceResidual(add, n, int(n.Shape[1]))
	if err != nil {
		return nil, view{}
	}
	return add, y
}
