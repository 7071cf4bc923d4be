package cuda

import (
	"fmt"
	"strings"
)

// Numerics is the numerical class of a backend's decode products: what a
// sequence's logits may depend on besides its own tokens.
type Numerics uint8

const (
	// NumericsDefault is DefaultNumerics: the class of options that name
	// none.
	NumericsDefault Numerics = iota
	// NumericsWidth runs each decode width's fastest products (a one-row
	// int8 kernel, a dp4a batch kernel at two rows, f16 tensor cores from
	// three), so a sequence's logits, and a near-tied greedy token, can
	// depend on what shares its steps ("off").
	NumericsWidth
	// NumericsF16 runs the f16 tensor-core products at every decode width,
	// one row included, where the weights' type has them
	// (codegen.LowerOptions.BatchInvariant; "f16").
	NumericsF16
	// NumericsInt8 is the int8 class of batch invariance: the one-row
	// int8 kernels and the one-sequence program as tuned, and at every
	// other width kernels that add each row's terms in the one-row
	// kernel's order (codegen.LowerOptions.InvariantInt8; "int8").
	NumericsInt8
)

// DefaultNumerics is the class of a backend whose options name none: the
// int8 class, so a sequence's greedy output does not depend on what shares
// its steps. It costs nothing at one row and the speed of wide steps (on
// an H200, llama2-7b q4_k_m: 1.01x off's tg128 at one row, 0.76x at 5,
// 0.64x at 16, 0.44x at 64; docs/PERFORMANCE.md, session 28); the f16
// class costs one row 0.60x instead. --batch-invariant=off is the speed.
const DefaultNumerics = NumericsInt8

// Resolve is n with NumericsDefault replaced by DefaultNumerics.
func (n Numerics) Resolve() Numerics {
	if n == NumericsDefault {
		return DefaultNumerics
	}
	return n
}

// String is the class's name on the command line: off, f16 or int8.
func (n Numerics) String() string {
	switch n.Resolve() {
	case NumericsF16:
		return "f16"
	case NumericsInt8:
		return "int8"
	}
	return "off"
}

// Invariant reports whether a sequence's decode logits are independent
// of its step's width and neighbours in class n.
func (n Numerics) Invariant() bool { return n.Resolve() != NumericsWidth }

// ParseNumerics reads a class's name: off (or false), f16 (or true, on),
// int8; "" is NumericsDefault. Case is ignored.
func ParseNumerics(s string) (Numerics, error) {
	switch strings.ToLower(s) {
	case "":
		return NumericsDefault, nil
	case "off", "false":
		return NumericsWidth, nil
	case "f16", "true", "on":
		return NumericsF16, nil
	case "int8":
		return NumericsInt8, nil
	}
	return NumericsDefault, fmt.Errorf("%w: numerical class %q: want int8, f16 or off", ErrArg, s)
}
