package codegen

import (
	"fmt"
	"strings"
)

// cfloatLit is cfloat with a decimal point where the shortest form has
// none ("50.0f", not "50f", which C reads as an integer with a bad suffix).
func cfloatLit(f float32) string {
	s := cfloat(f)
	if strings.HasSuffix(s, "f") && !strings.ContainsAny(s, ".en") {
		s = strings.TrimSuffix(s, "f") + ".0f"
	}
	return s
}

// identFloat spells f for a kernel name: its shortest decimal form with
// "p" for the point and "m" for a minus sign ("2p5", "1em05").
func identFloat(f float32) string {
	return strings.NewReplacer(".", "p", "-", "m", "+", "").Replace(fmt.Sprintf("%g", f))
}
