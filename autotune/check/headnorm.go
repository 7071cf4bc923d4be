package check

import (
	"fmt"
	"math/rand/v2"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
)

// HeadNorm is the in-place per-head RMSNorm (qwen3's and Gemma 3's q/k
// norm) over tokens fused QKV rows of shape sh: its heads of the q part
// (part "q": sh.Heads heads from column 0), of the k part ("k":
// sh.HeadsKV heads after q) or of both in one launch with their two
// weights ("qk"), checked against the CPU on the whole row (the
// other columns must stay as they were).
func HeadNorm(sh codegen.Shape, part string, tokens int, seed uint64) *Case {
	stride := (sh.Heads + 2*sh.HeadsKV) * sh.HeadDim
	hs := codegen.HeadNormShape{Heads: sh.Heads, HeadDim: sh.HeadDim, Stride: stride, Eps: sh.Eps}
	switch part {
	case "k":
		hs.Heads, hs.Offset = sh.HeadsKV, sh.Heads*sh.HeadDim
	case "qk": // one launch for both, as lowering runs them
		hs.Heads2 = sh.HeadsKV
	}
	c := &Case{Family: "head_rmsnorm", Label: "head_rmsnorm/" + part, Shape: sh.Name, DType: "f32",
		Class: fmt.Sprintf("h%d_k%d_d%d_o%d_s%d", hs.Heads, hs.Heads2, hs.HeadDim, hs.Offset, hs.Stride), Tol: 1e-5, seed: seed, space: blockSpace("head_rmsnorm")}
	c.kernels = func(arm codegen.Point) ([]*codegen.Kernel, error) {
		return one(codegen.HeadRMSNorm(hs, codegen.BlockArmOf(arm)))
	}
	return rowCase(c, tokens, func(r *rand.Rand) ([]Arg, []*Buf, func() [][]float32) {
		x, w, w2 := randn(r, tokens*stride), randn(r, sh.HeadDim), randn(r, sh.HeadDim)
		xb := fbuf(x)
		args := []Arg{b(xb), b(fbuf(w)), s(tokens)}
		if hs.Heads2 > 0 {
			args = []Arg{b(xb), b(fbuf(w)), b(fbuf(w2)), s(tokens)}
		}
		return args, []*Buf{xb}, func() [][]float32 { return [][]float32{codegen.RefHeadRMSNorm(hs, x, w, w2)} }
	})
}

// RopeKVNorm is RoPE + KV-cache write after the q and k heads' RMSNorm in
// the same launch (codegen.RopeKVNorm, a layer's q/k norms as fusing
// decode programs run them) for tokens rows of shape sh, checked against
// the CPU's head norms and then its RoPE: the rotated q in the row, k and
// v in the caches; the row's k part stays as it was.
func RopeKVNorm(sh codegen.Shape, tokens int, seed uint64) *Case {
	eps := sh.Eps
	return ropeCase(sh.Name, "rope_kv+qk_norm", sh.Rope(dtype.F16), &eps, tokens, seed)
}
