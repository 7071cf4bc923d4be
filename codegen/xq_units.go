package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// The int8-activation products' weight units: each 16-byte unit of a
// weight row unpacked once into int8 words and its factors (xqPrep, xw),
// then met with each activation row's group (xq_load, xq_dot: dp4a and the
// group's term), row after row (emitXQCompute) or each row's loads one row
// ahead (emitXQComputePrefetch, GEMVArm.Prefetch).

// xqPrep is, per weight type, the unpacking of a 16-byte unit of one
// weight row of an XQ 2 product (registers of slot i of unit uu, named as
// rpTypes' and renamed per row by xqRename) into an xw: done once per unit
// and row, then used by xqUse for each activation row of the block.
var xqPrep = map[dtype.Type]string{
	dtype.Q4_0: "xw_q4_0(q[i], dh[i])",
	dtype.Q8_0: "xw_q8_0(q[i], dh[i])",
	dtype.Q4_K: "xw_q4_k(q[i], hd[i], uu)",
	dtype.Q6_K: "xw_q6_k(q[i], qh[i], sc[i], dh[i])",
}

// emitXQWeightHelpers writes dp4a, the xw unit of unpacked weights, the
// unpacking of t's units (xqPrep) and xq_use, the dot of an unpacked unit
// with one activation row's group uu: the expressions of the XQ 1 dots
// (emitXQHelpers) split into the part of the weights alone and the part
// of each activation row.
func emitXQWeightHelpers(w *Writer, t dtype.Type) {
	emitDP4A(w)
	emitXQTerms(w, t)
	w.Comment("One unpacked weight unit: int8 words (lo against the activations' first 16 bytes, hi the next 16) and the unit's factors.")
	w.Line("struct xw { uint4 lo, hi; float a, b; };")
	w.Blank()
	nib := func(w *Writer) {
		w.Line("r.lo = make_uint4(q.x & 0x0f0f0f0fu, q.y & 0x0f0f0f0fu, q.z & 0x0f0f0f0fu, q.w & 0x0f0f0f0fu);")
		w.Line("r.hi = make_uint4((q.x >> 4) & 0x0f0f0f0fu, (q.y >> 4) & 0x0f0f0f0fu, (q.z >> 4) & 0x0f0f0f0fu, (q.w >> 4) & 0x0f0f0f0fu);")
	}
	// use writes xq_load (group uu of one activation row: its int8 words
	// and its meta, as load reads them), xq_dot (an unpacked unit against
	// loaded activations: body) and xq_use, the two in one: a kernel that
	// loads a row's group ahead of its dots (GEMVArm.Prefetch) calls the
	// first two apart, with the same arithmetic.
	use := func(load []string, body ...string) {
		w.Comment("An activation row's group uu: its int8 words and its meta.")
		w.Line("struct xa { int4 x0, x1; float4 m; };")
		w.Blank()
		w.Emit(Func{Name: "xq_load", Return: "xa", Params: []Param{{"const int4*", "xr"}, {"const float4*", "mt"}, {"int", "uu"}},
			Body: func(w *Writer) {
				w.Line("xa a;")
				for _, l := range load {
					w.Line(l)
				}
				w.Line("return a;")
			}})
		w.Comment("The unpacked unit against one activation row's loaded group.")
		w.Emit(Func{Name: "xq_dot", Return: "float", Params: []Param{{"const xw&", "u"}, {"const xa&", "x"}},
			Body: func(w *Writer) {
				for _, l := range body {
					w.Line(l)
				}
			}})
		w.Comment("The unpacked unit against group uu of one activation row.")
		w.Emit(Func{Name: "xq_use", Return: "float", Params: []Param{{"const xw&", "u"}, {"const int4*", "xr"}, {"const float4*", "mt"}, {"int", "uu"}},
			Body: func(w *Writer) { w.Line("return xq_dot(u, xq_load(xr, mt, uu));") }})
	}
	pair := []string{"a.x0 = xr[2 * uu];", "a.x1 = xr[2 * uu + 1];", "a.m = mt[uu];"}
	dots := func(lo, hi, x0, x1 string) []string {
		var out []string
		for c := range 4 {
			out = append(out, fmt.Sprintf("s%s = dp4a((int)u.lo.%s, %s.%s, s%s);", lo, f4[c], x0, f4[c], lo))
		}
		for c := range 4 {
			out = append(out, fmt.Sprintf("s%s = dp4a((int)u.hi.%s, %s.%s, s%s);", hi, f4[c], x1, f4[c], hi))
		}
		return out
	}
	switch t {
	case dtype.Q4_0, dtype.Q4_K:
		if t == dtype.Q4_0 {
			w.Comment("A Q4_0 unit: quants q - 8 (centred through the activation sums), a = d.")
			w.Emit(Func{Name: "xw_q4_0", Return: "xw", Params: []Param{{"uint4", "q"}, {"u16", "dh"}}, Body: func(w *Writer) {
				w.Line("xw r;")
				nib(w)
				w.Line("r.a = f16_to_f32(dh);")
				w.Line("r.b = 0.f;")
				w.Line("return r;")
			}})
		} else {
			w.Comment("A Q4_K unit (sub-block uu & 7 of its super-block): a = d·scale, b = 8a - dmin·min.")
			w.Emit(Func{Name: "xw_q4_k", Return: "xw", Params: []Param{{"uint4", "q"}, {"uint4", "hd"}, {"int", "uu"}}, Body: func(w *Writer) {
				w.Line("xw r;")
				nib(w)
				w.Line("float mn;")
				w.Line("q4k_dm(hd, uu & 7, r.a, mn);")
				w.Line("r.b = 8.f * r.a - mn;")
				w.Line("return r;")
			}})
		}
		body := append([]string{"int s = 0;"}, dots("", "", "x.x0", "x.x1")...)
		if t == dtype.Q4_0 {
			body = append(body, "const float4 m = x.m;", "return xq_term(u.a, m.x, (float)s - 8.f * (m.y + m.z));")
		} else {
			body = append(body, "const float4 m = x.m;",
				"// Σ (d q - mn) x = a dx Σ (q - 8) xq + (8a - mn) Σ x",
				"return xq_term(u.a, u.b, m.x, (float)s - 8.f * (m.y + m.z), m.w);")
		}
		use(pair, body...)
	case dtype.Q8_0:
		w.Comment("A Q8_0 unit (16 elements): the quants as they are, a = d.")
		w.Emit(Func{Name: "xw_q8_0", Return: "xw", Params: []Param{{"uint4", "q"}, {"u16", "dh"}}, Body: func(w *Writer) {
			w.Line("xw r;")
			w.Line("r.lo = q;")
			w.Line("r.hi = make_uint4(0u, 0u, 0u, 0u);")
			w.Line("r.a = f16_to_f32(dh);")
			w.Line("r.b = 0.f;")
			w.Line("return r;")
		}})
		body := []string{"int s = 0;"}
		for c := range 4 {
			body = append(body, fmt.Sprintf("s = dp4a((int)u.lo.%s, x.x0.%s, s);", f4[c], f4[c]))
		}
		load := []string{"a.x0 = xr[uu];", "a.x1 = make_int4(0, 0, 0, 0);", "a.m = make_float4(mt[uu >> 1].x, 0.f, 0.f, 0.f);"}
		use(load, append(body, "return u.a * x.m.x * (float)s;")...)
	case dtype.Q6_K:
		emitQ6Words(w)
		w.Comment("A Q6_K unit: 6-bit quants (centred through the activation sums), a and b = d times the halves' scales.")
		w.Emit(Func{Name: "xw_q6_k", Return: "xw", Params: []Param{{"uint4", "q"}, {"uint2", "qh"}, {"u16", "sc"}, {"u16", "dh"}}, Body: func(w *Writer) {
			w.Line("xw r;")
			w.Line("q6_words(q.x, qh.x, 0, r.lo.x, r.hi.x);")
			w.Line("q6_words(q.y, qh.x, 1, r.lo.y, r.hi.y);")
			w.Line("q6_words(q.z, qh.y, 0, r.lo.z, r.hi.z);")
			w.Line("q6_words(q.w, qh.y, 1, r.lo.w, r.hi.w);")
			w.Line("const float d = f16_to_f32(dh);")
			w.Line("r.a = d * (float)(signed char)(sc & 0xffu);")
			w.Line("r.b = d * (float)(signed char)(sc >> 8);")
			w.Line("return r;")
		}})
		body := append([]string{"int s0 = 0, s1 = 0;"}, dots("0", "1", "x.x0", "x.x1")...)
		use(pair, append(body, "const float4 m = x.m;",
			"return xq_term(u.a, u.b, m.x, (float)s0 - 32.f * m.y, (float)s1 - 32.f * m.z);")...)
	default:
		panic(fmt.Sprintf("BUG: no int8-activation GEMV for %v", t))
	}
}

