package cuda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/arch"
	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/kv"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/tunedb"
)

// Backend errors.
var (
	// ErrMemory: the model, its KV cache and activations do not fit the GPU.
	ErrMemory = errors.New("cuda: not enough device memory")
	// ErrBatch: a Step's batch is malformed (empty entry, repeated sequence,
	// position past the cached length, no free sequence slot).
	ErrBatch = errors.New("cuda: bad batch")
	// ErrContext: a sequence would grow past the backend's context.
	ErrContext = errors.New("cuda: context length exceeded")
	// ErrToken: a token id is outside the vocabulary.
	ErrToken = errors.New("cuda: token id out of range")
	// ErrWeight: a model tensor cannot be read or has the wrong size.
	ErrWeight = errors.New("cuda: bad weight")
)

// BackendOptions configure a Backend. Zero values take the defaults.
type BackendOptions struct {
	Device  int // GPU ordinal
	MaxSeqs int // sequences of one step (default 8)
	// Context is the most positions of a sequence (default the model's
	// context length, or 4096 where the model names none). The KV cache is
	// a pool of pages (KVMemory) that every sequence draws on, so a long
	// context costs memory only when a sequence fills it.
	Context int
	// PageSize is the KV cache page in positions (default
	// codegen.DefaultPageSize).
	PageSize int
	// KVMemory is the KV page pool in bytes; KVFraction, when KVMemory is
	// 0, a fraction of the device memory left after weights and
	// activations. With neither, the pool takes what MaxSeqs sequences of
	// Context positions need, or what is left with a margin when that is
	// less.
	KVMemory   int64
	KVFraction float64
	// Cache is the KV cache type: "f16" (default), "bf16", "f32" or "q8_0"
	// (also "q8": int8 with a float32 scale per 32 elements, 0.56× the
	// bytes of f16; codegen.CacheQ8).
	Cache string
	// PrefillTokens bounds the tokens of one prefill launch sequence
	// (default 512); longer steps run in chunks.
	PrefillTokens int
	NoGraphs      bool // decode with plain launches instead of CUDA graphs
	NoPDL         bool // launch without programmatic dependent launch
	// NoFusePrologue keeps each RMSNorm and SwiGLU before a decode product
	// its own launch (codegen.LowerOptions.NoFusePrologue), for tests that
	// compare products alone; the default fuses them where the arms allow.
	NoFusePrologue bool
	// Numerics is the decode products' numerical class (DefaultNumerics
	// where zero). In the invariant classes (NumericsF16, NumericsInt8) a
	// sequence's logits do not depend on how many sequences share its
	// step: greedy output is then the same alone, batched, speculating or
	// from the prefix cache, and each prefill product's algorithm is
	// pinned to the largest chunk's.
	Numerics Numerics
	diag     oneDiag // tests only
	// Multiprocessors is the card's count, set by NewBackend; Lower, with
	// no card, takes DefaultMultiprocessors.
	Multiprocessors int
	// PrefillBLAS chooses how the prefill program's tensor-core products
	// (codegen.MatMulMMA) run: "mma" as generated, "blas" through cuBLASLt
	// on the same operands (codegen.BLASOperands; prefill.go; an error where cuBLASLt is not
	// found), "" the default (DefaultPrefillBLAS; mma where cuBLASLt is not
	// found). Tests set it to compare the two.
	PrefillBLAS string
	// PrefillWeights, for the cuBLASLt arm: "resident" keeps the bf16 rows
	// of every quantised prefill weight from load (no dequantising pass a
	// step), "dequant" makes them at each product, "" the default:
	// resident where they take at most a quarter of the memory left for
	// the KV cache (prefill.go).
	PrefillWeights string
	// PrefillGEMV uses the float32 GEMV for prefill products instead of the
	// bf16 tensor-core product (exact against the CPU, slower).
	PrefillGEMV bool
	// Arms are the arms of kernels the tunedb has no entry for (zero
	// fields: the family defaults).
	Arms     codegen.Arms
	CacheDir string // NVRTC cubin cache (default DefaultCacheDir)
	// Artifact, when set, supplies every kernel's image from a compiled
	// artifact (memra compile): NVRTC is never loaded, the arms are the
	// tunedb picks and the multiprocessor count the artifact recorded, and
	// a card, driver or kernel that does not fit it is refused
	// (ErrArtifact). Pipeline stages cannot use one.
	Artifact *Artifact
	// Untuned lowers every kernel with its family's default arm: no tunedb
	// lookup, Arms ignored.
	Untuned bool
	// Tunedb is where NewBackend looks arms up for the detected card
	// (default tunedb.Default()).
	Tunedb *tunedb.DB
	// Pick overrides the tunedb lookup: it chooses each kernel's arm by
	// family and shape class. Lower uses only Pick (it knows no card).
	Pick codegen.ArmPicker
	// Logf receives the backend's start-up notices (the tunedb fallback);
	// nil discards them.
	Logf func(format string, args ...any)
	// Embedding lowers and loads a third program, the model without its
	// head (arch.BuildHidden), for embeddings (runtime.Embedder; embed.go).
	// A pipeline stage has none.
	Embedding bool
}

