package codegen

import (
	"fmt"
	"slices"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// RoPE with the KV-cache write, RoPE in the QKV product, and attention.

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
	rows := q.Shape[0]
	nodes := []int{q.ID, k.ID, kvw.ID}
	arm := l.blockArm("rope_kv", RopeKVClass(rs))
	var kern int
	var norms []Arg
	hn, normed := l.ropeNorms[q.ID]
	switch {
	case normed && RopeKVNormFits(rs, arm) && hn.shape.Offset == qv.off && hn.shape.Heads == H && hn.shape.Heads2 == Hkv:
		// the layer's q/k norms (headNorm left them here): the weights after the caches
		nodes = append(slices.Clone(hn.nodes), nodes...)
		if ok, err := l.headRopeInProducts(q, k, v, qv, rs, w, layer, nodes, &hn, arm); err != nil || ok {
			l.val[q.ID] = qv
			return err
		}
		kern, err = l.kernel(RopeKVNorm(rs, hn.shape.Eps, arm))
		norms = hn.args[1:]
	case normed:
		if err := l.launchHeadNorm(hn, rows); err != nil {
			return err
		}
		fallthrough
	default:
		if ok, err := l.ropeInProducts(q, k, v, qv, rs, w, layer, nodes); err != nil || ok {
			l.val[q.ID] = qv
			return err
		}
		if ok, err := l.headRopeInProducts(q, k, v, qv, rs, w, layer, nodes, nil, arm); err != nil || ok {
			l.val[q.ID] = qv
			return err
		}
		kern, err = l.kernel(RopeKV(rs, arm))
	}
	if err != nil {
		return err
	}
	args := append([]Arg{bufArg(view{buf: qv.buf, off: qv.off}), inArg(InPositions), inArg(InSlots), wArg(w),
		cacheArg(layer, false), cacheArg(layer, true)}, norms...)
	l.launch(kern, rows, nodes, append(args, rowsArg())...)
	l.val[q.ID] = qv
	return nil
}

// ropeInProducts gives the product launches that wrote the fused [q | k |
// v] rows qkv the RoPE epilogue (XQEnds.Rope; LowerOptions.RopeInProduct,
// or the narrow tail TailNarrowRope) and reports whether it did: q, k and v must come straight from XQ 2
// products covering the row, and every kernel of those launches must have
// the epilogue (a large-batch kernel without it is dropped: the batch
// kernel serves those steps; none may read XHalf's f16 rows, XQ 4; the
// 8-bit cache, whose blocks of 32 a product's lanes do not hold together,
// keeps RopeKV). It changes nothing unless all of that holds.
func (l *lowerer) ropeInProducts(q, k, v *ir.Node, qkv view, rs RopeShape, inv, layer int, nodes []int) (bool, error) {
	if !(l.o.RopeInProduct || l.narrowOn(TailNarrowRope)) || l.o.Class != Decode || rs.Half || rs.Cache == CacheQ8 {
		return false, nil
	}
	if !fromProducts(q.Args[0], k.Args[0], v) {
		return false, nil
	}
	idx := l.qkvLaunches(qkv, rs)
	for _, i := range idx {
		if l.xqLaunches[i].large.XQ == 4 {
			// its large steps read f16 rows, which the batch kernel
			// taking them without an XQ 4 RoPE epilogue could not
			return false, nil
		}
	}
	if idx == nil {
		return false, nil
	}
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

// qkvLaunches returns the XQ 2 product launches that write the fused
// [q | k | v] rows qkv, in order, or nil unless they cover the row.
func (l *lowerer) qkvLaunches(qkv view, rs RopeShape) []int {
	var idx []int
	width := 0
	for i, xl := range l.xqLaunches {
		if xl.y.buf == qkv.buf {
			idx = append(idx, i)
			width += xl.y.width
		}
	}
	if width != rs.QKVStride() {
		return nil
	}
	slices.Sort(idx)
	return idx
}

// fromProducts reports whether each of ns is a product's output (through
// reshapes), not a bias's, a norm's or another op's: a head norm launched
// on its own runs after the products, so they cannot rotate before it.
func fromProducts(ns ...*ir.Node) bool {
	for _, n := range ns {
		for n.Op == ir.OpReshape {
			n = n.Args[0]
		}
		if n.Op != ir.OpMatmul {
			return false
		}
	}
	return true
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
		args := []Arg{qa, kc, vc, pagesArg(), inArg(InKVBase), inArg(InKVLen), bufArg(pov), bufArg(pmlv), constArg(splits)}
		if arm.Fuse {
			// the combine in the partial kernel: a ticket a (sequence, kv head)
			k, err := l.kernel(DecodeAttentionFused(s, arm, xq))
			if err != nil {
				return err
			}
			writeDst(k, append(args, l.ticketsArg(l.o.MaxSeqs*Hkv), bufArg(dst))...)
			break
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
		l.launch(kp, ir.S, []int{att.ID}, args...)
		kc2, _ := l.kernel(c, nil)
		writeDst(kc2, bufArg(pov), bufArg(pmlv), inArg(InKVLen), bufArg(dst), constArg(splits))
	case l.o.FlashPrefill && FlashSupported(s):
		fa := l.flashArm(s)
		k, err := l.kernel(FlashPrefillAttention(s, fa))
		if err != nil {
			return err
		}
		if l.p.FlashRows != 0 && l.p.FlashRows != fa.Rows() {
			return fmt.Errorf("%w: tensor-core prefill attention of %d and %d rows a tile in one program", ErrUnsupported, l.p.FlashRows, fa.Rows())
		}
		l.p.FlashRows = fa.Rows()
		l.launch(k, rows, []int{att.ID}, qa, kc, vc, pagesArg(), inArg(InTokBase), inArg(InPositions), inArg(InTiles), bufArg(out), rowsArg())
	default:
		k, err := l.kernel(PrefillAttention(s, l.prefillArm(AttnClass(s))))
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
