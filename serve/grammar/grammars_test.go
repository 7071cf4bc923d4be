package grammar

// GBNF grammars shared by the tests.
const (
	arithmeticGBNF = `root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"
number ::= [0-9]{1,4}
`
	csvGBNF = `# one CSV line of 1 to 5 fields
root ::= field ("," field){0,4}
field ::= [a-zA-Z0-9 ]{0,12} | "\"" ([^"\n] | "\"\""){0,12} "\""
`
	namesGBNF = `root ::= "[" name (", " name){0,5} "]"
name ::= [A-Z] [a-z]{1,10}
`
)