// graphBuckets are the decode batch sizes captured as CUDA graphs; a batch
// is padded to the next bucket. Up to 8 every size has its own: a padded
// row costs a real row's products, and a speculative verify step of K + 1
// entries (K drafts, often 4) would otherwise compute 8 rows for 5.
var graphBuckets = []int{1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64}

// progState is one lowered program on the device.
type progState struct {
	p       *codegen.Program
	fns     []Function  // by kernel index
	weights []DevicePtr // by weight index
}

// Backend runs a model on one GPU through the generated kernels. It
// implements runtime.Backend, runtime.GreedyStepper and
// runtime.SamplingStepper.
type Backend struct {
	dev    *Device
	info   runtime.ModelInfo
	opts   BackendOptions
	cache  dtype.Type
	pdl    bool
	progs  [2]*progState // by codegen.StepClass
	one    *progState    // the one-sequence decode program (one.go), or nil
	stream Stream

	allocs  []DevicePtr
	modules []Module
	arena   DevicePtr
	inputs  DevicePtr // codegen.NumInputs arrays of inCap int32
	inCap   int
	inRows  int         // the rows of each input the last fillInputs wrote
	kc, vc  []DevicePtr // per layer: the pool's pages, then the trash page
	graphs  map[graphKey]GraphExec

	pool    *kv.Pool
	own     *kv.Tables // pages of sequences stepped without SeqStep.Pages
	trash   int32      // the page padded rows write to (past the pool's)
	pageTab DevicePtr  // the step's page tables (codegen.ArgPages), pageCap int32
	tickets DevicePtr  // the programs' launch counters (codegen.ArgTickets), zero between launches
	pageCap int
	hostTab []int32

	stage   *stageIO // the boundary of a pipeline stage (stage.go), or nil
	rowBase int      // tokens of the running step before the current launch sequence
	order   []int    // the running step's entries in the order they run (stepOrder)

	host   []byte // staging for the inputs
	logits []float32
	result [][]float32
	greedy []int32
	closed bool

	// sampling on the device (sample.go): the inputs' device buffers,
	// their host side, the leading device records an earlier launch
	// sequence may have left active, and StepSample's parameters and
	// results
	sampleIn [codegen.NumSampleInputs]DevicePtr
	spack    samplePack
	recLive  int
	params   []*runtime.DeviceSampling
	sampled  []runtime.Sampled

	prof *profiler // set during ProfileDecode

	bpf *blasPrefill // the cuBLASLt arm of the prefill products, or nil

	// drop: decode launches of kernels whose names match are left out
	// (MEMRA_DROP, a timing diagnostic: the outputs are wrong)
	drop *regexp.Regexp

	emb *embedState // the embedding program (embed.go), or nil

	pipe pipeState // pipelined decode steps (pipeline.go)
	up   upState   // page-locked upload slots (upload.go)
}

var (
	_ runtime.PagedBackend    = (*Backend)(nil)
	_ runtime.GreedyStepper   = (*Backend)(nil)
	_ runtime.SamplingStepper = (*Backend)(nil)
)

