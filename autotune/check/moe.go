package check

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// MoECases are the mixture-of-experts cases of shape s (none for a dense
// shape): the routing at one token, a decode batch and a prefill chunk;
// the router's product at one token and a decode batch (routerCheckArms),
// alone and with the norm before it (MoERouterNorm);
// for each weight type the gate/up pair (SwiGLU) and the down product at
// one token (with the one-row arm too), a decode batch of 12 and, for the
// gate/up pair, a prefill chunk of 64; the down product that sums into the
// residual at one token; the weighted sum into the residual. For the
// repacked types the products also run their int8-activation arms (XQ 1).
func MoECases(s codegen.Shape, types []dtype.Type, seed uint64) []*Case {
	if s.Experts == 0 {
		return nil
	}
	cs := []*Case{
		MoERoute(s.Name, s.Experts, s.ExpertsUsed, s.ExpertNorm, 1, seed),
		MoERoute(s.Name, s.Experts, s.ExpertsUsed, s.ExpertNorm, 12, seed),
		MoERoute(s.Name, s.Experts, s.ExpertsUsed, s.ExpertNorm, 300, seed),
		MoESum(s.Name, s.Hidden, s.ExpertsUsed, 12, seed),
	}
	// the router's float32 product (gemv/router: a layer's experts × hidden),
	// with arms of more blocks than the untuned one's experts/8
	for _, m := range []int{1, 12} {
		c := Product(s.Name, "gemv", "router", dtype.F32, s.Experts, s.Hidden, m, false, seed)
		c.Label = fmt.Sprintf("moe_router×%d", m) // kernel-check --only moe selects it
		cs = append(cs, withArms(routerCheckArms, c)...)
		// with the norm before it, as decode programs run it
		cs = append(cs, withArms(routerCheckArms[:4], MoERouterNorm(s.Name, s.Experts, s.Hidden, s.Eps, m, false, seed))...)
		cs = append(cs, MoERouterNorm(s.Name, s.Experts, s.Hidden, s.Eps, m, true, seed)) // for the int8 experts
	}
	for _, t := range types {
		gu, dn := codegen.MoEShapes(s, t)
		for _, c := range []struct {
			use    string
			p      codegen.MoEShape
			tokens []int
		}{{"gate_up", gu, []int{1, 12, 64}}, {"down", dn, []int{1, 12}}} {
			if !rowOK(t, c.p.K) {
				continue
			}
			for _, m := range c.tokens {
				cs = append(cs, MoEProduct(s.Name, c.use, c.p, m, seed))
			}
		}
		if rowOK(t, gu.K) {
			cs = append(cs, MoERouted(s.Name, gu, s.ExpertNorm, seed))
		}
		if rowOK(t, dn.K) {
			cs = append(cs, MoEDownSum(s.Name, dn, seed))
			if codegen.MoEXQFits(dn) == nil {
				cs = append(cs, MoEDownSumQuant(s.Name, dn, seed))
			}
		}
	}
	return cs
}

// routerCheckArms are float GEMV arms of one to four rows a block that
// kernel-check times beside the family's default t256_r8_u4_s1 on a
// router's product: 128 experts give that arm 16 blocks (9.4 µs a layer on
// an H100 in a qwen3-30b-a3b step, docs/PERFORMANCE.md session 29), these
// 32 to 128; the fifth, t128_r2_u4_s1, is codegen.DefaultRouterArm since
// session 30 (2.9 against 6.5 µs at one token on the H100).
var routerCheckArms = []codegen.GEMVArm{
	{Threads: 32, RowsPerBlock: 1, Unroll: 4, SharedX: 1},
	{Threads: 64, RowsPerBlock: 2, Unroll: 4, SharedX: 1},
	{Threads: 128, RowsPerBlock: 4, Unroll: 4, SharedX: 1},
	{Threads: 64, RowsPerBlock: 1, Unroll: 4, SharedX: 1},
	{Threads: 128, RowsPerBlock: 2, Unroll: 4, SharedX: 1},
}

