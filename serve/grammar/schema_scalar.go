package grammar

import (
	"encoding/json"
	"math"
	"regexp/syntax"
	"strconv"
	"strings"
)

// str compiles a string schema: format, or pattern, or length bounds
// (counted in JSON characters: one code point or one escape).
func (c *schemaCompiler) str(s *jobj, ptr string) (*node, error) {
	_, hasMin := s.get("minLength")
	_, hasMax := s.get("maxLength")
	if fv, ok := s.get("format"); ok {
		if k := firstOf(s, "pattern", "minLength", "maxLength"); k != "" {
			return nil, unsupported(ptr, k, "beside format")
		}
		f, _ := fv.(string)
		n := formatNode(f)
		if n == nil {
			return nil, unsupported(ptr, "format", "format "+strconv.Quote(f))
		}
		return seq(lit(`"`), n, lit(`"`)), nil
	}
	if pv, ok := s.get("pattern"); ok {
		if hasMin || hasMax {
			return nil, unsupported(ptr, "pattern", "beside minLength/maxLength")
		}
		p, _ := pv.(string)
		n, err := patternNode(p)
		if err != nil {
			return nil, unsupported(ptr, "pattern", err.Error())
		}
		return seq(lit(`"`), n, lit(`"`)), nil
	}
	lo, err := countKeyword(s, "minLength", ptr, 0)
	if err != nil {
		return nil, err
	}
	hi, err := countKeyword(s, "maxLength", ptr, -1)
	if err != nil {
		return nil, err
	}
	if hi >= 0 && lo > hi {
		return nil, invalid(ptr, "minLength above maxLength")
	}
	return seq(lit(`"`), rep(ref(c.j.char), lo, hi), lit(`"`)), nil
}

func firstOf(s *jobj, kws ...string) string {
	for _, k := range kws {
		if _, ok := s.get(k); ok {
			return k
		}
	}
	return ""
}

// bound reads a numeric keyword.
func bound(s *jobj, kw, ptr string) (float64, bool, error) {
	v, ok := s.get(kw)
	if !ok {
		return 0, false, nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, false, invalid(ptr+"/"+kw, "must be a number")
	}
	f, err := num.Float64()
	if err != nil || math.IsInf(f, 0) {
		return 0, false, invalid(ptr+"/"+kw, "must be a finite number")
	}
	return f, true, nil
}

// intCap is the largest magnitude the number grammars write.
var intCap = int64(math.Pow10(maxIntDigits)) - 1

// numericBounds returns the bounds of s as [lo, hi] with exclusivity.
func numericBounds(s *jobj, ptr string) (lo, hi float64, loEx, hiEx, any bool, err error) {
	lo, hi = math.Inf(-1), math.Inf(1)
	for _, kw := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		f, ok, err := bound(s, kw, ptr)
		if err != nil {
			return 0, 0, false, false, false, err
		}
		if !ok {
			continue
		}
		any = true
		switch kw {
		case "minimum":
			if f > lo || (f == lo && loEx) {
				lo, loEx = f, false
			}
		case "exclusiveMinimum":
			if f >= lo {
				lo, loEx = f, true
			}
		case "maximum":
			if f < hi || (f == hi && hiEx) {
				hi, hiEx = f, false
			}
		case "exclusiveMaximum":
			if f <= hi {
				hi, hiEx = f, true
			}
		}
	}
	return lo, hi, loEx, hiEx, any, nil
}

// intBounds returns the integers in the bounds, clipped to the grammar's
// magnitude cap.
func intBounds(lo, hi float64, loEx, hiEx bool) (int64, int64) {
	l := math.Ceil(lo)
	if loEx && l == lo {
		l++
	}
	h := math.Floor(hi)
	if hiEx && h == hi {
		h--
	}
	l = math.Max(l, float64(-intCap))
	h = math.Min(h, float64(intCap))
	return int64(l), int64(h)
}

// integer compiles an integer schema; bounds are exact.
func (c *schemaCompiler) integer(s *jobj, ptr string) (*node, error) {
	lo, hi, loEx, hiEx, any, err := numericBounds(s, ptr)
	if err != nil {
		return nil, err
	}
	if !any {
		return ref(c.j.integer), nil
	}
	l, h := intBounds(lo, hi, loEx, hiEx)
	if l > h {
		return nil, invalid(ptr, "no integer within the bounds")
	}
	return intRange(l, h), nil
}