func (o *BackendOptions) fill(hp ir.HParams) (dtype.Type, error) {
	if o.MaxSeqs <= 0 {
		o.MaxSeqs = 8
	}
	if o.Context <= 0 {
		o.Context = 4096
		if hp.ContextLength > 0 {
			o.Context = hp.ContextLength
		}
	}
	if hp.ContextLength > 0 && o.Context > hp.ContextLength {
		o.Context = hp.ContextLength
	}
	if o.PageSize == 0 {
		o.PageSize = codegen.DefaultPageSize
	}
	if err := codegen.CheckPageSize(o.PageSize); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrArg, err)
	}
	if o.KVMemory < 0 || o.KVFraction < 0 || o.KVFraction > 1 {
		return 0, fmt.Errorf("%w: KV memory %d bytes, fraction %g: want bytes ≥ 0 or a fraction in (0, 1]", ErrArg, o.KVMemory, o.KVFraction)
	}
	if o.PrefillTokens <= 0 {
		o.PrefillTokens = 512
	}
	o.PrefillTokens = max(o.PrefillTokens, o.MaxSeqs)
	switch strings.ToLower(o.Cache) {
	case "", "f16":
		return dtype.F16, nil
	case "bf16":
		return dtype.BF16, nil
	case "f32":
		return dtype.F32, nil
	case "q8_0", "q8":
		return codegen.CacheQ8, nil
	}
	return 0, fmt.Errorf("%w: KV cache type %q (f16, bf16, f32, q8_0)", ErrArg, o.Cache)
}

// Lower builds m's graph and lowers it for both step classes with opts
// (filled with defaults, the environment's settings applied), as NewBackend
// does, so that `memra compile` writes the programs a backend would run.
func Lower(m *load.Model, opts BackendOptions) (decode, prefill *codegen.Program, err error) {
	if err := envOptions(&opts); err != nil {
		return nil, nil, err
	}
	return lowerStage(m, opts, 0, m.HParams.Layers)
}

// lowerStage is Lower for the pipeline stage of layers [first, last).
func lowerStage(m *load.Model, opts BackendOptions, first, last int) (decode, prefill *codegen.Program, err error) {
	ps, err := lowerPrograms(m, opts, first, last)
	return ps.decode, ps.prefill, err
}

// programSet is a backend's programs: decode, prefill and, for a whole
// model, the one-sequence decode program where there is one (one.go).
type programSet struct{ decode, prefill, one *codegen.Program }

// lowerPrograms lowers the stage of layers [first, last) for each program
// of a backend of opts, from one graph.
func lowerPrograms(m *load.Model, opts BackendOptions, first, last int) (ps programSet, err error) {
	g, base, err := buildGraph(m, &opts, func() (*ir.Graph, error) { return arch.BuildStage(m.HParams, m, first, last) })
	if err != nil {
		return ps, err
	}
	d := base
	d.Class = codegen.Decode
	if ps.decode, err = codegen.Lower(g, d); err != nil {
		return programSet{}, err
	}
	p := base
	p.Class, p.MaxTokens = codegen.Prefill, opts.PrefillTokens
	if ps.prefill, err = codegen.Lower(g, p); err != nil {
		return programSet{}, err
	}
	if first == 0 && last == m.HParams.Layers {
		if ps.one, err = lowerOne(g, base, opts, ps.decode); err != nil {
			return programSet{}, err
		}
	}
	return ps, nil
}

// buildGraph fills *opts for m, builds the graph build returns, runs the
// IR passes on it and returns it with its lowering options (before the
// step class): what every program of m starts from.
func buildGraph(m *load.Model, opts *BackendOptions, build func() (*ir.Graph, error)) (*ir.Graph, codegen.LowerOptions, error) {
	cache, err := opts.fill(m.HParams)
	if err != nil {
		return nil, codegen.LowerOptions{}, err
	}
	g, err := build()
	if err != nil {
		return nil, codegen.LowerOptions{}, err
	}
	if err := ir.RunPasses(g, ir.Passes); err != nil {
		return nil, codegen.LowerOptions{}, err
	}
	return g, lowerOptions(*opts, cache), nil
}