// MoERoute is the router kernel over m tokens of random logits (the first
// token's two largest equal): the ids must be the reference's exactly
// and the groups group the slots by expert (else the error is +Inf); the
// error is the weights'.
func MoERoute(shape string, experts, used int, norm bool, m int, seed uint64) *Case {
	c := &Case{Family: "moe_route", Label: fmt.Sprintf("moe_route×%d", m), Shape: shape, DType: "f32",
		Class: codegen.MoERouteClass(experts, used, norm), Tol: 1e-5, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.MoERoute(experts, used, norm, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		logits := randn(r, m*experts)
		if experts > 2 {
			logits[1], logits[2] = 10, 10 // a tie: the lower expert first
		}
		ids, wts := codegen.RefMoERoute(experts, used, norm, logits)
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				ib, wb := ibuf(make([]int32, m*used)), fbuf(make([]float32, m*used))
				gb := ibuf(make([]int32, experts+1+m*used))
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
					Args: [][]Arg{{b(fbuf(logits)), b(ib), b(wb), b(gb), s(m)}}, Outs: []*Buf{ib, wb, gb}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				got := bytesI32(outs[0])
				if !slices.Equal(got, ids) {
					return math.Inf(1), nil
				}
				if codegen.CheckMoEGroups(experts, got, bytesI32(outs[2])) != nil {
					return math.Inf(1), nil
				}
				return codegen.RelErr(bytesF32(outs[1]), wts), nil
			},
		}, nil
	}
	return c
}

// moeRouting returns the ids of m tokens routed by random logits, and the
// groups MoERoute would write for them (the slots of each expert in
// order; the kernels do not depend on the order).
func moeRouting(r *rand.Rand, experts, used, m int) (ids, groups []int32) {
	ids, _ = codegen.RefMoERoute(experts, used, true, randn(r, m*experts))
	groups = make([]int32, experts+1, experts+1+len(ids))
	for _, e := range ids {
		groups[e+1]++
	}
	for e := 1; e <= experts; e++ {
		groups[e] += groups[e-1]
	}
	for e := 0; e < experts; e++ {
		for sl, x := range ids {
			if int(x) == e {
				groups = append(groups, int32(sl))
			}
		}
	}
	return ids, groups
}

// MoEProduct is the chosen experts' product of shape p for m tokens
// (routed by random logits), as lowering runs it: the grouped arm, and at
// one token the one-row arm as well; for the repacked types also an arm on
// int8 activations (XQ 1: codegen.MoEXQ after the XQuant launch that
// quantises its rows, weights repacked). The reference dequantises only
// the chosen experts' rows, in parallel over row ranges.
func MoEProduct(shape, use string, p codegen.MoEShape, m int, seed uint64) *Case {
	dt := strings.ToLower(p.Type.String())
	c := &Case{Family: "moe_gemv", Label: "moe_gemv/" + use, Shape: shape, DType: dt, Class: codegen.MoEClass(p), Use: use, Tol: 1e-4,
		seed: seed, K: p.K, N: p.N}
	xq := codegen.DefaultMoEArm
	if m > 1 {
		c.Label += fmt.Sprintf("×%d", m)
		// grouped arms only: a one-row arm serves one token
		sp, err := codegen.SpaceByName("moe_gemv")
		if err != nil {
			panic("BUG: " + err.Error())
		}
		sp = sp.Narrowed(map[string][]int{"one": {0}})
		c.space = &sp
	} else {
		c.ExtraArms = []codegen.Point{codegen.DefaultMoEOneArm.Point()}
		xq = codegen.DefaultMoEOneArm
	}
	xq.XQ = 1
	if codegen.MoEXQFits(p) == nil {
		c.ExtraArms = append(c.ExtraArms, xq.Point())
	}
	// the activations' row: a token's (a slot's rows side by side for the down product)
	xk := p.K
	if p.PerSlot {
		xk = p.Used * p.K
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		a := codegen.MoEArmOf(arm)
		if a.One == 1 && m != 1 {
			return nil, fmt.Errorf("%w: a one-row arm at %d tokens", ErrCase, m)
		}
		k, err := codegen.MoEGEMV(p, a)
		if err != nil || a.XQ == 0 {
			return one(k, err)
		}
		q, err := codegen.XQuant(xk, codegen.Prologue{})
		if err != nil {
			return nil, err
		}
		return []*codegen.Kernel{q, k}, nil
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(p.Type, p.Experts*p.N, p.K, r.Uint64())
		if err != nil {
			return nil, err
		}
		var Wu []byte
		if p.SwiGLU {
			if Wu, err = randWeights(p.Up, p.Experts*p.N, p.K, r.Uint64()); err != nil {
				return nil, err
			}
		}
		packed := lazy(func() ([]byte, error) { return codegen.Repack(p.Type, p.Experts*p.N, p.K, W) })
		packedUp := lazy(func() ([]byte, error) { return codegen.Repack(p.Up, p.Experts*p.N, p.K, Wu) })
		ids, groups := moeRouting(r, p.Experts, p.Used, m)
		rows := m
		if p.PerSlot {
			rows = m * p.Used
		}
		x := randn(r, rows*p.K)
		ref := lazy(func() ([]float32, error) { return refMoEGEMV(p, W, Wu, x, ids) })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y := fbuf(make([]float32, m*p.Used*p.N))
				if codegen.MoEArmOf(arm).XQ == 0 {
					args := []Arg{b(&Buf{Data: W})}
					if p.SwiGLU {
						args = append(args, b(&Buf{Data: Wu}))
					}
					args = append(args, b(fbuf(x)), b(ibuf(ids)), b(ibuf(groups)), b(y), s(m))
					return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m}, Args: [][]Arg{args}, Outs: []*Buf{y}}, nil
				}
				pw, err := packed()
				if err != nil {
					return nil, err
				}
				args := []Arg{b(&Buf{Data: pw})}
				if p.SwiGLU {
					pu, err := packedUp()
					if err != nil {
						return nil, err
					}
					args = append(args, b(&Buf{Data: pu}))
				}
				xq := &Buf{Data: make([]byte, m*codegen.XQRowBytes(xk))}
				args = append(args, b(xq), b(ibuf(ids)), b(ibuf(groups)), b(y), s(m))
				// XQuant: a row a token (x's m·Used slot rows are m token rows of Used·K)
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
					Args: [][]Arg{{b(fbuf(x)), b(xq), s(m)}, args}, Outs: []*Buf{y}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}

