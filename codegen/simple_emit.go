package codegen

import "strings"

// ifChain writes "if (c0) {…} else if (c1) {…} …" with an optional final
// else (els may be nil).
func ifChain(w *Writer, conds []string, bodies []func(), els func()) {
	for i, c := range conds {
		if i == 0 {
			w.Linef("if (%s) {", c)
		} else {
			w.Linef("} else if (%s) {", c)
		}
		w.indent++
		bodies[i]()
		w.indent--
	}
	if els != nil {
		w.Line("} else {")
		w.indent++
		els()
		w.indent--
	}
	w.Line("}")
}

// aligned16 is the C condition that every pointer of ptrs is 16-byte
// aligned (the float4 paths take it; any other alignment takes the scalar
// path, so a kernel's contract does not change).
func aligned16(ptrs ...string) string {
	ps := make([]string, len(ptrs))
	for i, p := range ptrs {
		ps[i] = "(size_t)" + p
	}
	return "((" + strings.Join(ps, " | ") + ") & 15) == 0"
}