// lowerOptions are the lowering options of opts (filled) with a KV cache
// of type cache, before the step class.
func lowerOptions(opts BackendOptions, cache dtype.Type) codegen.LowerOptions {
	base := codegen.LowerOptions{MaxSeqs: opts.MaxSeqs, Context: opts.Context, PageSize: opts.PageSize, Cache: cache, Arms: opts.Arms, Pick: opts.Pick,
		PrefillGEMV: opts.PrefillGEMV, Argmax: true, Sample: true, NoFusePrologue: opts.NoFusePrologue,
		// the quantising epilogues and RoPE in the QKV products in one-sequence
		// programs only (docs/AUTOTUNE.md, "Arms deleted because they lost")
		NoQuantOut: codegen.QuantOutBatch, RopeInProduct: opts.MaxSeqs == 1,
		DecodePreload: true, FlashPrefill: DefaultFlashPrefill,
		Multiprocessors: cmp.Or(opts.Multiprocessors, DefaultMultiprocessors)}
	base.BatchInvariant, base.InvariantInt8 = opts.Numerics.Invariant(), opts.Numerics.Resolve() == NumericsInt8
	base.GEMVSplitBlocks = base.Multiprocessors
	if opts.Untuned {
		base.Arms, base.Pick = codegen.Arms{}, nil
	}
	base.Arms.Decode = codegen.DefaultDecodeLiveArm // a tunedb pick of attn_decode_live replaces it
	return base
}

// NewBackend lowers m for decode and prefill with each kernel's arm from
// the tunedb entry of the detected card (see BackendOptions.Untuned,
// Tunedb, Pick), compiles the kernels through the NVRTC disk cache, checks
// the device memory, uploads the weights (in their stored types) and
// allocates the KV cache slots and activations.
func NewBackend(m *load.Model, opts BackendOptions) (*Backend, error) {
	return newBackend(m, opts, 0, m.HParams.Layers)
}

