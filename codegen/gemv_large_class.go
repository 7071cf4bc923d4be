package codegen

import (
	"fmt"

	"github.com/memra-ai/memra/ir/dtype"
)

// GEMVLargeClass is the shape class under which the tunedb keeps the large
// arm (Launch.Large: decode steps of HalfLargeRows rows or more for an f16
// arm, GEMVLargeRows for an int8 one) of the product of class. Its entry
// names a tensor-core arm, the f16 (XQ 4) or the int8 (XQ 3) one, or an
// XQ 2 arm, which leaves those steps to the batch kernel. Untuned they run
// Arms.GEMVLarge (DefaultXQHalfArm where the type has an f16 kernel).
func GEMVLargeClass(class string) string { return class + "_large" }

// GEMVLargeSpaceFor is the gemv space of the large arms of products with
// repacked weights of type t: tensor-core arms of 16 rows a block, XQ 4
// where t has an f16 kernel (HalfTypes) and XQ 3, one or two row sets
// with their split, two tiles of 16 weight rows a warp, rings of two or
// four stages. Its default is the arm lowering runs untuned.
func GEMVLargeSpaceFor(t dtype.Type) Space {
	xq, def := []int{3}, DefaultXQMMAPipeArm
	if mmahTypes[t] {
		xq, def = []int{3, 4}, DefaultXQHalfArm
	}
	return classGEMVSpace(t, map[string][]int{"threads": {256, 512}, "rows_per_block": {1, 2}, "unroll": {1, 2}, "layout": {1}, "shared_x": {1},
		"xq": xq, "batch_rows": {16}, "rows_per_warp": {2}, "stages": {2, 4}}, def,
		func(a GEMVArm) bool { return a.XQ == 3 || a.XQ == 4 }, errNotLarge)
}

// errNotLarge refuses an arm of the large space that is not a tensor-core one.
var errNotLarge = fmt.Errorf("%w: gemv large space: want an XQ 3 or XQ 4 arm", ErrUnsupported)

// largePick is the large arm of the product of class before the checks of
// largeArm: the tunedb's pick for GEMVLargeClass(class), else
// Arms.GEMVLarge. An f16 pick is passed over where the program cannot
// take f16 rows (LowerOptions.noHalfPick, Lower's second try).
func (l *lowerer) largePick(class string) GEMVArm {
	if p, ok := l.picked("gemv", GEMVLargeClass(class)); ok {
		if a := GEMVArmOf(p); a.XQ != 4 || !l.o.noHalfPick {
			return a
		}
	}
	return l.arms.GEMVLarge
}