// oneRowCase is the case of MoEGEMV p that runs one-row arms only (the
// summing and the routing products), float ones unless xq (then also the
// int8 arms, after an XQuant launch of the token's row), the untuned
// one-row arm its default; its setup is the caller's.
func oneRowCase(shape, label, use string, p codegen.MoEShape, xq bool, seed uint64) *Case {
	sp, err := codegen.SpaceByName("moe_gemv")
	if err != nil {
		panic("BUG: " + err.Error())
	}
	sp.Default = codegen.DefaultMoEOneArm.Point()
	c := &Case{Family: "moe_gemv", Label: label, Shape: shape, DType: strings.ToLower(p.Type.String()), Class: codegen.MoEClass(p), Use: use,
		Tol: 1e-4, seed: seed, K: p.K, N: p.N, space: &sp}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		a := codegen.MoEArmOf(arm)
		if a.One != 1 || (a.XQ != 0 && !xq) {
			return nil, fmt.Errorf("%w: %s runs float one-row arms", ErrCase, label)
		}
		k, err := codegen.MoEGEMV(p, a)
		if err != nil || a.XQ == 0 || p.Sum {
			return one(k, err) // the summing int8 product quantises its rows itself
		}
		q, err := codegen.XQuant(p.K, codegen.Prologue{})
		if err != nil {
			return nil, err
		}
		return []*codegen.Kernel{q, k}, nil
	}
	if xq && codegen.MoEXQFits(p) == nil {
		a := codegen.DefaultMoEOneArm
		a.XQ = 1
		b := a
		b.RowsPerBlock = 16 // half the blocks (the summing product quantises the slots' rows in each)
		c.ExtraArms = []codegen.Point{a.Point(), b.Point()}
	}
	return c
}

// oneRowTuned restricts one-row case c of shape p to the arms lowering
// runs for it untuned: one-row arms of one slot a weight read, int8 where
// the type has the kernels (codegen.MoEXQFits), the row count free; the
// default the untuned one-row arm. (Lowering takes a pick's geometry and
// keeps the int8 or float choice of the class's products.)
func oneRowTuned(c *Case, p codegen.MoEShape) *Case {
	xq := 0
	if codegen.MoEXQFits(p) == nil {
		xq = 1
	}
	sp := c.Space().Narrowed(map[string][]int{"one": {1}, "batch_rows": {1}, "xq": {xq}})
	a := codegen.DefaultMoEOneArm
	a.XQ = xq
	sp.Default = a.Point()
	c.space = &sp
	c.ExtraArms = nil
	return c
}