// number compiles a number schema. Without bounds: any JSON number (digit
// counts capped). With bounds: the integers within them, and decimals
// i.f whose whole interval (i, i+1) lies within them, with no exponent
// and no trailing zero in the fraction: always valid, not every valid
// number.
func (c *schemaCompiler) number(s *jobj, ptr string) (*node, error) {
	lo, hi, loEx, hiEx, any, err := numericBounds(s, ptr)
	if err != nil {
		return nil, err
	}
	if !any {
		return ref(c.j.num), nil
	}
	if lo > hi || (lo == hi && (loEx || hiEx)) {
		return nil, invalid(ptr, "no number within the bounds")
	}
	var alts []*node
	if l, h := intBounds(lo, hi, loEx, hiEx); l <= h {
		alts = append(alts, intRange(l, h))
	}
	frac := seq(lit("."), rep(digit(), 0, maxFracDigits-1), class(false, rng('1', '9')))
	capF := float64(intCap)
	if a, b := math.Max(math.Ceil(lo), 0), math.Min(math.Floor(hi)-1, capF); a <= b {
		alts = append(alts, seq(posRange(int64(a), int64(b)), frac))
	}
	if a, b := math.Max(math.Ceil(-hi), 0), math.Min(math.Floor(-lo)-1, capF); a <= b {
		alts = append(alts, seq(lit("-"), posRange(int64(a), int64(b)), frac))
	}
	if len(alts) == 0 {
		return nil, unsupported(ptr, "minimum", "bounds admit no number the grammar can write")
	}
	return alt(alts...), nil
}

// intRange matches the decimal integers in [lo, hi] exactly.
func intRange(lo, hi int64) *node {
	var alts []*node
	if lo < 0 {
		alts = append(alts, seq(lit("-"), posRange(max(1, -min(hi, -1)), -lo)))
	}
	if hi >= 0 {
		alts = append(alts, posRange(max(lo, 0), hi))
	}
	return alt(alts...)
}

// posRange matches the decimal integers in [a, b], 0 ≤ a ≤ b, without
// leading zeros.
func posRange(a, b int64) *node {
	as, bs := strconv.FormatInt(a, 10), strconv.FormatInt(b, 10)
	if len(as) == len(bs) {
		return sameLenRange(as, bs)
	}
	alts := []*node{sameLenRange(as, strings.Repeat("9", len(as)))}
	for n := len(as) + 1; n < len(bs); n++ {
		alts = append(alts, sameLenRange("1"+strings.Repeat("0", n-1), strings.Repeat("9", n)))
	}
	alts = append(alts, sameLenRange("1"+strings.Repeat("0", len(bs)-1), bs))
	return alt(alts...)
}

// sameLenRange matches the digit strings of length len(a) between a and b.
func sameLenRange(a, b string) *node {
	if a == b {
		return lit(a)
	}
	n := len(a)
	d := func(lo, hi byte) *node { return class(false, rng(rune(lo), rune(hi))) }
	if n == 1 {
		return d(a[0], b[0])
	}
	if a[0] == b[0] {
		return seq(lit(a[:1]), sameLenRange(a[1:], b[1:]))
	}
	zeros, nines := strings.Repeat("0", n-1), strings.Repeat("9", n-1)
	if a[1:] == zeros && b[1:] == nines {
		return seq(d(a[0], b[0]), rep(digit(), n-1, n-1))
	}
	alts := []*node{seq(lit(a[:1]), sameLenRange(a[1:], nines))}
	if a[0]+1 <= b[0]-1 {
		alts = append(alts, seq(d(a[0]+1, b[0]-1), rep(digit(), n-1, n-1)))
	}
	alts = append(alts, seq(lit(b[:1]), sameLenRange(zeros, b[1:])))
	return alt(alts...)
}

