package glue

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/memra-ai/memra/codegen"
)

// probeDims are the token and sequence counts a geometry rule is checked at.
var probeDims = func() []int {
	var v []int
	for n := 1; n <= 600; n++ {
		v = append(v, n)
	}
	return append(v, 777, 1000, 1024, 2048, 4095, 4096, 8192)
}()

// dimRule is one grid dimension as a function of the symbolic dims:
// ⌈Sym/Div⌉, or the constant Const when Sym is "".
type dimRule struct {
	sym   string // "Tokens", "Seqs" or ""
	div   int
	konst uint32
}

func (r dimRule) eval(d codegen.Dims) uint32 {
	switch r.sym {
	case "Tokens":
		return uint32((d.Tokens + r.div - 1) / r.div)
	case "Seqs":
		return uint32((d.Seqs + r.div - 1) / r.div)
	}
	return r.konst
}

func (r dimRule) code() jen.Code {
	if r.sym == "" {
		return jen.Lit(int(r.konst))
	}
	x := jen.Id("d").Dot(r.sym)
	if r.div == 1 {
		return jen.Uint32().Call(x)
	}
	return jen.Uint32().Call(jen.Parens(x.Op("+").Lit(r.div - 1)).Op("/").Lit(r.div))
}

// geometry recovers k's launch rule by probing it over probeDims (KVLen at
// the program's context, as every launch of p uses) and writes it as a
// codegen.Geometry expression of d; a rule of another form is an error.
func geometry(p *codegen.Program, k *codegen.Kernel) (jen.Code, error) {
	at := func(t, s int) codegen.Geometry {
		return k.Launch(codegen.Dims{Tokens: t, Seqs: s, KVLen: p.Context})
	}
	base := at(1, 1)
	var rules [3]dimRule
	for i := range rules {
		r, err := fit(func(t, s int) uint32 { return at(t, s).Grid[i] })
		if err != nil {
			return nil, fmt.Errorf("%w: %s grid[%d]: %w", ErrGlue, k.Name, i, err)
		}
		rules[i] = r
	}
	sh, err := fitShared(func(t, s int) uint32 { return at(t, s).Shared })
	if err != nil {
		return nil, fmt.Errorf("%w: %s shared memory: %w", ErrGlue, k.Name, err)
	}
	for _, n := range probeDims {
		for _, s := range []int{1, n} {
			g := at(n, s)
			if g.Block != base.Block || g.Shared != sh.eval(codegen.Dims{Tokens: n, Seqs: s}) {
				return nil, fmt.Errorf("%w: %s: block or shared memory depends on the dims", ErrGlue, k.Name)
			}
			for i, r := range rules {
				if r.eval(codegen.Dims{Tokens: n, Seqs: s}) != g.Grid[i] {
					return nil, fmt.Errorf("%w: %s grid[%d] at T=%d S=%d is %d, rule gives %d", ErrGlue, k.Name, i, n, s, g.Grid[i], r.eval(codegen.Dims{Tokens: n, Seqs: s}))
				}
			}
		}
	}
	grid := jen.Index(jen.Lit(3)).Uint32().Values(rules[0].code(), rules[1].code(), rules[2].code())
	block := jen.Index(jen.Lit(3)).Uint32().Values(jen.Lit(int(base.Block[0])), jen.Lit(int(base.Block[1])), jen.Lit(int(base.Block[2])))
	return jen.Qual(codegenPath, "Geometry").Values(jen.Dict{
		jen.Id("Grid"): grid, jen.Id("Block"): block, jen.Id("Shared"): sh.code(),
	}), nil
}

// sharedRule is a kernel's dynamic shared memory: perRow·min(Tokens, rows)
// bytes (kernels that stage up to rows activation rows), or konst.
type sharedRule struct {
	perRow uint32
	rows   int
	konst  uint32
}

func (r sharedRule) eval(d codegen.Dims) uint32 {
	if r.rows == 0 {
		return r.konst
	}
	return r.perRow * uint32(min(d.Tokens, r.rows))
}

func (r sharedRule) code() jen.Code {
	if r.rows == 0 {
		return jen.Lit(int(r.konst))
	}
	return jen.Lit(int(r.perRow)).Op("*").Uint32().Call(jen.Min(jen.Id("d").Dot("Tokens"), jen.Lit(r.rows)))
}

// fitShared finds the shared-memory rule of g(tokens, seqs): a constant, or
// g(1)·min(tokens, R) for the R at which it stops growing.
func fitShared(g func(t, s int) uint32) (sharedRule, error) {
	one := g(1, 1)
	r := sharedRule{konst: one}
	for _, n := range probeDims {
		if g(n, 1) != one {
			r = sharedRule{perRow: one, rows: 1}
			break
		}
	}
	if r.rows > 0 {
		for r.rows < probeDims[len(probeDims)-1] && g(r.rows+1, 1) == one*uint32(r.rows+1) {
			r.rows++
		}
	}
	for _, n := range probeDims {
		for _, s := range []int{1, n} {
			if got := g(n, s); got != r.eval(codegen.Dims{Tokens: n, Seqs: s}) {
				return r, fmt.Errorf("%d bytes at T=%d S=%d is neither constant nor linear in T up to a bound", got, n, s)
			}
		}
	}
	return r, nil
}

// fit finds the rule of one grid dimension g(tokens, seqs): a constant, or
// ⌈tokens/c⌉ or ⌈seqs/c⌉ for the c at which it first reaches 2.
func fit(g func(t, s int) uint32) (dimRule, error) {
	varies := func(f func(n int) uint32) (int, bool) {
		for _, n := range probeDims {
			if f(n) != f(1) {
				return n, true
			}
		}
		return 0, false
	}
	if _, ok := varies(func(n int) uint32 { return g(n, 1) }); ok {
		return ruleFor("Tokens", func(n int) uint32 { return g(n, 1) })
	}
	if _, ok := varies(func(n int) uint32 { return g(1, n) }); ok {
		return ruleFor("Seqs", func(n int) uint32 { return g(1, n) })
	}
	return dimRule{konst: g(1, 1)}, nil
}

func ruleFor(sym string, f func(n int) uint32) (dimRule, error) {
	if f(1) != 1 {
		return dimRule{}, fmt.Errorf("depends on %s but is %d at 1", sym, f(1))
	}
	for _, n := range probeDims {
		if f(n) == 2 {
			return dimRule{sym: sym, div: n - 1}, nil
		}
	}
	return dimRule{}, fmt.Errorf("depends on %s but never reaches 2", sym)
}