// MoEDownSum is the down product of a one-token step that adds its slots'
// rows, weighted, into the residual stream (codegen.MoEShape.Sum, one-row
// arms; the int8 arm quantises the float slot rows itself): the reference
// is the down product's then MoESum's.
func MoEDownSum(shape string, dn codegen.MoEShape, seed uint64) *Case {
	return moeDownSumCase(shape, dn, false, seed)
}

// MoERouted is the gate/up product of a one-token step that chooses the
// experts itself from the router's logits (codegen.MoEShape.Route,
// one-row arms): its ids must be MoERoute's reference choice exactly, and
// its weights and product are checked against the reference routing's and
// product's. The float one-row arm and, where the type has them, the int8
// one (codegen.MoEXQ with Route, after the XQuant launch of the token's row).
func MoERouted(shape string, gu codegen.MoEShape, norm bool, seed uint64) *Case {
	p := gu
	p.Route, p.Norm = true, norm
	c := oneRowCase(shape, "moe_gemv/gate_up+route", "gate_up", p, true, seed)
	c.setup = func(r *rand.Rand) (*inputs, error) {
		W, err := randWeights(p.Type, p.Experts*p.N, p.K, r.Uint64())
		if err != nil {
			return nil, err
		}
		Wu, err := randWeights(p.Up, p.Experts*p.N, p.K, r.Uint64())
		if err != nil {
			return nil, err
		}
		logits := randn(r, p.Experts)
		if p.Experts > 2 {
			logits[1], logits[2] = 10, 10 // a tie: the lower expert first
		}
		ids, wts := codegen.RefMoERoute(p.Experts, p.Used, norm, logits)
		x := randn(r, p.K)
		ref := lazy(func() ([]float32, error) { return refMoEGEMV(gu, W, Wu, x, ids) })
		packed := lazy(func() ([2][]byte, error) {
			pw, err := codegen.Repack(p.Type, p.Experts*p.N, p.K, W)
			if err != nil {
				return [2][]byte{}, err
			}
			pu, err := codegen.Repack(p.Up, p.Experts*p.N, p.K, Wu)
			return [2][]byte{pw, pu}, err
		})
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y, ib, wb := fbuf(make([]float32, p.Used*p.N)), ibuf(make([]int32, p.Used)), fbuf(make([]float32, p.Used))
				if codegen.MoEArmOf(arm).XQ == 0 {
					return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: 1}, Args: [][]Arg{{b(&Buf{Data: W}), b(&Buf{Data: Wu}), b(fbuf(x)), b(fbuf(logits)),
						b(ib), b(wb), b(y), s(1)}}, Outs: []*Buf{y, ib, wb}}, nil
				}
				pk, err := packed()
				if err != nil {
					return nil, err
				}
				xq := &Buf{Data: make([]byte, codegen.XQRowBytes(p.K))}
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: 1}, Args: [][]Arg{{b(fbuf(x)), b(xq), s(1)},
					{b(&Buf{Data: pk[0]}), b(&Buf{Data: pk[1]}), b(xq), b(fbuf(logits)), b(ib), b(wb), b(y), s(1)}}, Outs: []*Buf{y, ib, wb}}, nil
			},
			compare: func(outs [][]byte) (float64, error) {
				if !slices.Equal(bytesI32(outs[1]), ids) {
					return math.Inf(1), nil
				}
				want, err := ref()
				if err != nil {
					return 0, err
				}
				return math.Max(codegen.RelErr(bytesF32(outs[0]), want), codegen.RelErr(bytesF32(outs[2]), wts)), nil
			},
		}, nil
	}
	return c
}

