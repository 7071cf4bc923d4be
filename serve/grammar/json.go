package grammar

// Whitespace policy of every JSON grammar here (json_object and
// json_schema): no whitespace before the top-level value or after it;
// between tokens inside objects and arrays, nothing, one space, or one
// newline followed by at most maxIndent spaces or tabs. So generation
// cannot spin on whitespace, and compact and pretty-printed JSON (up to
// ten levels of two-space indentation) both fit.
const maxIndent = 20

// Number bounds: an integer part of at most maxIntDigits digits, a
// fraction of at most maxFracDigits, an exponent of at most maxExpDigits.
const (
	maxIntDigits  = 18
	maxFracDigits = 16
	maxExpDigits  = 2
)

// jsonRules holds the shared rules of JSON grammars in one builder.
type jsonRules struct {
	b                                  *builder
	ws, value, str, char, num, integer int
	object, array                      int
}

// newJSONRules defines ws, value, string, number and friends in b.
func newJSONRules(b *builder) *jsonRules {
	j := &jsonRules{b: b}
	j.ws = b.rule("ws")
	b.define(j.ws, alt(empty(), lit(" "), seq(lit("\n"), rep(class(false, one(' '), one('\t')), 0, maxIndent))))
	j.char = b.rule("char")
	b.define(j.char, alt(
		class(true, one('"'), one('\\'), rng(0, 0x1F), one(0x7F)),
		seq(lit(`\`), alt(class(false, one('"'), one('\\'), one('/'), one('b'), one('f'), one('n'), one('r'), one('t')),
			seq(lit("u"), rep(hexDigit(), 4, 4)))),
	))
	j.str = b.rule("string")
	b.define(j.str, seq(lit(`"`), star(ref(j.char)), lit(`"`)))
	j.integer = b.rule("integer")
	b.define(j.integer, seq(opt(lit("-")), intDigits()))
	j.num = b.rule("number")
	b.define(j.num, seq(opt(lit("-")), intDigits(),
		opt(seq(lit("."), rep(digit(), 1, maxFracDigits))),
		opt(seq(class(false, one('e'), one('E')), opt(class(false, one('-'), one('+'))), rep(digit(), 1, maxExpDigits)))))
	j.value = b.rule("value")
	j.object = b.rule("object")
	j.array = b.rule("array")
	b.define(j.value, alt(ref(j.object), ref(j.array), ref(j.str), ref(j.num), lit("true"), lit("false"), lit("null")))
	member := seq(ref(j.str), ref(j.ws), lit(":"), ref(j.ws), ref(j.value), ref(j.ws))
	b.define(j.object, seq(lit("{"), ref(j.ws), opt(seq(member, star(seq(lit(","), ref(j.ws), member)))), lit("}")))
	item := seq(ref(j.value), ref(j.ws))
	b.define(j.array, seq(lit("["), ref(j.ws), opt(seq(item, star(seq(lit(","), ref(j.ws), item)))), lit("]")))
	return j
}

func digit() *node    { return class(false, rng('0', '9')) }
func hexDigit() *node { return class(false, rng('0', '9'), rng('a', 'f'), rng('A', 'F')) }

// intDigits matches the digits of a JSON integer without sign.
func intDigits() *node {
	return alt(lit("0"), seq(class(false, rng('1', '9')), rep(digit(), 0, maxIntDigits-1)))
}

// JSONObject returns the grammar of response_format {"type":"json_object"}:
// any JSON object, under the whitespace policy of docs/GRAMMAR.md.
func JSONObject() *Grammar {
	b := newBuilder()
	root := b.rule("root")
	j := newJSONRules(b)
	b.define(root, ref(j.object))
	g, err := lower(b, root)
	if err != nil {
		panic("BUG: grammar: json_object grammar: " + err.Error())
	}
	return g
}
