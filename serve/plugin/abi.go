package plugin

import "github.com/tetratelabs/wazero/api"

// ABIVersion is the plugin ABI this host speaks (docs/PLUGINS.md).
const ABIVersion = 1

// Render statuses (byte 0 of memra_render's result) and step flags (bits
// of the high half of memra_grammar_step's result).
const (
	statusOK    = 0
	statusError = 1

	flagMayEnd = 1 << 0
	flagError  = 1 << 1
)

// export indexes the ABI's functions.
type export int

const (
	expABIVersion export = iota
	expAlloc
	expFree
	expLastError
	expRender
	expSetVocab
	expGrammarNew
	expGrammarStep
	expGrammarFree
	numExports
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// exportSpec is one row of the ABI table: the name, the signature and which
// kinds of plugin need it.
type exportSpec struct {
	name     string
	params   []api.ValueType
	results  []api.ValueType
	template bool // required of template plugins
	grammar  bool // required of grammar plugins
}

// exports is the ABI v1 table, indexed by export.
var exports = [numExports]exportSpec{
	expABIVersion:  {"memra_abi_version", nil, []api.ValueType{i32}, true, true},
	expAlloc:       {"memra_alloc", []api.ValueType{i32}, []api.ValueType{i32}, true, true},
	expFree:        {"memra_free", []api.ValueType{i32}, nil, true, true},
	expLastError:   {"memra_last_error", nil, []api.ValueType{i64}, false, true},
	expRender:      {"memra_render", []api.ValueType{i32, i32}, []api.ValueType{i64}, true, false},
	expSetVocab:    {"memra_grammar_set_vocab", []api.ValueType{i32, i32}, []api.ValueType{i32}, false, true},
	expGrammarNew:  {"memra_grammar_new", []api.ValueType{i32, i32}, []api.ValueType{i32}, false, true},
	expGrammarStep: {"memra_grammar_step", []api.ValueType{i32, i32}, []api.ValueType{i64}, false, true},
	expGrammarFree: {"memra_grammar_free", []api.ValueType{i32}, nil, false, true},
}

// kind is what a module is loaded as.
type kind int

const (
	kindTemplate kind = iota
	kindGrammar
)

func (k kind) String() string {
	if k == kindTemplate {
		return "template"
	}
	return "grammar"
}

func (e exportSpec) requiredBy(k kind) bool {
	if k == kindTemplate {
		return e.template
	}
	return e.grammar
}

// unpack splits a ptr<<32|len (or flags<<32|ptr) result.
func unpack(v uint64) (hi, lo uint32) { return uint32(v >> 32), uint32(v) }

func signature(params, results []api.ValueType) string {
	s := "("
	for i, p := range params {
		if i > 0 {
			s += ", "
		}
		s += api.ValueTypeName(p)
	}
	s += ")"
	for i, r := range results {
		if i == 0 {
			s += " -> "
		}
		s += api.ValueTypeName(r)
	}
	return s
}