// formatNode returns the string content of a supported format, nil for
// others.
func formatNode(f string) *node {
	d := func(lo, hi rune) *node { return class(false, rng(lo, hi)) }
	dd := func() *node { return rep(digit(), 2, 2) }
	date := func() *node {
		leap2 := alt(seq(class(false, one('0'), one('2'), one('4'), one('6'), one('8')), class(false, one('0'), one('4'), one('8'))),
			seq(class(false, one('1'), one('3'), one('5'), one('7'), one('9')), class(false, one('2'), one('6'))))
		leapYear := alt(
			seq(dd(), alt(seq(lit("0"), class(false, one('4'), one('8'))),
				seq(class(false, one('2'), one('4'), one('6'), one('8')), class(false, one('0'), one('4'), one('8'))),
				seq(class(false, one('1'), one('3'), one('5'), one('7'), one('9')), class(false, one('2'), one('6'))))),
			seq(leap2, lit("00")))
		day28 := alt(seq(lit("0"), d('1', '9')), seq(lit("1"), digit()), seq(lit("2"), d('0', '8')))
		day30 := alt(day28, lit("29"), lit("30"))
		day31 := alt(day30, lit("31"))
		m31 := alt(lit("01"), lit("03"), lit("05"), lit("07"), lit("08"), lit("10"), lit("12"))
		m30 := alt(lit("04"), lit("06"), lit("09"), lit("11"))
		return alt(
			seq(rep(digit(), 4, 4), lit("-"), alt(seq(m31, lit("-"), day31), seq(m30, lit("-"), day30), seq(lit("02-"), day28))),
			seq(leapYear, lit("-02-29")))
	}
	time := func() *node {
		hh := alt(seq(d('0', '1'), digit()), seq(lit("2"), d('0', '3')))
		mm := seq(d('0', '5'), digit())
		return seq(hh, lit(":"), mm, lit(":"), mm, opt(seq(lit("."), rep(digit(), 1, 6))),
			alt(lit("Z"), seq(class(false, one('+'), one('-')), hh, lit(":"), mm)))
	}
	hex := func(n int) *node { return rep(hexDigit(), n, n) }
	switch f {
	case "date":
		return date()
	case "time":
		return time()
	case "date-time":
		return seq(date(), lit("T"), time())
	case "uuid":
		return seq(hex(8), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(12))
	case "email":
		atom := rep(class(false, rng('a', 'z'), rng('A', 'Z'), rng('0', '9'), one('_'), one('%'), one('+'), one('-')), 1, 15)
		label := seq(class(false, rng('a', 'z'), rng('A', 'Z'), rng('0', '9')), rep(class(false, rng('a', 'z'), rng('A', 'Z'), rng('0', '9')), 0, 30))
		return seq(atom, rep(seq(lit("."), atom), 0, 3), lit("@"), label, rep(seq(lit("."), label), 1, 4))
	}
	return nil
}

// patternNode compiles a pattern (a regular expression, unanchored unless
// it starts with ^ / ends with $) to the content of a JSON string whose
// decoded value matches it.
func patternNode(p string) (*node, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil, err
	}
	branches := []*syntax.Regexp{re}
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	}
	anyChar := star(jsonChars([]cpRange{{0, 0x10FFFF}}))
	var alts []*node
	for _, br := range branches {
		subs := []*syntax.Regexp{br}
		if br.Op == syntax.OpConcat {
			subs = br.Sub
		}
		startAnch, endAnch := false, false
		if len(subs) > 0 && (subs[0].Op == syntax.OpBeginText || subs[0].Op == syntax.OpBeginLine) {
			startAnch, subs = true, subs[1:]
		}
		if k := len(subs); k > 0 && (subs[k-1].Op == syntax.OpEndText || subs[k-1].Op == syntax.OpEndLine) {
			endAnch, subs = true, subs[:k-1]
		}
		var parts []*node
		if !startAnch {
			parts = append(parts, anyChar)
		}
		for _, sub := range subs {
			n, err := regexNode(sub)
			if err != nil {
				return nil, err
			}
			parts = append(parts, n)
		}
		if !endAnch {
			parts = append(parts, anyChar)
		}
		alts = append(alts, seq(parts...))
	}
	return alt(alts...), nil
}

func regexNode(re *syntax.Regexp) (*node, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return empty(), nil
	case syntax.OpLiteral:
		var parts []*node
		for _, r := range re.Rune {
			rs := []cpRange{one(r)}
			if re.Flags&syntax.FoldCase != 0 {
				for f := simpleFold(r); f != r; f = simpleFold(f) {
					rs = append(rs, one(f))
				}
			}
			parts = append(parts, jsonChars(rs))
		}
		return seq(parts...), nil
	case syntax.OpCharClass:
		var rs []cpRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			rs = append(rs, cpRange{re.Rune[i], re.Rune[i+1]})
		}
		return jsonChars(rs), nil
	case syntax.OpAnyCharNotNL:
		return jsonChars([]cpRange{{0, '\n' - 1}, {'\n' + 1, 0x10FFFF}}), nil
	case syntax.OpAnyChar:
		return jsonChars([]cpRange{{0, 0x10FFFF}}), nil
	case syntax.OpCapture:
		return regexNode(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		var kids []*node
		for _, s := range re.Sub {
			k, err := regexNode(s)
			if err != nil {
				return nil, err
			}
			kids = append(kids, k)
		}
		if re.Op == syntax.OpConcat {
			return seq(kids...), nil
		}
		return alt(kids...), nil
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		k, err := regexNode(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return star(k), nil
		case syntax.OpPlus:
			return plus(k), nil
		case syntax.OpQuest:
			return opt(k), nil
		}
		if re.Min > maxRepeat || re.Max > maxRepeat {
			return nil, errTooManyRepeats
		}
		return rep(k, re.Min, re.Max), nil
	}
	return nil, &unsupportedRegex{re.Op}
}
