// Package codegen turns kernel families into CUDA C source specialised to a
// model's shapes and weight types.
//
// Every family is a Go function from (constant shapes, weight dtype, arm) to
// a [Kernel]: its name, its source and its launch geometry rule. Source is
// built with a small structured emitter ([Writer]) rather than templates, so
// the output is readable, indented and pinned by golden files. Generated
// kernels include no CUDA headers (half and bfloat16 conversions are bit
// arithmetic or inline PTX), so they compile on any NVRTC, and sm_90a-only
// code sits behind #if defined(__CUDA_ARCH_FEAT_SM90_ALL).
//
// Each family has a CPU reference here too ([reference.go]): plain Go in
// float32/float64 that every kernel is checked against.
package codegen

import (
	"fmt"
	"strings"
)

// Writer builds CUDA C source line by line with automatic indentation.
type Writer struct {
	b      strings.Builder
	indent int
}

// Line writes one statement or declaration as is.
func (w *Writer) Line(s string) {
	if s == "" {
		w.b.WriteByte('\n')
		return
	}
	w.b.WriteString(strings.Repeat("    ", w.indent))
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

// Linef writes one statement formatted like fmt.Sprintf.
func (w *Writer) Linef(format string, args ...any) { w.Line(fmt.Sprintf(format, args...)) }

// Blank writes an empty line.
func (w *Writer) Blank() { w.b.WriteByte('\n') }

// Comment writes a // comment line.
func (w *Writer) Comment(format string, args ...any) { w.Line("// " + fmt.Sprintf(format, args...)) }

// Raw writes a line with no indentation (preprocessor directives).
func (w *Writer) Raw(s string) { w.b.WriteString(s + "\n") }

// Block writes "header {", the body one level deeper, and "}".
func (w *Writer) Block(header string, body func()) {
	w.Linef("%s {", header)
	w.indent++
	body()
	w.indent--
	w.Line("}")
}

// If writes an if statement.
func (w *Writer) If(cond string, body func()) { w.Block("if ("+cond+")", body) }

// IfElse writes an if/else statement.
func (w *Writer) IfElse(cond string, then, els func()) {
	w.Linef("if (%s) {", cond)
	w.indent++
	then()
	w.indent--
	w.Line("} else {")
	w.indent++
	els()
	w.indent--
	w.Line("}")
}

// For writes "for (int v = from; v < to; v += step)". unroll > 0 adds
// "#pragma unroll N", unroll < 0 a plain "#pragma unroll" (full unroll of a
// constant trip count).
func (w *Writer) For(v, from, to, step string, unroll int, body func()) {
	switch {
	case unroll > 0:
		w.Linef("#pragma unroll %d", unroll)
	case unroll < 0:
		w.Line("#pragma unroll")
	}
	inc := v + " += " + step
	if step == "1" {
		inc = "++" + v
	}
	w.Block(fmt.Sprintf("for (int %s = %s; %s < %s; %s)", v, from, v, to, inc), body)
}

// IfArch wraps body in #if cond / #endif (cond is a preprocessor expression).
func (w *Writer) IfArch(cond string, body func()) {
	w.Raw("#if " + cond)
	body()
	w.Raw("#endif")
}

// String returns the source written so far.
func (w *Writer) String() string { return w.b.String() }

// Param is one kernel parameter.
type Param struct {
	Type string // C type, e.g. "const float* __restrict__"
	Name string
}

// Func describes a __global__ kernel or a __device__ helper.
type Func struct {
	Name         string
	Params       []Param
	Global       bool // extern "C" __global__; else static __device__ __forceinline__
	Return       string
	LaunchBounds int // __launch_bounds__(n) on kernels when > 0
	MinBlocks    int // with LaunchBounds: its second argument, the blocks a multiprocessor, when > 0
	Body         func(w *Writer)
}

// Emit writes f.
func (w *Writer) Emit(f Func) {
	ps := make([]string, len(f.Params))
	for i, p := range f.Params {
		ps[i] = p.Type + " " + p.Name
	}
	var head string
	if f.Global {
		head = `extern "C" __global__ void `
		switch {
		case f.LaunchBounds > 0 && f.MinBlocks > 0:
			head += fmt.Sprintf("__launch_bounds__(%d, %d) ", f.LaunchBounds, f.MinBlocks)
		case f.LaunchBounds > 0:
			head += fmt.Sprintf("__launch_bounds__(%d) ", f.LaunchBounds)
		}
	} else {
		ret := f.Return
		if ret == "" {
			ret = "void"
		}
		head = "static __device__ __forceinline__ " + ret + " "
	}
	sig := head + f.Name + "(" + strings.Join(ps, ", ") + ")"
	if len(sig) > 110 && len(ps) > 1 {
		sig = head + f.Name + "(\n        " + strings.Join(ps, ",\n        ") + ")"
	}
	w.Block(sig, func() { f.Body(w) })
	w.Blank()
}
