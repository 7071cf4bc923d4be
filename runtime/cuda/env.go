package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/codegen"
)

// envOptions applies the environment switches: MEMRA_KV_CACHE=f16|bf16|f32|q8_0
// (the KV cache element type, when the caller chose none), and arms that
// are not yet defaults (they become tunedb choices once measured):
// MEMRA_SMALL_BATCH=1, MEMRA_FUSE=0, MEMRA_DECODE_LIVE=1|2, MEMRA_GEMV_QUANT and
// MEMRA_GEMV_BATCH (the batch-1 and batched decode GEMV of repacked
// types), MEMRA_GEMV_LARGE (the GEMV of steps of 16 rows or more: off, half, int8 or an arm),
// MEMRA_GEMV_LARGE_FROM=N (the rows from which the f16 products run),
// MEMRA_ROPE_IN_PRODUCT=0|1 (none or every program; unset, one-sequence
// programs), MEMRA_GEMV_SPLIT=off|ROWS[/K],
// MEMRA_PDL=off, MEMRA_DECODE_PRELOAD=0,
// MEMRA_MMA=ARM, MEMRA_PREFILL=blas|mma, MEMRA_ATTN_PREFILL=flash|warp. A value it cannot read is an error naming the
// variable, not a silent default. (MEMRA_DROP, a timing diagnostic, is
// read by newBackend.)
func envOptions(o *BackendOptions) error {
	bad := func(name, v, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrArg, name, v, want)
	}
	if v := os.Getenv("MEMRA_KV_CACHE"); v != "" && o.Cache == "" {
		o.Cache = v
	}
	// the 0-or-1 switches: each sets its flag when the variable equals when
	for _, e := range []struct {
		name, when string
		set        *bool
	}{{"MEMRA_SMALL_BATCH", "1", &o.SmallBatch},
		{"MEMRA_DECODE_PRELOAD", "0", &o.NoDecodePreload}} {
		switch v := os.Getenv(e.name); v {
		case "", "0", "1":
			if v == e.when {
				*e.set = true
			}
		default:
			return bad(e.name, v, "0 or 1")
		}
	}
	switch v := os.Getenv("MEMRA_ROPE_IN_PRODUCT"); v {
	case "":
	case "0":
		o.RopeInProduct = -1
	case "1":
		o.RopeInProduct = 1
	default:
		return bad("MEMRA_ROPE_IN_PRODUCT", v, "0 or 1")
	}
	switch v := os.Getenv("MEMRA_FUSE"); v {
	case "":
	case "1":
		o.FuseFloat = true
	case "0":
		o.NoFusePrologue = true
	default:
		return bad("MEMRA_FUSE", v, "0 or 1")
	}
	switch v := os.Getenv("MEMRA_QUANT_OUT"); v {
	case "":
		o.NoQuantOut |= codegen.QuantOutBatch
	case "0":
		o.NoQuantOut = codegen.QuantOutAll
	case "1":
		o.NoQuantOut = 0
	default:
		on := codegen.QuantOuts(0)
		for _, f := range strings.Split(v, ",") {
			b, ok := map[string]codegen.QuantOuts{"norm": codegen.QuantOutNorm, "swiglu": codegen.QuantOutSwiGLU,
				"attn": codegen.QuantOutAttn, "batch": codegen.QuantOutBatch}[f]
			if !ok {
				return bad("MEMRA_QUANT_OUT", v, "0, 1 or a list of norm, swiglu, attn, batch")
			}
			on |= b
		}
		o.NoQuantOut = codegen.QuantOutAll &^ on
	}
	switch v := os.Getenv("MEMRA_GEMV_SPLIT"); v {
	case "":
	case "off", "0":
		o.GEMVSplitRows = -1
	default:
		rows, k, hasK := strings.Cut(v, "/")
		n, err := strconv.Atoi(rows)
		kn, errK := 0, error(nil)
		if hasK {
			kn, errK = strconv.Atoi(k)
		}
		if err != nil || errK != nil || n <= 0 || kn < 0 {
			return bad("MEMRA_GEMV_SPLIT", v, "off, 0 or ROWS[/K] (most rows, least row length)")
		}
		o.GEMVSplitRows, o.GEMVSplitK = n, kn
	}
	// the integer switches: variable, range, what a bad value is told, where it goes
	for _, e := range []struct {
		name   string
		lo, hi int
		want   string
		set    func(int)
	}{
		{"MEMRA_DECODE_LIVE", 0, 3, "0, 1, 2 or 3", func(n int) {
			o.DecodeLive = n
			if n == 0 {
				o.DecodeLive = -1 // the whole capacity
			}
		}},
	} {
		v := os.Getenv(e.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < e.lo || n > e.hi {
			return bad(e.name, v, e.want)
		}
		e.set(n)
	}
	// the word switches: each sets its option (unless already set) to one of two words
	for _, e := range []struct {
		name, a, b string
		set        *string
	}{{"MEMRA_ATTN_PREFILL", "flash", "warp", &o.PrefillAttention}, {"MEMRA_PREFILL", "blas", "mma", &o.PrefillBLAS}} {
		switch v := os.Getenv(e.name); v {
		case "":
		case e.a, e.b:
			if *e.set == "" {
				*e.set = v
			}
		default:
			return bad(e.name, v, e.a+" or "+e.b)
		}
	}
	if v := os.Getenv("MEMRA_MMA"); v != "" {
		a, err := codegen.ParseMMAArm(v)
		if err != nil {
			return bad("MEMRA_MMA", v, "an mma arm name such as m128_n128_w2x4_p1")
		}
		o.Arms.MMA = a
	}
	const arms = "repack, xq, xqN (N 1 to 16), file or a GEMV arm name such as t256_r8_u1_s1_l1_q1_w4"
	for _, e := range []struct {
		name string
		arm  *codegen.GEMVArm
	}{{"MEMRA_GEMV_QUANT", &o.Arms.GEMVQuant}, {"MEMRA_GEMV_BATCH", &o.Arms.GEMVBatch}} {
		v := os.Getenv(e.name)
		if v == "" {
			continue
		}
		a, ok := gemvQuantArm(v)
		if !ok {
			return bad(e.name, v, arms)
		}
		*e.arm = a
	}
	// MEMRA_GEMV_LARGE: the tensor-core arm of steps of
	// codegen.GEMVLargeRows rows or more; off (the batch arm, not a
	// tensor-core one) leaves them to the batch arm, half is the f16
	// default, int8 the int8 tensor-core arm
	switch v := os.Getenv("MEMRA_GEMV_LARGE"); v {
	case "":
	case "off":
		o.Arms.GEMVLarge = o.Arms.WithDefaults().GEMVBatch
	case "half":
		o.Arms.GEMVLarge = codegen.DefaultXQHalfArm
	case "int8":
		o.Arms.GEMVLarge = codegen.DefaultXQMMAPipeArm
	default:
		a, ok := gemvQuantArm(v)
		if !ok {
			return bad("MEMRA_GEMV_LARGE", v, "off, half, int8 or "+arms)
		}
		o.Arms.GEMVLarge = a
	}
	// MEMRA_GEMV_LARGE_FROM: the step rows from which the f16 products run
	if v := os.Getenv("MEMRA_GEMV_LARGE_FROM"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > 1024 {
			return bad("MEMRA_GEMV_LARGE_FROM", v, "a number of rows from 2 to 1024")
		}
		o.HalfFrom = n
	}
	switch v := os.Getenv("MEMRA_PDL"); v {
	case "", "late":
	case "off":
		o.NoPDL = true
	default:
		return bad("MEMRA_PDL", v, "late or off")
	}
	return nil
}

