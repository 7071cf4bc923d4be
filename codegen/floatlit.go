package codegen

import (
	"fmt"
	"strings"
)

// identFloat spells f for a kernel name: its shortest decimal form with
// "p" for the point and "m" for a minus sign ("2p5", "1em05").
func identFloat(f float32) string {
	return strings.NewReplacer(".", "p", "-", "m", "+", "").Replace(fmt.Sprintf("%g", f))
}