// emitXQUnits writes the loop over the U units from u on (weight registers
// of buffer buf): each unit of each of the warp's rw weight rows unpacked
// once into w0…, then rows, its products with the block's activation rows.
func emitXQUnits(w *Writer, t dtype.Type, rw int, buf string, rows func()) {
	w.For("i", "0", "U", "1", -1, func() {
		w.Line("const int uu = u + i * 32;")
		w.If("uu < UPR", func() {
			for r := range rw {
				w.Linef("const xw w%d = %s;", r, xqBuffer(xqRename(xqPrep[t], r), buf))
			}
			rows()
		})
	})
}

// emitXQAdd writes each of the warp's rw weight rows' term of activation
// row j (term of the row's unpacked unit) added to its sum.
func emitXQAdd(w *Writer, rw int, term func(wr string) string) {
	for r := range rw {
		w.Linef("acc[%d][j] = __fadd_rn(acc[%d][j], %s);", r, r, term(fmt.Sprintf("w%d", r)))
	}
}

// emitXQCompute writes the products of the U units from u on (weight
// registers of buffer buf) with the block's activation rows: each unit of
// each of the warp's rw weight rows unpacked once, then met with row j's
// int8 words at xr and group factors at mt.
func emitXQCompute(w *Writer, t dtype.Type, rw int, buf, xr, mt string) {
	emitXQUnits(w, t, rw, buf, func() {
		w.For("j", "0", "MB", "1", -1, func() {
			w.If("j < mrows", func() {
				w.Linef("const int4* xr = %s;", xr)
				w.Linef("const float4* mt = %s;", mt)
				emitXQAdd(w, rw, func(wr string) string { return "xq_use(" + wr + ", xr, mt, uu)" })
			})
		})
	})
}

// emitXQComputePrefetch is emitXQCompute for GEMVArm.Prefetch: each
// unit's activation rows loaded one row ahead of their dots (xr and mt
// are formats of the row), every row's terms the same as emitXQCompute's.
func emitXQComputePrefetch(w *Writer, t dtype.Type, rw int, buf, xr, mt string) {
	load := func(row string) string {
		return fmt.Sprintf("xq_load(%s, %s, uu)", fmt.Sprintf(xr, row), fmt.Sprintf(mt, row))
	}
	emitXQUnits(w, t, rw, buf, func() {
		w.Comment("a block has at least one row")
		w.Linef("xa xn = %s;", load("0"))
		w.For("j", "0", "MB", "1", -1, func() {
			w.Line("const xa xc = xn;")
			w.If("j + 1 < MB && j + 1 < mrows", func() { w.Linef("xn = %s;", load("j + 1")) })
			w.If("j < mrows", func() {
				emitXQAdd(w, rw, func(wr string) string { return "xq_dot(" + wr + ", xc)" })
			})
		})
	})
}