// refMoEGEMV is codegen.RefMoEGEMV split over ranges of each expert's rows
// on all cores.
func refMoEGEMV(p codegen.MoEShape, W, Wu []byte, x []float32, ids []int32) ([]float32, error) {
	rb, err := p.Type.RowBytes(p.K)
	if err != nil {
		return nil, err
	}
	ub := 0
	if p.SwiGLU {
		if ub, err = p.Up.RowBytes(p.K); err != nil {
			return nil, err
		}
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), p.N/32))
	per := (p.N + workers - 1) / workers
	y := make([]float32, len(ids)*p.N)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		r0, r1 := w*per, min(p.N, (w+1)*per)
		if r0 >= r1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// rows [r0, r1) of every expert, as the matrices of a narrower product
			sub := p
			sub.N = r1 - r0
			var ws, us []byte
			for e := 0; e < p.Experts; e++ {
				ws = append(ws, W[(e*p.N+r0)*rb:(e*p.N+r1)*rb]...)
				if p.SwiGLU {
					us = append(us, Wu[(e*p.N+r0)*ub:(e*p.N+r1)*ub]...)
				}
			}
			ys, err := codegen.RefMoEGEMV(sub, ws, us, x, ids)
			if err != nil {
				errs[w] = err
				return
			}
			for sl := range ids {
				copy(y[sl*p.N+r0:sl*p.N+r1], ys[sl*sub.N:(sl+1)*sub.N])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return y, nil
}

// MoESum is the weighted sum of m tokens' experts' rows of n added into a
// residual stream.
func MoESum(shape string, n, used, m int, seed uint64) *Case {
	c := &Case{Family: "moe_sum", Label: fmt.Sprintf("moe_sum×%d", m), Shape: shape, DType: "f32", Class: codegen.MoESumClass(n, used, true),
		Tol: 1e-5, seed: seed}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.MoESum(n, used, true, codegen.BlockArmOf(arm)))
	}
	c.setup = func(r *rand.Rand) (*inputs, error) {
		d, y0 := randn(r, m*used*n), randn(r, m*n)
		_, wts := codegen.RefMoERoute(used+1, used, true, randn(r, m*(used+1)))
		ref := lazy(func() ([]float32, error) { return codegen.RefMoESum(n, used, d, wts, y0), nil })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				y := fbuf(y0)
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: m},
					Args: [][]Arg{{b(fbuf(d)), b(fbuf(wts)), b(y), s(m)}}, Outs: []*Buf{y}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}

func bytesI32(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// moeTuneCases are the mixture-of-experts cases a model of shape s with
// weights w needs tuned (none for a dense shape): the routing, the sum and
// the router's float32 product at the decode batch, the gate/up pair
// (w.FFNUp) and the downs (w.Downs, else w.FFNDown) in their grouped arm
// at the batch arms' batch.
func moeTuneCases(s codegen.Shape, w Weights, z Sizes, seed uint64) []*Case {
	if s.Experts == 0 {
		return nil
	}
	bt := z.BatchTokens
	if bt <= 0 {
		bt = BatchTuneTokens
	}
	cs := []*Case{MoERoute(s.Name, s.Experts, s.ExpertsUsed, s.ExpertNorm, z.DecodeTokens, seed),
		MoESum(s.Name, s.Hidden, s.ExpertsUsed, z.DecodeTokens, seed),
		// the router's float32 product (routers are F32) with the norm
		// before it, as decode programs run it (codegen.RouterNorm), whose
		// class lowering looks up (codegen.RouterArm)
		MoERouterNorm(s.Name, s.Experts, s.Hidden, s.Eps, z.DecodeTokens, false, seed)}
	gu, _ := codegen.MoEShapes(s, w.FFNUp)
	if rowOK(gu.Type, gu.K) {
		cs = append(cs, MoEProduct(s.Name, "gate_up", gu, bt, seed))
		// a one-sequence program's routing gate/up product, its own class
		cs = append(cs, oneRowTuned(MoERouted(s.Name, gu, s.ExpertNorm, seed), gu))
	}
	downs := w.Downs
	if len(downs) == 0 {
		downs = []dtype.Type{w.FFNDown}
	}
	seen := map[dtype.Type]bool{}
	for _, t := range downs {
		if _, dn := codegen.MoEShapes(s, t); !seen[t] && rowOK(t, dn.K) {
			seen[t] = true
			cs = append(cs, MoEProduct(s.Name, "down", dn, bt, seed))
			// a one-sequence program's summing down product, its own class
			sum := dn
			sum.Sum = true
			cs = append(cs, oneRowTuned(MoEDownSum(s.Name, dn, seed), sum))
		}
	}
	return cs
}