// compileOptions are the NVRTC options of a kernel of the model
// (kernelOptions).
func (b *Backend) compileOptions(kernel string) []string { return kernelOptions(b.opts, kernel) }

// kernelOptions are the NVRTC options of a kernel under o: none. A kernel
// that triggers the next one early says so in its own source
// (codegen.Kernel.EarlyTrigger defines MEMRA_PDL_EARLY there).
func kernelOptions(BackendOptions, string) []string { return nil }

// LoweringEnv lists the environment variables envOptions reads: the
// switches that change what a model lowers to, recorded in a compiled
// artifact's manifest.
var LoweringEnv = []string{
	"MEMRA_ATTN_PREFILL", "MEMRA_DECODE_LIVE", "MEMRA_DECODE_PRELOAD",
	"MEMRA_FUSE", "MEMRA_GEMV_BATCH", "MEMRA_GEMV_LARGE", "MEMRA_GEMV_LARGE_FROM",
	"MEMRA_GEMV_QUANT", "MEMRA_GEMV_SPLIT", "MEMRA_KV_CACHE", "MEMRA_MMA", "MEMRA_PDL",
	"MEMRA_PREFILL", "MEMRA_QUANT_OUT", "MEMRA_ROPE_IN_PRODUCT", "MEMRA_SMALL_BATCH",
}

// LoweringEnvSet returns the LoweringEnv variables that are set, with their values.
func LoweringEnvSet() map[string]string {
	out := map[string]string{}
	for _, k := range LoweringEnv {
		if v, ok := os.LookupEnv(k); ok {
			out[k] = v
		}
	}
	return out
}

// gemvQuantArm parses MEMRA_GEMV_QUANT, the untuned GEMV of repacked weight
// types: "file" (the float GEMV on the file's layout), "repack" (float,
// repacked layout; the default), "xq" or "xqN" (int8 activations, N decode
// rows a block, default 16), or any arm in its String form
// ("t256_r8_u2_s1_l1_q16_w2").
func gemvQuantArm(v string) (codegen.GEMVArm, bool) {
	a := codegen.DefaultXQArm
	switch {
	case v == "file":
		return codegen.DefaultGEMVArm, true
	case v == "repack":
		return codegen.DefaultRepackArm, true
	case v == "xq":
		return a, true
	case strings.HasPrefix(v, "xq"):
		n, err := strconv.Atoi(v[2:])
		if err != nil || n < 1 || n > 16 {
			return a, false
		}
		a.BatchRows = n
		return a, true
	}
	if b, err := codegen.ParseGEMVArm(v); err == nil {
		return b, true
	}
	return a, false
}
