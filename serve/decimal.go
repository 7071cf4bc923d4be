package serve

import (
	"fmt"
	"math/big"
	"strings"
)

// decimal is an exact non-negative decimal number: digits × 10^−scale,
// digits without leading zeros ("" is zero) and, once normalised, without
// trailing zeros after the point. Prices are decimals so that a price per
// token shown per million tokens, and a cost summed over tokens, are the
// exact decimal results: 0.0000001 × 10⁶ is 0.1, never 0.09999999999999999.
type decimal struct {
	digits string
	scale  int
}

// maxDecimalDigits bounds the digits of a price.
const maxDecimalDigits = 40

// parseDecimal reads a plain decimal string: digits, optionally a point
// and more digits; no sign, exponent or spaces.
func parseDecimal(s string) (decimal, error) {
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" || (hasPoint && frac == "") || len(whole)+len(frac) > maxDecimalDigits {
		return decimal{}, fmt.Errorf("%q is not a decimal number such as \"0.0000001\" (at most %d digits)", s, maxDecimalDigits)
	}
	for _, c := range whole + frac {
		if c < '0' || c > '9' {
			return decimal{}, fmt.Errorf("%q is not a decimal number such as \"0.0000001\" (digits and one point only)", s)
		}
	}
	return decimal{digits: whole + frac, scale: len(frac)}.norm(), nil
}

// norm strips leading zeros and the trailing zeros of the fraction.
func (d decimal) norm() decimal {
	for d.scale > 0 && strings.HasSuffix(d.digits, "0") {
		d.digits, d.scale = d.digits[:len(d.digits)-1], d.scale-1
	}
	d.digits = strings.TrimLeft(d.digits, "0")
	if d.digits == "" {
		d.scale = 0
	}
	return d
}

// shift multiplies d by 10^n, exactly.
func (d decimal) shift(n int) decimal {
	d.scale -= n
	return d.norm()
}

// String writes d in plain notation: "0.1", "3000000", "0".
func (d decimal) String() string {
	d = d.norm()
	if d.digits == "" {
		return "0"
	}
	if d.scale <= 0 {
		return d.digits + strings.Repeat("0", -d.scale)
	}
	digits := d.digits
	if len(digits) <= d.scale {
		digits = strings.Repeat("0", d.scale-len(digits)+1) + digits
	}
	return digits[:len(digits)-d.scale] + "." + digits[len(digits)-d.scale:]
}

// bigInt is d's digits as an integer.
func (d decimal) bigInt() *big.Int {
	n, ok := new(big.Int).SetString(d.digits, 10)
	if !ok {
		n = new(big.Int) // "" is zero
	}
	return n
}

// mulInt returns d × n, exactly.
func (d decimal) mulInt(n int64) decimal {
	p := d.bigInt()
	p.Mul(p, big.NewInt(n))
	return decimal{digits: p.String(), scale: d.scale}.norm()
}

// add returns d + o, exactly.
func (d decimal) add(o decimal) decimal {
	scale := max(d.scale, o.scale)
	a := d.bigInt()
	a.Mul(a, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-d.scale)), nil))
	b := o.bigInt()
	b.Mul(b, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-o.scale)), nil))
	return decimal{digits: a.Add(a, b).String(), scale: scale}.norm()
}

// costValue is a decimal written as a JSON number in its exact plain
// notation (a JSON number is decimal text; no float rounds it on the way).
type costValue struct{ d decimal }

// MarshalJSON writes the number's digits.
func (c costValue) MarshalJSON() ([]byte, error) { return []byte(c.d.String()), nil }
