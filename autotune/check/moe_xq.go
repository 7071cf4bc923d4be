package check

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// moeXQCases are the experts' products on int8 activations (codegen.MoEXQ,
// not lowered yet) at the shapes of the float ones they would replace: the
// gate/up pair and the down product at one token (one-row arms) and at 12
// (grouped arms), for the repacked types.
func moeXQCases(s codegen.Shape, t dtype.Type, seed uint64) []*Case {
	if !codegen.Repackable(t) {
		return nil
	}
	gu, dn := codegen.MoEShapes(s, t)
	var cs []*Case
	for _, c := range []struct {
		use string
		p   codegen.MoEShape
	}{{"gate_up", gu}, {"down", dn}} {
		if !rowOK(t, c.p.K) {
			continue
		}
		for _, m := range []int{1, 12} {
			if _, err := codegen.MoEXQ(c.p, moeXQDefault(m)); err != nil {
				continue // rows too long for the lanes' registers
			}
			cs = append(cs, MoEXQProduct(s.Name, c.use, c.p, m, seed))
		}
	}
	return cs
}

// moeXQDefault is the arm a MoEXQ case of m tokens runs first: the float
// product's one-row arm at one token, its grouped arm otherwise.
func moeXQDefault(m int) codegen.MoEArm {
	if m == 1 {
		return codegen.DefaultMoEOneArm
	}
	return codegen.DefaultMoEArm
}

// MoEXQProduct is codegen.MoEXQ of shape p for m tokens (routed by random
// logits) after the XQuant launch that quantises its activation rows, with
// arms of 4 and 16 rows a block (and of 4 and 16 slots a chunk when
// grouped) beside the default; the reference is the float product's, the
// tolerance the int8 activations' (codegen.XQTol).
func MoEXQProduct(shape, use string, p codegen.MoEShape, m int, seed uint64) *Case {
	dt := strings.ToLower(p.Type.String())
	sp, err := codegen.SpaceByName("moe_gemv") // the same knobs
	if err != nil {
		panic("BUG: " + err.Error())
	}
	sp.Default = moeXQDefault(m).Point()
	c := &Case{Family: "moe_xq", Label: "moe_xq/" + use, Shape: shape, DType: dt, Class: codegen.MoEXQClass(p), Use: use,
		Tol: codegen.XQTol, seed: seed, K: p.K, N: p.N, space: &sp}
	if m > 1 {
		c.Label += fmt.Sprintf("×%d", m)
		c.ExtraArms = []codegen.Point{{"rows_per_block": 4, "batch_rows": 8, "one": 0}, {"rows_per_block": 8, "batch_rows": 4, "one": 0},
			{"rows_per_block": 8, "batch_rows": 16, "one": 0}}
	} else {
		c.ExtraArms = []codegen.Point{{"rows_per_block": 4, "batch_rows": 1, "one": 1}, {"rows_per_block": 16, "batch_rows": 1, "one": 1}}
	}
	rows := m
	if p.PerSlot {
		rows = m * p.Used
	}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		a := codegen.MoEArmOf(arm)
		if (a.One == 1) != (m == 1) {
			return nil, fmt.Errorf("%w: arm %v at %d tokens", ErrCase, a, m)
		}
		q, err := codegen.XQuant(p.K, codegen.Prologue{})
		if err != nil {
			return nil, err
		}
		k, err := codegen.MoEXQ(p, a)
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
		packedUp := lazy(func() ([]byte, error) {
			if Wu == nil {
				return nil, nil
			}
			return codegen.Repack(p.Up, p.Experts*p.N, p.K, Wu)
		})
		ids, groups := moeRouting(r, p.Experts, p.Used, m)
		x := randn(r, rows*p.K)
		ref := lazy(func() ([]float32, error) { return refMoEGEMV(p, W, Wu, x, ids) })
		return &inputs{
			launch: func(arm codegen.Point) (*Launch, error) {
				ks, err := c.Kernels(arm)
				if err != nil {
					return nil, err
				}
				pw, err := packed()
				if err != nil {
					return nil, err
				}
				xq := &Buf{Data: make([]byte, rows*codegen.XQRowBytes(p.K))}
				y := fbuf(make([]float32, m*p.Used*p.N))
				args := []Arg{b(&Buf{Data: pw})}
				if p.SwiGLU {
					pu, err := packedUp()
					if err != nil {
						return nil, err
					}
					args = append(args, b(&Buf{Data: pu}))
				}
				args = append(args, b(xq), b(ibuf(ids)), b(ibuf(groups)), b(y), s(m))
				// XQuant's grid is a block a row: Dims.Tokens is its rows (MoEXQ's grid does not read it)
				return &Launch{Kernels: ks, Dims: codegen.Dims{Tokens: rows},
					Args: [][]Arg{{b(fbuf(x)), b(xq), s(rows)}, args}, Outs: []*Buf{y}}, nil
			},
			compare: relErrTo(ref),
		}, nil
	}
	return c
}