// newBackend builds the backend of the pipeline stage of layers
// [first, last) (the whole model for 0, layers).
func newBackend(m *load.Model, opts BackendOptions, first, last int) (*Backend, error) {
	if err := envOptions(&opts); err != nil {
		return nil, err
	}
	if _, err := opts.fill(m.HParams); err != nil {
		return nil, err
	}
	if err := Available(); err != nil {
		return nil, err
	}
	dev, err := Open(opts.Device)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	opts.Multiprocessors = info.SMs
	var borrowed *borrowLog
	if a := opts.Artifact; a != nil {
		if err := useArtifact(a, &opts, info, first, last, m.HParams.Layers); err != nil {
			return nil, errors.Join(err, dev.Close())
		}
	} else if !opts.Untuned && opts.Pick == nil {
		opts.Pick, borrowed = borrowingPicker(opts.Tunedb, DeviceKey(info), opts.Logf)
	}
	progs, err := lowerPrograms(m, opts, first, last)
	if s := borrowed.String(); err == nil && s != "" && opts.Logf != nil {
		opts.Logf("%s", s)
	}
	if err != nil {
		return nil, errors.Join(err, dev.Close())
	}
	cache, _ := opts.fill(m.HParams)
	b := &Backend{dev: dev, opts: opts, cache: cache, pdl: info.Major >= 9 && !opts.NoPDL, graphs: map[graphKey]GraphExec{}}
	if v := os.Getenv("MEMRA_DROP"); v != "" {
		if b.drop, err = regexp.Compile(v); err != nil {
			return nil, errors.Join(fmt.Errorf("%w: MEMRA_DROP=%q: %v", ErrArg, v, err), dev.Close())
		}
		if opts.Logf != nil {
			opts.Logf("MEMRA_DROP=%q: decode steps leave out the launches of matching kernels; their outputs are wrong (timing only)", v)
		}
	}
	b.progs[codegen.Decode] = &progState{p: progs.decode}
	b.progs[codegen.Prefill] = &progState{p: progs.prefill}
	if progs.one != nil {
		b.one = &progState{p: progs.one}
	}
	if opts.Embedding && first == 0 && last == m.HParams.Layers {
		if b.emb, err = newEmbedState(m, opts); err != nil {
			return nil, errors.Join(err, dev.Close())
		}
	}
	b.info = runtime.ModelInfo{Name: m.HParams.Name, Arch: m.HParams.Arch, VocabSize: progs.decode.Vocab, ContextLength: opts.Context,
		MaxBatchTokens: opts.PrefillTokens, Device: fmt.Sprintf("cuda:%d", opts.Device)}
	if err := b.load(m, info.Arch()); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// load compiles, checks memory, allocates and uploads.
func (b *Backend) load(m *load.Model, target string) error {
	dec, pre := b.progs[codegen.Decode].p, b.progs[codegen.Prefill].p
	useBLAS, err := b.prefillBLAS()
	if err != nil {
		return err
	}
	var plan *prefillPlan
	if useBLAS {
		if plan, err = planPrefill(pre, b.opts.PrefillTokens); err != nil {
			return fmt.Errorf("cuBLASLt prefill: %w", err)
		}
		if len(plan.prods) == 0 { // no tensor-core products (the exact configuration's GEMV prefill)
			plan = nil
		}
	}
	var extra []*codegen.Kernel
	if plan != nil {
		extra = plan.kernels()
	}
	images, err := b.compile(target, extra)
	if err != nil {
		return err
	}
	b.inCap = pre.MaxTokens
	weights, wbytes := uniqueWeights(b.programs()...)
	var arena int64
	for _, ps := range b.states() {
		arena = max(arena, ps.p.Buffers.ArenaBytes)
	}
	cached := cacheLayers(dec) // a pipeline stage caches only its own layers
	size := b.opts.PageSize
	rowBytes := int64(size) * int64(codegen.CacheRowBytes(dec.Cache, dec.KVWidth)) // a page of one layer's keys
	pageBytes := 2 * int64(len(cached)) * rowBytes
	perSeq := (b.opts.Context + size - 1) / size
	// the tables of a launch's sequences (at most MaxSeqs) at their whole
	// context, and the padding rows' one-page table
	b.pageCap = b.opts.MaxSeqs*perSeq + 1
	need := wbytes + arena + int64(codegen.NumInputs)*int64(b.inCap)*4 + int64(b.pageCap)*4
	var sampleBufs [codegen.NumSampleInputs]int // none in a stage before the last
	if dec.SampleOut >= 0 {
		sampleBufs = sampleBytes(b.opts.MaxSeqs, dec.Vocab)
	}
	for _, n := range sampleBufs {
		need += int64(n)
	}
	b.spack = newSamplePack(dec.Vocab)
	return b.dev.Do(func(c *Ctx) error {
		free, total, err := c.MemInfo()
		if err != nil {
			return err
		}
		resident := false
		if plan != nil {
			left := free - need - plan.bytes() - poolMargin(total)
			if resident, err = residentWeights(b.opts.PrefillWeights, plan.deqBytes, left, b.opts.KVMemory); err != nil {
				return err
			}
			if resident {
				// the scratch stays: a product of another program (embeddings) may read weights the prefill program does not
				need += plan.deqBytes
			}
			need += plan.bytes()
		}
		pages, err := b.poolPages(free, total, need, pageBytes, perSeq)
		if err != nil {
			return fmt.Errorf("%w (weights %.2f GiB, activations %.3f GiB, %.2f of %.2f GiB free)", err, gib(wbytes), gib(arena), gib(free), gib(total))
		}
		if b.pool, err = kv.NewPool(pages, size); err != nil {
			return err
		}
		b.own, b.trash = kv.NewTables(b.pool), int32(pages)
		if max := pages * size; max < b.opts.Context {
			if b.opts.Logf != nil {
				b.opts.Logf("the KV pool of %.2f GiB holds %d positions: sequences are limited to them, not the context of %d", gib(int64(pages)*pageBytes), max, b.opts.Context)
			}
			b.info.ContextLength = max
		}
		if b.stream, err = c.NewStream(); err != nil {
			return err
		}
		if err := b.loadModules(c, images); err != nil {
			return err
		}
		if plan != nil {
			if b.bpf, err = b.newBLASPrefill(c, plan, images); err != nil {
				return fmt.Errorf("cuBLASLt prefill: %w", err)
			}
			if b.emb != nil {
				b.emb.blas = sameProducts(pre, b.emb.ps.p, b.bpf.prods)
			}
		}
		ptrs := map[string]DevicePtr{}
		for _, w := range weights {
			p, err := b.upload(c, m, w)
			if err != nil {
				return err
			}
			ptrs[weightKey(w)] = p
		}
		for _, ps := range b.states() {
			for i := range ps.p.Weights {
				ps.weights = append(ps.weights, ptrs[weightKey(&ps.p.Weights[i])])
			}
		}
		if resident {
			// the weights' copies from pageable memory may still be in flight
			if err := c.Synchronize(); err != nil {
				return err
			}
			if err := b.bpf.keepResident(c, b, plan, b.progs[codegen.Prefill].weights, b.stream); err != nil {
				return fmt.Errorf("cuBLASLt prefill: %w", err)
			}
			if b.opts.Logf != nil {
				b.opts.Logf("prefill products multiply bf16 weights kept from load (%.2f GiB)", gib(plan.deqBytes))
			}
		}
		if b.arena, err = b.alloc(c, int(arena)); err != nil {
			return err
		}
		if b.inputs, err = b.alloc(c, int(codegen.NumInputs)*b.inCap*4); err != nil {
			return err
		}
		if b.pageTab, err = b.alloc(c, 4*b.pageCap); err != nil {
			return err
		}
		if n := b.ticketCount(); n > 0 {
			if b.tickets, err = b.alloc(c, 4*n); err != nil {
				return err
			}
		}
		for i, n := range sampleBufs {
			if n == 0 {
				continue
			}
			if b.sampleIn[i], err = b.alloc(c, n); err != nil {
				return err
			}
		}
		b.kc, b.vc = make([]DevicePtr, dec.Layers), make([]DevicePtr, dec.Layers)
		per := int(int64(pages+1) * rowBytes) // the pool's pages and the trash page
		for _, l := range cached {
			k, err := b.alloc(c, per)
			if err != nil {
				return err
			}
			v, err := b.alloc(c, per)
			if err != nil {
				return err
			}
			b.kc[l], b.vc[l] = k, v
		}
		// Synchronous copies from pageable memory and memsets may still be
		// in flight; the step stream does not wait for the legacy stream.
		return c.Synchronize()
	})
}

// poolPages sizes the KV page pool: KVMemory bytes, or KVFraction of what
// is free after need, or by default what MaxSeqs sequences of perSeq pages
// take, limited to what is free after need and a margin; an error when not
// one page fits.
func (b *Backend) poolPages(free, total, need, pageBytes int64, perSeq int) (int, error) {
	left := free - need - poolMargin(total)
	var budget int64
	switch {
	case b.opts.KVMemory > 0:
		budget = b.opts.KVMemory
		if budget > free-need-256<<20 {
			return 0, fmt.Errorf("%w: a KV cache of %.2f GiB does not fit", ErrMemory, gib(budget))
		}
	case b.opts.KVFraction > 0:
		budget = int64(b.opts.KVFraction * float64(max(0, free-need-256<<20)))
	default:
		budget = min(int64(b.opts.MaxSeqs)*int64(perSeq)*pageBytes, left)
	}
	pages := budget / pageBytes
	if pages < 1 {
		return 0, fmt.Errorf("%w: no KV page of %.1f MiB fits", ErrMemory, float64(pageBytes)/(1<<20))
	}
	return int(min(pages, 1<<30)), nil
}

// poolMargin is the device memory the KV pool leaves free by default.
func poolMargin(total int64) int64 { return int64(512<<20) + total/32 }

// KVPool returns the backend's KV page pool (runtime.PagedBackend).
func (b *Backend) KVPool() *kv.Pool { return b.pool }

// DefaultPrefillBLAS is whether prefill products run through cuBLASLt
// where BackendOptions.PrefillBLAS is unset and the library is found.
const DefaultPrefillBLAS = true

// DefaultFlashPrefill is whether prefill attention runs on tensor cores
// (codegen.FlashPrefillAttention, where it has a kernel for the shape;
// elsewhere a warp a query): 4.8× the warp kernel's pp512 on the H200.
const DefaultFlashPrefill = true

// prefillBLAS resolves BackendOptions.PrefillBLAS: whether the prefill
// products run through cuBLASLt.
func (b *Backend) prefillBLAS() (bool, error) {
	switch b.opts.PrefillBLAS {
	case "mma":
		return false, nil
	case "blas":
		if err := BLASAvailable(); err != nil {
			return false, fmt.Errorf("prefill through cuBLASLt: %w", err)
		}
		return true, nil
	case "":
		if !DefaultPrefillBLAS {
			return false, nil
		}
		if err := BLASAvailable(); err != nil {
			if b.opts.Logf != nil {
				b.opts.Logf("prefill products run on memra's own kernel: %v", err)
			}
			return false, nil
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: prefill arm %q: want blas or mma", ErrArg, b.opts.PrefillBLAS)
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// alloc allocates zeroed device memory owned by the backend.
func (b *Backend) alloc(c *Ctx, n int) (DevicePtr, error) {
	p, err := c.Alloc(max(n, 256))
	if err != nil {
		return 0, fmt.Errorf("%w: %d bytes: %w", ErrMemory, n, err)
	}
	b.allocs = append(b.allocs, p)
	return p, c.Memset(p, 0, max(n, 256))
}

// Info describes the model.
func (b *Backend) Info() runtime.ModelInfo { return b.info }

// Programs returns the decode and prefill programs the backend runs.
func (b *Backend) Programs() (decode, prefill *codegen.Program) {
	return b.progs[codegen.Decode].p, b.progs[codegen.Prefill].p
}

// Free returns the pages the backend kept for seq (SeqStep.Pages nil).
func (b *Backend) Free(seq runtime.SeqID) {
	if b.own != nil {
		b.own.Free(uint64(seq))
	}
}

// Close releases graphs, modules and device memory and stops the GPU worker.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.dev.Do(func(c *Ctx) error {
		var errs []error
		if b.stream != 0 {
			// launched steps nobody collected, copies from the upload slots
			errs = append(errs, c.StreamSync(b.stream), b.up.close(c))
			if b.pipe.ready {
				errs = append(errs, b.pipe.close(c))
			}
		}
		errs = append(errs, b.bpf.close())
		for _, g := range b.graphs {
			errs = append(errs, c.DestroyGraphExec(g))
		}
		for _, m := range b.modules {
			errs = append(errs, c.UnloadModule(m))
		}
		for _, p := range b.allocs {
			errs = append(errs, c.Free(p))
		}
		if b.stream != 0 {
			errs = append(errs, c.DestroyStream(b.stream))
		}
		return errors.Join(errs...)
	})
	return errors.Join(err, b.dev.Close())
}

// Step runs one forward pass; see runtime.Backend.
func (b *Backend) Step(ctx context.Context, batch []runtime.SeqStep) ([][]float32, error) {
	if err := b.step(ctx, batch, stepLogits); err != nil {
		return nil, err
	}
	return b.result, nil
}

// StepGreedy runs one forward pass and returns, per entry of batch, the
// argmax of its logits computed on the device (-1 for entries whose Logits
// is not set); see runtime.GreedyStepper.
func (b *Backend) StepGreedy(ctx context.Context, batch []runtime.SeqStep) ([]int32, error) {
	if err := b.step(ctx, batch, stepGreedy); err != nil {
		return nil, err
	}
	return b.greedy, nil
}

// MMAArm is the prefill product's arm where the tunedb has none
// (Arms.MMA; zero: the family default), the arm bench --roofline times
// as its bf16 reference.
func (b *Backend) MMAArm() codegen.MMAArm { return b.opts.Arms.MMA }

// DefaultMultiprocessors is the multiprocessor count Lower assumes with no
// card: the H200's, on which the split products were measured. There
// llama2-7b q4_k_m decoded batch 1 at 508.22 tok/s with its 4096-row
// products split (128 blocks of 32 rows against 132 multiprocessors),
// against 477.29 unsplit and 493.11 with the 8192-row ones split too (256
// blocks: two waves once split; docs/PERFORMANCE.md).
const DefaultMultiprocessors = codegen.DefaultMultiprocessors
