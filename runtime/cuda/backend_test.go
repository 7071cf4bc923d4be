package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/kv"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/synth"
)

const storiesPath = "../../testdata/models/tinyllamas-stories-260k-f32.gguf"

// storiesGreedy are stories260K's greedy ids from BOS (the CPU reference's).
var storiesGreedy = []int32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}

func cpuBackend(t *testing.T, m *load.Model) *cpu.Backend {
	t.Helper()
	b, err := cpu.New(m, cpu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openModel(t *testing.T, path string) *load.Model {
	t.Helper()
	m, err := load.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// gpuOrSkip skips without a GPU or NVRTC, saying which is missing.
func gpuOrSkip(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no CUDA GPU: %v", err)
	}
	if _, err := LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
}

func gpuBackend(t *testing.T, m *load.Model, o BackendOptions) *Backend {
	t.Helper()
	o.CacheDir = filepath.Join(t.TempDir(), "cubin")
	b, err := NewBackend(m, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// TestLowerStoriesPrograms lowers both classes through the backend's path
// (no GPU needed) and checks the figures the memory check uses.
func TestLowerStoriesPrograms(t *testing.T) {
	m := openModel(t, storiesPath)
	dec, pre, err := Lower(m, BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	require.Equal(t, codegen.Decode, dec.Class)
	require.Equal(t, codegen.Prefill, pre.Class)
	require.Equal(t, 512, dec.Context, "stories' context (512) caps the default")
	require.Equal(t, 4, dec.MaxTokens)
	require.Equal(t, 512, pre.MaxTokens)
	require.NotEqual(t, -1, dec.Argmax)
	ws, n := uniqueWeights(dec, pre)
	require.Len(t, ws, len(dec.Weights), "both programs read the same weights")
	require.Positive(t, n)
	// 5 layers × K and V × 16 positions a page × 32 f16 elements × 2 bytes
	require.Equal(t, codegen.DefaultPageSize, dec.PageSize)
	require.Equal(t, int64(5*2*16*32*2), dec.PageBytes())
	_, _, err = Lower(m, BackendOptions{Cache: "q4"})
	require.ErrorIs(t, err, ErrArg)
}

// TestFillInputs checks the step inputs, the packed page tables and the
// padding rows of a bucket.
func TestFillInputs(t *testing.T) {
	pool, err := kv.NewPool(10, 4)
	require.NoError(t, err)
	b := &Backend{opts: BackendOptions{Context: 100, MaxSeqs: 4}, inCap: 8, trash: 10, pool: pool}
	a, c := []int32{3, 7, 1}, []int32{2, 5}
	b.fillInputs([]piece{{pages: a, pos: 5, tokens: []int32{7}}, {pages: c, pos: 0, tokens: []int32{9}}}, 4, 4, 0)
	in := func(i codegen.Input, n int) []int32 {
		out := make([]int32, n)
		for j := range out {
			o := 4 * (int(i)*b.inCap + j)
			out[j] = int32(uint32(b.host[o]) | uint32(b.host[o+1])<<8 | uint32(b.host[o+2])<<16 | uint32(b.host[o+3])<<24)
		}
		return out
	}
	require.Equal(t, []int32{7, 9, 0, 0}, in(codegen.InTokens, 4))
	require.Equal(t, []int32{5, 0, 0, 0}, in(codegen.InPositions, 4))
	// position 5 is row 1 of page 7 (4 positions a page); padding writes the trash page 10
	require.Equal(t, []int32{29, 8, 40, 40}, in(codegen.InSlots, 4))
	// the tables: the trash page, a's first two pages (6 positions), c's first page
	require.Equal(t, []int32{10, 3, 7, 2}, b.hostTab)
	require.Equal(t, []int32{1, 3, 0, 0}, in(codegen.InTokBase, 4))
	require.Equal(t, []int32{1, 3, 0, 0}, in(codegen.InKVBase, 4))
	require.Equal(t, []int32{6, 1, 1, 1}, in(codegen.InKVLen, 4))
	require.Equal(t, []int32{0, 1, 2, 3}, in(codegen.InLast, 4))

	// a prompt chunk of 5 and a decode, the flash attention's tiles of 2 tokens: the chunk in
	// three, the decode, the padding rows
	b.fillInputs([]piece{{pages: a, pos: 0, tokens: []int32{1, 2, 3, 4, 5}}, {pages: c, pos: 3, tokens: []int32{9}}}, 8, 2, 2)
	require.Equal(t, []int32{1, 1, 1, 1, 1, 3, 0, 0}, in(codegen.InTokBase, 8))
	require.Equal(t, []int32{0, 2, 4, 5, 6, -1, -1, -1}, in(codegen.InTiles, 8))
}

func TestBucket(t *testing.T) {
	b := &Backend{opts: BackendOptions{MaxSeqs: 12}}
	for s, want := range map[int]int{1: 1, 2: 2, 3: 3, 5: 5, 8: 8, 9: 12, 12: 12} {
		require.Equal(t, want, b.bucket(s), "s=%d", s)
	}
	b.opts.NoGraphs = true
	require.Equal(t, 0, b.bucket(3))
	// a step padded to its graph's batch computes in the numerical class of
	// its own rows: the f16 products start at a row count no padding
	// crosses (the int8 tensor-core arm's GEMVLargeRows is crossed, but it
	// reads the batch arm's int8 rows)
	g := &Backend{opts: BackendOptions{MaxSeqs: 64}}
	for s := 1; s <= 64; s++ {
		p := g.bucket(s)
		require.Equal(t, s >= codegen.HalfLargeRows, p >= codegen.HalfLargeRows, "%d sequences padded to %d", s, p)
	}
}

// TestGPUStories: greedy decode of stories260K from BOS on the GPU gives the
// reference ids, with logits cosine ≥ 0.999 against the CPU at every step,
// and the device argmax path gives the same ids.
func TestGPUStories(t *testing.T) {
	gpuOrSkip(t)
	m := openModel(t, storiesPath)
	ref := cpuBackend(t, m)
	for _, o := range []BackendOptions{{MaxSeqs: 2}, {MaxSeqs: 2, NoGraphs: true}, {MaxSeqs: 2, Cache: "f32"}} {
		g := gpuBackend(t, m, o)
		bos := m.Tokenizer.BOS()
		rep, err := Parity(context.Background(), ref, g, [][]int32{{bos}}, len(storiesGreedy), 1)
		require.NoError(t, err)
		require.Equal(t, storiesGreedy, rep.Tokens[0])
		require.Zero(t, rep.Mismatches, "%+v", o)
		require.GreaterOrEqual(t, rep.MinCosine, 0.999, "%+v", o)

		step := runtime.SeqStep{Seq: 7, Tokens: []int32{bos}, Logits: true}
		var ids []int32
		for range storiesGreedy {
			out, err := g.StepGreedy(context.Background(), []runtime.SeqStep{step})
			require.NoError(t, err)
			ids = append(ids, out[0])
			step.Pos += len(step.Tokens)
			step.Tokens = []int32{out[0]}
		}
		require.Equal(t, storiesGreedy, ids)
		g.Free(7)
	}
}

// synthModel writes a small random-weight model of a real architecture.
func synthModel(t *testing.T, preset, quant, weights string) *load.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), preset+"-"+quant+".gguf")
	_, err := synth.WriteGGUF(path, synth.Options{Preset: preset, Layers: 2, Dim: 256, Quant: quant, Context: 512, Weights: weights})
	require.NoError(t, err)
	return openModel(t, path)
}

// prompts returns n random prompts of different lengths (longest first).
func prompts(vocab, n, longest int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([][]int32, n)
	for i := range out {
		p := make([]int32, max(1, longest-5*i))
		for j := range p {
			p[j] = int32(r.IntN(vocab))
		}
		out[i] = p
	}
	return out
}

var synthCases = []struct{ preset, quant string }{
	{"llama3-8b", "q4_k_m"},
	{"qwen2.5-7b", "q8_0"},
	{"qwen3-8b", "q4_k_m"},
	{"qwen3-8b", "bf16"},
}

// TestGPUSynthParity: per architecture, 32 greedy steps after a 16-token
// prompt (4 sequences of different lengths in one batch) agree with the
// CPU. The exact configuration (f32 cache, GEMV prefill) must give the same
// tokens; the default one (f16 cache, bf16 tensor-core prefill) must keep
// cosine ≥ 0.999 and reports its token agreement.
func TestGPUSynthParity(t *testing.T) {
	gpuOrSkip(t)
	for _, c := range synthCases {
		t.Run(c.preset+"/"+c.quant, func(t *testing.T) {
			m := synthModel(t, c.preset, c.quant, synth.WeightsFloat)
			ref := cpuBackend(t, m)
			ps := prompts(m.HParams.VocabSize, 4, 16, 1)
			exact := gpuBackend(t, m, BackendOptions{MaxSeqs: 4, Cache: "f32", PrefillGEMV: true})
			rep, err := Parity(context.Background(), ref, exact, ps, 32, 1)
			require.NoError(t, err)
			require.Zero(t, rep.Mismatches)
			require.GreaterOrEqual(t, rep.MinCosine, 0.999)

			def := gpuBackend(t, m, BackendOptions{MaxSeqs: 4})
			rep, err = Parity(context.Background(), ref, def, ps, 32, 100)
			require.NoError(t, err)
			require.GreaterOrEqual(t, rep.MinCosine, 0.999)
			t.Logf("default config: %d of %d greedy tokens differ, min cosine %.6f", rep.Mismatches, 4*32, rep.MinCosine)
		})
	}
}

// trace runs prompts as one batch on b, then feeds forced[i][k] to
// sequence i at step k+1, and returns every step's logits per sequence.
func trace(t *testing.T, b runtime.Backend, prompts, forced [][]int32, steps int, first runtime.SeqID) [][][]float32 {
	t.Helper()
	batch := make([]runtime.SeqStep, len(prompts))
	for i, p := range prompts {
		batch[i] = runtime.SeqStep{Seq: first + runtime.SeqID(i), Tokens: p, Logits: true}
	}
	out := make([][][]float32, len(prompts))
	for k := 0; k < steps; k++ {
		ls, err := b.Step(context.Background(), batch)
		require.NoError(t, err)
		for i := range batch {
			out[i] = append(out[i], append([]float32(nil), ls[i]...))
			batch[i].Pos += len(batch[i].Tokens)
			batch[i].Tokens = []int32{forced[i][k]}
		}
	}
	for i := range prompts {
		b.Free(first + runtime.SeqID(i))
	}
	return out
}

// TestGPUBatchEqualsAlone: a batch of 4 sequences of different lengths
// gives, per sequence, the logits the sequence gets alone (prefill and
// decode steps).
func TestGPUBatchEqualsAlone(t *testing.T) {
	gpuOrSkip(t)
	m := synthModel(t, "qwen3-8b", "q4_k_m", synth.WeightsFloat)
	ps := prompts(m.HParams.VocabSize, 4, 16, 2)
	g := gpuBackend(t, m, BackendOptions{MaxSeqs: 4})
	rep, err := Parity(context.Background(), cpuBackend(t, m), g, ps, 8, 1)
	require.NoError(t, err)
	batched := trace(t, g, ps, rep.Tokens[:], 8, 20)
	// From codegen.HalfLargeRows rows the batch's decode products take f16
	// activations and weights (XQ 4) where a lone sequence's take int8: two
	// numerical classes, like a one-token prompt's step 0 below (cosine
	// 0.999885 measured at step 1 on an H100 with them from 2 rows, 0.99990
	// or more from 4)
	two := halfStep(g, len(ps))
	for i, p := range ps {
		one := trace(t, g, [][]int32{p}, rep.Tokens[i:i+1], 8, 40)
		for k := range one[0] {
			// Prefill rounds activations to bf16 for the tensor-core product, and
			// a batch's prefill tiles differ from a lone sequence's, so step 0
			// agrees to bf16 accuracy (cosine 0.999988 measured on the H200),
			// decode steps to float32 accuracy. A one-token prompt alone is a
			// decode step, whose products round activations to int8 instead: its
			// step 0 compares two numerical classes (0.999876 measured), and the
			// cache it wrote carries the difference into the later steps
			// (0.999859 at step 1).
			tol := 0.9999
			if len(p) == 1 || (two && k > 0) {
				tol = 0.9995
			}
			b, o := batched[i][k], one[0][k]
			require.GreaterOrEqual(t, runtime.Cosine(b, o), tol, "sequence %d step %d", i, k)
			if ab, ao := runtime.Argmax(b), runtime.Argmax(o); ab != ao {
				// two numerical classes may order a near-tie differently: the
				// batch's margin over the lone sequence's pick must be within 3×
				// the step's RMS logit difference (gpu-parity's --tie-sigma)
				require.True(t, len(p) == 1 || two, "sequence %d step %d: argmax %d alone, %d in the batch", i, k, ao, ab)
				var ss float64
				for j := range b {
					d := float64(b[j] - o[j])
					ss += d * d
				}
				rms := math.Sqrt(ss / float64(len(b)))
				require.LessOrEqual(t, float64(b[ab]-b[ao]), 3*rms, "sequence %d step %d: argmax %d alone, %d in the batch", i, k, ao, ab)
			}
		}
	}
}

// halfStep reports whether b's decode steps of rows rows run f16
// tensor-core products (XQ 4).
func halfStep(b *Backend, rows int) bool {
	dec, _ := b.Programs()
	for i := range dec.Launches {
		if strings.Contains(dec.Kernels[dec.Launches[i].KernelFor(rows)].Name, "_h16_") {
			return true
		}
	}
	return false
}

// TestGPUGraphsEqualPlain: decode replayed from CUDA graphs equals decode
// with plain launches.
func TestGPUGraphsEqualPlain(t *testing.T) {
	gpuOrSkip(t)
	m := synthModel(t, "llama3-8b", "q4_k_m", synth.WeightsFloat)
	plain := gpuBackend(t, m, BackendOptions{MaxSeqs: 4, NoGraphs: true})
	graphs := gpuBackend(t, m, BackendOptions{MaxSeqs: 4})
	for _, n := range []int{1, 3, 4} {
		rep, err := Parity(context.Background(), plain, graphs, prompts(m.HParams.VocabSize, n, 12, uint64(n)), 16, 1)
		require.NoError(t, err)
		require.Zero(t, rep.Mismatches, "batch %d", n)
		require.GreaterOrEqual(t, rep.MinCosine, 0.99999, "batch %d", n)
	}
}

// TestGPUPrefillBLAS: prefill products through cuBLASLt multiply the
// operands the generated product multiplies, so the two arms agree to the
// order of their f32 sums: every greedy token and near-identical logits,
// for quantised and bf16 weights (the latter used without a dequantising
// launch). Skipped where cuBLASLt is not found.
func TestGPUPrefillBLAS(t *testing.T) {
	gpuOrSkip(t)
	if err := BLASAvailable(); err != nil {
		t.Skipf("no cuBLASLt: %v", err)
	}
	// f16 weights are multiplied against f16 activations, not the generated
	// product's bf16: a finer rounding, so near-ties may flip (tie-sigma 3)
	for _, q := range []string{"q4_k_m", "bf16", "f16"} {
		t.Run(q, func(t *testing.T) {
			m := synthModel(t, "llama3-8b", q, synth.WeightsFloat)
			mma := gpuBackend(t, m, BackendOptions{MaxSeqs: 4, PrefillBLAS: "mma"})
			bl := gpuBackend(t, m, BackendOptions{MaxSeqs: 4, PrefillBLAS: "blas"})
			require.NotNil(t, bl.bpf)
			require.NotEmpty(t, bl.bpf.prods)
			require.Nil(t, mma.bpf)
			rep, err := Parity(context.Background(), mma, bl, prompts(m.HParams.VocabSize, 4, 40, 3), 8, 1)
			require.NoError(t, err)
			minCos := 0.9999
			if q == "f16" {
				minCos = 0.999
			}
			require.True(t, rep.Pass(minCos, 0, 3), "mismatches %d, min cosine %.6f, worst %.2f×", rep.Mismatches, rep.MinCosine, rep.MaxGapSigma)
			t.Logf("cuBLASLt against the generated product: %d of %d greedy tokens differ, min cosine %.7f", rep.Mismatches, 4*8, rep.MinCosine)
			if q != "q4_k_m" {
				return
			}
			// bf16 rows kept from load (the default at this size) are the
			// operands each product dequantises: the same logits, bit for bit
			require.NotEmpty(t, bl.bpf.resident)
			dq := gpuBackend(t, m, BackendOptions{MaxSeqs: 4, PrefillBLAS: "blas", PrefillWeights: "dequant"})
			require.Empty(t, dq.bpf.resident)
			ps := prompts(m.HParams.VocabSize, 4, 40, 3)
			require.Equal(t, trace(t, dq, ps, rep.Tokens[:], 4, 100), trace(t, bl, ps, rep.Tokens[:], 4, 100))
		})
	}
}

// TestLowerSynthCompiles lowers each synthesized architecture for both
// classes (no GPU) and, where NVRTC is present, compiles every kernel to
// compute_90 PTX.
func TestLowerSynthCompiles(t *testing.T) {
	nv, nvErr := LoadNVRTC()
	seen := map[string]bool{}
	for _, c := range synthCases {
		t.Run(c.preset+"/"+c.quant, func(t *testing.T) {
			m := synthModel(t, c.preset, c.quant, synth.WeightsBlocks)
			dec, pre, err := Lower(m, BackendOptions{MaxSeqs: 4})
			require.NoError(t, err)
			require.NoError(t, dec.Buffers.Check())
			require.NoError(t, pre.Buffers.Check())
			// the cuBLASLt arm replaces every tensor-core prefill product, with
			// a dequantising kernel unless its weights are bf16 already
			plan, err := planPrefill(pre, 128)
			require.NoError(t, err)
			prods, wbytes, xbytes := plan.prods, plan.wbytes, plan.xbytes
			var helpers []*codegen.Kernel
			for i, k := range pre.Kernels {
				bp := prods[i]
				require.Equal(t, k.Family == "mma", bp != nil, k.Name)
				if bp == nil {
					continue
				}
				require.Equal(t, *k.Product, bp.shape)
				require.Equal(t, bp.shape.Type != dtype.BF16 && bp.shape.Type != dtype.F16, bp.deq != nil, k.Name)
				require.Equal(t, bp.shape.Type == dtype.F16, bp.op == dtype.F16, k.Name)
				require.LessOrEqual(t, 2*128*bp.shape.K, xbytes)
				if bp.deq != nil {
					require.LessOrEqual(t, 2*bp.shape.N*bp.shape.K, wbytes)
					helpers = append(helpers, bp.deq)
				}
				helpers = append(helpers, bp.round)
			}
			if nvErr != nil || testing.Short() {
				return
			}
			for _, p := range []*codegen.Program{dec, pre, {Kernels: helpers}} {
				for _, k := range p.Kernels {
					if seen[k.Name] {
						continue
					}
					seen[k.Name] = true
					_, err := nv.Compile(k.Source, k.Name+".cu", []string{ArchOption("compute_90")})
					require.NoError(t, err, k.Name)
				}
			}
		})
	}
	if nvErr != nil {
		t.Skipf("lowered only; no NVRTC to compile with: %v", nvErr)
	}
}

// TestEnvOptions: the environment's configuration and diagnostics set
// their options, a value they cannot read is an error naming the variable
// (no silent default), and the deleted kernel switches set nothing.
func TestEnvOptions(t *testing.T) {
	t.Setenv("MEMRA_PDL", "off")
	t.Setenv("MEMRA_KV_CACHE", "q8_0")
	for _, name := range []string{"MEMRA_GEMV_QUANT", "MEMRA_GEMV_BATCH", "MEMRA_GEMV_LARGE", "MEMRA_MMA", "MEMRA_FUSE"} {
		t.Setenv(name, "nonsense")
	}
	var o BackendOptions
	require.NoError(t, envOptions(&o))
	require.True(t, o.NoPDL)
	require.Equal(t, "q8_0", o.Cache)
	require.Zero(t, o.Arms, "no environment variable chooses an arm")
	for _, v := range []string{"early", "early:^attn_combine", "soon"} {
		t.Setenv("MEMRA_PDL", v)
		err := envOptions(&BackendOptions{})
		require.ErrorIs(t, err, ErrArg, v)
		require.ErrorContains(t, err, "MEMRA_PDL", v)
	}
}

// TestSharedRowsCoverDrafts: decode attention reads again after its wait
// the rows a verify step's entries of one sequence wrote (DecodeArm.Newest,
// at most codegen.MaxSharedRows); the runtime's bound on drafts must fit.
func TestSharedRowsCoverDrafts(t *testing.T) {
	if runtime.MaxSpecDraft+1 > codegen.MaxSharedRows {
		t.Fatalf("%d drafts and the sequence's own token outrun the %d rows decode attention reads again", runtime.MaxSpecDraft, codegen.MaxSharedRows)
	}
}
