package codegen

import (
	"errors"
	"fmt"
	"math"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// Lowering errors.
var (
	// ErrLower is wrapped when a graph has a pattern lowering cannot map to
	// kernels; the message names the node.
	ErrLower = errors.New("codegen: cannot lower")
	// ErrPlan is wrapped when a buffer plan breaks its invariants.
	ErrPlan = errors.New("codegen: bad buffer plan")
)

// Arms are the arms lowering uses per family; a zero field takes the
// family's default.
type Arms struct {
	GEMV GEMVArm
	// GEMVQuant is the GEMV arm of products whose weights have a repacked
	// layout (RepackTypes) when the tunedb has no entry; LowerOptions.PrefillGEMV
	// (the exact configuration) uses GEMV instead of any int8-activation arm.
	GEMVQuant GEMVArm
	// GEMVBatch is the GEMV arm of those products in decode programs of two
	// or more sequences: their launches run it for steps of two or more
	// rows and the GEMVQuant (or tunedb) arm for a single row (Launch.One).
	// The zero value is DefaultXQGlobalBatchArm; GEMVBatch equal to the
	// one-row arm keeps a single kernel; its int8 mode follows the one-row
	// arm's (both read XQuant rows, or neither). The exact configuration
	// never uses it.
	GEMVBatch GEMVArm
	// GEMVLarge is the GEMV arm of the launches of those products at steps
	// of GEMVLargeRows rows or more, in programs of that many sequences,
	// when the batch arm (tuned or not) is an XQ 2 one: a tensor-core arm,
	// the zero value DefaultXQHalfArm (f16, XQ 4) for the weight types it
	// covers, DefaultXQMMAPipeArm (int8, XQ 3; DefaultXQMMAArm for types it
	// does not pipeline) for the others; an arm of another kind keeps two
	// kernels (the batch arm in its place runs the batch kernel at every
	// width). An epilogue the arm cannot compute leaves those steps to the
	// int8 arm or the batch arm. A tunedb entry of GEMVLargeClass replaces
	// it for its product.
	GEMVLarge GEMVArm
	// GEMVWide is the GEMV arm of the launches of those products at steps
	// wider than an f16 GEMVLarge arm's BatchRows when the tunedb has no
	// pick for their GEMVWideClass: a wide XQ 4 arm (BatchRows 32 or 64,
	// DefaultXQHalfWideArm), one block reading each weight for all its
	// rows. The zero value is DefaultXQHalfWideArm (64 rows: batch 64 of
	// llama2-7b q4_k_m decoded at 1.30× the 16-row arm's rate on an H100,
	// docs/PERFORMANCE.md); an arm of 16 rows or fewer is none: those steps
	// run GEMVLarge.
	GEMVWide GEMVArm
	MMA      MMAArm
	Block    BlockArm
	Decode   DecodeArm
	Prefill  PrefillArm
	// GemmSmall is the arm of the small-batch products (LowerOptions.SmallBatch).
	GemmSmall GemmSmallArm
}

// WithDefaults returns a with each zero field replaced by its family's
// default arm.
func (a Arms) WithDefaults() Arms {
	if a.GEMV == (GEMVArm{}) {
		a.GEMV = DefaultGEMVArm
	}
	if a.GEMVQuant == (GEMVArm{}) {
		a.GEMVQuant = DefaultXQGlobalOneArm
	}
	if a.GEMVBatch == (GEMVArm{}) {
		a.GEMVBatch = DefaultXQGlobalBatchArm
	}
	if a.GEMVLarge == (GEMVArm{}) {
		a.GEMVLarge = DefaultXQHalfArm
	}
	if a.GEMVWide == (GEMVArm{}) {
		a.GEMVWide = DefaultXQHalfWideArm
	}
	if a.MMA == (MMAArm{}) {
		a.MMA = DefaultMMAArm
	}
	if a.Block == (BlockArm{}) {
		a.Block = DefaultBlockArm
	}
	if a.Decode == (DecodeArm{}) {
		a.Decode = DefaultDecodeArm
	}
	if a.Prefill == (PrefillArm{}) {
		a.Prefill = DefaultPrefillArm
	}
	if a.GemmSmall == (GemmSmallArm{}) {
		a.GemmSmall = DefaultGemmSmallArm
	}
	return a
}

// LowerOptions choose the step class and its limits.
type LowerOptions struct {
	Class     StepClass
	MaxTokens int // largest T of a step (decode: forced to MaxSeqs)
	MaxSeqs   int // largest S
	Context   int // KV positions per sequence
	// PageSize is the KV cache page in positions (a power of two; 0 means
	// DefaultPageSize): attention reads a sequence's keys through its page
	// table (AttnShape, ArgPages).
	PageSize int
	// Cache is the KV cache type: F32 (the zero value), F16, BF16 or
	// CacheQ8 (int8 with a float32 scale per 32 elements).
	Cache dtype.Type
	// Arms are the arms of kernels Pick leaves alone; zero fields take the
	// family defaults.
	Arms Arms
	// HalfFrom is the step rows from which products whose Arms.GEMVLarge
	// is an f16 tensor-core arm (XQ 4) run it; 0 is HalfLargeRows. The
	// int8 tensor-core arms run from GEMVLargeRows. 1 runs them at every
	// step, so a sequence's products are the same kernels whatever the
	// width of its step (the batch-invariant configuration): the f16
	// kernel computes each row alone, its sums in an order that depends
	// on neither the other rows nor their number.
	HalfFrom int
	// BatchInvariant makes every decode step of a product run one kernel
	// whatever its width, so a sequence's logits do not depend on how many
	// sequences share its step: the f16 tensor-core product from one row
	// where its type has one (HalfFrom 1), elsewhere the batch kernel at
	// every width (no one-row kernel, no int8 tensor-core kernel).
	BatchInvariant bool
	// InvariantInt8, with BatchInvariant, keeps the f16 products out: the
	// batch kernel (for repacked types the int8 XQ 2 product, each row's
	// sums in the one-row kernel's order) runs at every width, one row
	// included, so the invariant class is the int8 one of the default
	// one-row step instead of the f16 tensor cores'.
	InvariantInt8 bool
	// Pick, when set, chooses each tunable kernel's arm by its family and
	// shape class (see ArmPicker); nil uses Arms everywhere.
	Pick ArmPicker
	// PrefillGEMV makes prefill use the float32 GEMV products instead of
	// the bf16 tensor-core ones (exact against the CPU, slower).
	PrefillGEMV bool
	// Argmax appends the greedy argmax of the logits.
	Argmax bool
	// Sample appends the sampling kernel (Sample) after the logits (and
	// the argmax): it reads the host-written sampling inputs (ArgSample)
	// and writes Program.SampleOut; a step whose records are inactive
	// leaves it alone.
	Sample bool
	// NoFusePrologue keeps each RMSNorm and SwiGLU before decode products
	// a launch of its own. By default one whose products all run arms with
	// prologue kernels (PrologueFusable: int8 activations, or f16/bf16 with
	// activations in shared memory) is computed inside those products'
	// activation staging (GEMVNorm, GEMVSwiGLU); the exact configuration
	// (PrefillGEMV) never fuses. Products of float activations (f16/bf16
	// weights) take them only with FuseFloat.
	NoFusePrologue bool
	// FuseFloat lets float-activation products (f16/bf16 weights) compute
	// the norm or SwiGLU before them too. Off by default: every block
	// recomputes it over the whole row, and on the H200 that made an
	// 8-layer llama2-7b f16 decode at 778.33 against 838.73 tok/s with the
	// norm and SwiGLU launches of their own. The int8 products compute
	// them once, in XQuant or a producer's epilogue.
	FuseFloat bool
	// NoQuantOut are the producers that keep an XQuant launch before the
	// int8 products they feed. Otherwise a residual product quantises the
	// next norm's rows in its epilogue (QuantOutNorm, XQEnds.QuantOut), a
	// gate/up product the SwiGLU's (QuantOutSwiGLU, XQEnds.SwiGLUOut; one
	// sequence only) and the decode attention's combine the output
	// projection's (QuantOutAttn, DecodeAttentionXQ), where their arms allow;
	// QuantOutBatch in it turns them all off in programs of two or more
	// sequences (the runtime's default: measured slower at batch 16 on the
	// H200, docs/PERFORMANCE.md).
	NoQuantOut QuantOuts
	// SmallBatch makes decode programs of MaxSeqs ≥ 2 use the small-batch
	// tensor-core product (GemmSmall: weights read once per step for the
	// whole batch, activations rounded to bf16) instead of the GEMV. Off by
	// default until measured.
	SmallBatch bool
	// RopeInProduct makes the XQ 2 products that write a decode step's
	// fused [q | k | v] rows rotate q and k and write the KV cache in
	// their epilogue (XQEnds.Rope) instead of a RopeKV launch a layer,
	// where the rows come straight from products (no bias, no q/k norm),
	// RoPE rotates adjacent pairs and every kernel of those launches has
	// two or four weight rows a warp. The runtime sets it for
	// one-sequence programs (1.016× at batch 1 on the H200).
	RopeInProduct bool
	// GEMVSplitBlocks: products whose untuned one-row arm is an unsplit
	// XQ 2 one of fewer blocks than this (the card's multiprocessors, as
	// the runtime passes it) run it with twice the threads, the two warps
	// of each row set splitting K. Such a product leaves multiprocessors
	// half empty; split, it keeps twice the loads in flight and each
	// warp's chain of loads is half as long, and it still runs in one wave
	// of blocks. GEMVSplitRows, when positive, replaces the rule: products
	// of at most that many rows split, if their rows have at least
	// GEMVSplitK elements. Zeros: off.
	GEMVSplitBlocks           int
	GEMVSplitRows, GEMVSplitK int
	// Multiprocessors is the card's count (DecodeArm.SMs of Live 3
	// attention); zero: DefaultMultiprocessors.
	Multiprocessors int
	// DecodePreload makes decode attention read the cached keys and
	// values of its first step before it waits for the previous kernel
	// (DecodeArm.Preload), and gives the launch before it the
	// Kernel.EarlyTrigger variants of its kernels, so that attention's
	// blocks start while that kernel runs.
	DecodePreload bool
	// FlashPrefill runs prefill attention on tensor cores
	// (FlashPrefillAttention) where it has a kernel for the shape (an f16
	// cache, heads of at most 128 dimensions); elsewhere PrefillAttention.
	FlashPrefill bool
	// noHalfPick passes over the f16 tunedb picks of GEMVLargeClass (Lower's
	// second try, where f16 rows cannot be shared).
	noHalfPick bool
}

// DefaultMultiprocessors is the multiprocessor count lowering assumes
// when LowerOptions.Multiprocessors is zero: the H200's, the card the
// rules that use it were measured on.
const DefaultMultiprocessors = 132

// view is where a node's value lives: floats [off, off+width) of each row
// of stride floats of buffer buf.
type view struct {
	buf, off, width, stride int
}

func (v view) contiguous() bool { return v.off == 0 && v.width == v.stride }

type lowerer struct {
	g       *ir.Graph
	o       LowerOptions
	p       *Program
	users   [][]*ir.Node
	kernels map[string]int
	weights map[string]int
	val     map[int]view
	done    map[int]bool
	arms    Arms
	// repacked marks the kernels that read their weight in layout 1
	repacked map[int]bool
	swiglus  map[int]bool // SwiGLU nodes their product computes (GEMVSwiGLU)
	// xqShare, while the products of one fusion group are lowered, is the
	// quantised input their XQ 2 products share (one XQuant launch).
	xqShare *xqInput
	// quantOut, while a residual product is lowered, is the norm after it
	// whose products read XQ 2 rows: the product's epilogue quantises the
	// new residual row for them (XQEnds.QuantOut) when its arms allow.
	quantOut *normAfter
	// preQuant are the quantised rows such epilogues wrote, by the norm
	// input they are of, for quantised to take instead of an XQuant launch.
	preQuant map[xqKey]preQuant
	// xqLaunches are the launches of XQ 2 and 3 products without a
	// residual or quantising epilogue, by launch index: what ropeInProducts
	// needs to give them the RoPE epilogue.
	xqLaunches map[int]xqLaunch
	// halfRows says, by the launch index of an XQuant launch, how the
	// products reading its rows run steps of halfFrom rows or more:
	// halfF16 (XQ 4, the launch takes XHalf at those steps) or halfInt8
	// (every other arm). All readers of one launch must agree.
	halfRows map[int]halfUse
	// ropeNorms are a layer's q/k head norms left to its RoPE launch
	// (RopeKVNorm), by the q RoPE node's ID.
	ropeNorms map[int]ropeNorm
	// moeRoutes are the topk nodes lowered (lower_moe.go), by node ID.
	moeRoutes map[int]moeRoute
}

// halfUse is how an XQuant launch's readers run large steps (halfRows).
type halfUse int

const (
	halfInt8 halfUse = iota + 1
	halfF16
)

// xqLaunch is a product launch ropeInProducts may regenerate: its kernels'
// generator, ends and arms (one and large zero when the launch has no such
// kernel), and its output view.
type xqLaunch struct {
	gen             func(GEMVArm, XQEnds) (*Kernel, error)
	e               XQEnds
	arm, one, large GEMVArm
	y               view
}

// QuantOuts is a set of the producers that quantise for the int8 products
// after them (LowerOptions.NoQuantOut).
type QuantOuts uint8

const (
	QuantOutNorm QuantOuts = 1 << iota
	QuantOutSwiGLU
	QuantOutAttn
	// QuantOutBatch: in decode programs of two or more sequences as well
	QuantOutBatch
	QuantOutAll = QuantOutNorm | QuantOutSwiGLU | QuantOutAttn | QuantOutBatch
)

// Lower turns g (verified, after ir.RunPasses) into a Program for the step
// class of opts. Products read their weights in the model's stored types;
// the fusion marks of the graph decide which ops share a kernel: an
// rms_norm prologue feeds all the products of its group (fused into one
// product with concatenated weights when their types agree), bias_add and
// residual add run in the product's epilogue, RoPE runs with the KV write.
//
// A program whose f16 tensor-core products (an XQ 4 Arms.GEMVLarge) would
// share activation rows with products that have no XQ 4 kernel is lowered
// with DefaultXQMMAPipeArm in its place.
func Lower(g *ir.Graph, opts LowerOptions) (*Program, error) {
	p, err := lower(g, opts)
	if errors.Is(err, errHalfShared) {
		opts.Arms.GEMVLarge, opts.noHalfPick = DefaultXQMMAPipeArm, true
		p, err = lower(g, opts)
	}
	return p, err
}

// errHalfShared: the rows of an XQuant launch would feed both an XQ 4
// product and one without an XQ 4 kernel at large steps (halfReader).
var errHalfShared = errors.New("the f16 tensor-core arm (XQ 4) reads the rows of an XQuant launch whose other products cannot")

func lower(g *ir.Graph, opts LowerOptions) (*Program, error) {
	if opts.MaxSeqs <= 0 || opts.Context <= 0 {
		return nil, fmt.Errorf("%w: max seqs %d, context %d must be positive", ErrLower, opts.MaxSeqs, opts.Context)
	}
	if opts.Class == Decode {
		opts.MaxTokens = opts.MaxSeqs
	}
	if opts.HalfFrom < 0 {
		return nil, fmt.Errorf("%w: f16 products from %d rows, want 1 or more", ErrLower, opts.HalfFrom)
	}
	if opts.MaxTokens < opts.MaxSeqs {
		return nil, fmt.Errorf("%w: max tokens %d below max seqs %d", ErrLower, opts.MaxTokens, opts.MaxSeqs)
	}
	if err := checkCache(opts.Cache); err != nil {
		return nil, err
	}
	if opts.PageSize == 0 {
		opts.PageSize = DefaultPageSize
	}
	if err := CheckPageSize(opts.PageSize); err != nil {
		return nil, err
	}
	l := &lowerer{g: g, o: opts, users: g.Users(), kernels: map[string]int{}, weights: map[string]int{},
		val: map[int]view{}, done: map[int]bool{}, arms: opts.Arms.WithDefaults(), repacked: map[int]bool{},
		swiglus: map[int]bool{}, preQuant: map[xqKey]preQuant{}, xqLaunches: map[int]xqLaunch{},
		halfRows: map[int]halfUse{}, ropeNorms: map[int]ropeNorm{}}
	l.p = &Program{Model: g.Name, Arch: g.Arch, Class: opts.Class, MaxTokens: opts.MaxTokens, MaxSeqs: opts.MaxSeqs,
		Context: opts.Context, PageSize: opts.PageSize, Cache: opts.Cache, Layers: g.Consts["layers"],
		KVWidth: g.Consts["heads_kv"] * g.Consts["head_dim"], Vocab: g.Consts["vocab"], Logits: -1, Argmax: -1,
		SampleOut: -1, HiddenIn: -1, HiddenOut: -1, StepInputs: -1}
	for _, n := range g.Nodes {
		if l.done[n.ID] {
			continue
		}
		if err := l.node(n); err != nil {
			return nil, fmt.Errorf("%w: %%%d %v: %w", ErrLower, n.ID, n.Op, err)
		}
	}
	l.splitLayouts()
	l.pruneKernels()
	// the kernel that writes the step's inputs, launched before the
	// others by the runtime (not a Launch: pruneKernels has run)
	k, err := StepInputs(DefaultBlockArm)
	if err != nil {
		return nil, err
	}
	l.p.Kernels = append(l.p.Kernels, k)
	l.p.StepInputs = len(l.p.Kernels) - 1
	if l.p.Logits < 0 && l.p.HiddenOut < 0 {
		return nil, fmt.Errorf("%w: graph has no output", ErrLower)
	}
	// A stage's boundary buffers live through the whole launch sequence:
	// hidden_in is filled before the first launch, hidden_out read after
	// the last.
	bufs := l.p.Buffers.Buffers
	if b := l.p.HiddenIn; b >= 0 {
		bufs[b].First, bufs[b].Last = 0, max(bufs[b].Last, 0)
	}
	if b := l.p.HiddenOut; b >= 0 {
		bufs[b].Last = len(l.p.Launches) - 1
	}
	l.p.Buffers.place(opts.MaxTokens, opts.MaxSeqs)
	if err := l.p.Buffers.Check(); err != nil {
		return nil, err
	}
	return l.p, nil
}

func (l *lowerer) node(n *ir.Node) error {
	switch n.Op {
	case ir.OpTokens, ir.OpPositions, ir.OpWeight, ir.OpRope:
		return nil // inputs, weights on use; RoPE runs with its KV write
	case ir.OpEmbed:
		return l.embed(n)
	case ir.OpReshape:
		v, ok := l.val[n.Args[0].ID]
		if !ok {
			return fmt.Errorf("operand %%%d has no value", n.Args[0].ID)
		}
		l.val[n.ID] = v
		return nil
	case ir.OpRMSNorm:
		if n.Role == "prologue" {
			return l.normGroup(n)
		}
		if l.postNormAdd(n) != nil {
			return l.postNorm(n)
		}
		if len(n.Shape) == 2 {
			return l.rowNorm(n)
		}
		return l.headNorm(n)
	case ir.OpScale:
		return l.scaleOp(n)
	case ir.OpSoftcap:
		return l.softcapOp(n)
	case ir.OpGeGLU:
		return l.geglu(n)
	case ir.OpMatmul:
		if l.routerProduct(n) {
			return l.router(n)
		}
		return l.matmul(n)
	case ir.OpTopK, ir.OpMoEWeights, ir.OpMoEMatmul, ir.OpMoESum:
		return l.moeNode(n)
	case ir.OpKVWrite:
		return l.ropeKV(n)
	case ir.OpAttention:
		return l.attention(n)
	case ir.OpSwiGLU:
		return l.swiglu(n)
	case ir.OpLastTokens:
		return l.lastTokens(n)
	case ir.OpOutput:
		return l.output(n)
	case ir.OpHiddenIn:
		E := n.Int("dim")
		b := l.buffer("hidden_in", ir.T, E)
		l.p.HiddenIn = b
		l.val[n.ID] = view{buf: b, width: E, stride: E}
		return nil
	case ir.OpHiddenOut:
		v, err := l.valueOf(n.Args[0])
		if err != nil {
			return err
		}
		if !v.contiguous() {
			return fmt.Errorf("hidden_out of a strided value")
		}
		l.p.HiddenOut = v.buf
		return nil
	}
	return fmt.Errorf("no lowering outside a fusion group")
}

// kernel registers k (deduplicated by name) and returns its index.
func (l *lowerer) kernel(k *Kernel, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if i, ok := l.kernels[k.Name]; ok {
		if l.p.Kernels[i].Source != k.Source {
			// a name must say everything its source specialises on (a norm's eps
			// does not: a model has one)
			return 0, fmt.Errorf("%w: two different kernels named %s (e.g. norms of one width with different eps)", ErrUnsupported, k.Name)
		}
		return i, nil
	}
	l.p.Kernels = append(l.p.Kernels, k)
	l.kernels[k.Name] = len(l.p.Kernels) - 1
	return len(l.p.Kernels) - 1, nil
}

// launch appends a launch of kernel k and extends the live ranges of the
// buffers it touches.
func (l *lowerer) launch(k int, rows ir.Dim, nodes []int, args ...Arg) {
	if len(args) != len(l.p.Kernels[k].Params) {
		panic(fmt.Sprintf("BUG: %s takes %d arguments, lowering gave %d", l.p.Kernels[k].Name, len(l.p.Kernels[k].Params), len(args)))
	}
	l.liveAt(len(l.p.Launches), args)
	l.p.Launches = append(l.p.Launches, Launch{Kernel: k, Rows: rows, Args: args, Nodes: nodes})
}

// liveAt extends the live range of every buffer among args to launch idx,
// the last so far (a new launch, or arguments added to the last one).
func (l *lowerer) liveAt(idx int, args []Arg) {
	for _, a := range args {
		if a.Kind == ArgBuffer {
			b := &l.p.Buffers.Buffers[a.Index]
			if b.First < 0 {
				b.First = idx
			}
			b.Last = idx
		}
	}
}

// buffer adds a new activation buffer.
func (l *lowerer) buffer(name string, rows ir.Dim, width int) int {
	l.p.Buffers.Buffers = append(l.p.Buffers.Buffers, Buffer{Name: name, Rows: rows, Width: width, First: -1, Last: -1})
	return len(l.p.Buffers.Buffers) - 1
}

func bufArg(v view) Arg  { return Arg{Kind: ArgBuffer, Index: v.buf, Offset: 4 * v.off} }
func wArg(i int) Arg     { return Arg{Kind: ArgWeight, Index: i} }
func inArg(in Input) Arg { return Arg{Kind: ArgInput, Index: int(in)} }
func constArg(v int) Arg { return Arg{Kind: ArgConst, Value: v} }
func rowsArg() Arg       { return Arg{Kind: ArgRows} }
func nullArg() Arg       { return Arg{Kind: ArgNull} }
func pagesArg() Arg      { return Arg{Kind: ArgPages} }
func cacheArg(layer int, v bool) Arg {
	if v {
		return Arg{Kind: ArgVCache, Index: layer}
	}
	return Arg{Kind: ArgKCache, Index: layer}
}

// weight registers a device weight under key and returns its index.
func (l *lowerer) weight(key string, w WeightRef) int {
	if i, ok := l.weights[key]; ok {
		return i
	}
	l.p.Weights = append(l.p.Weights, w)
	l.weights[key] = len(l.p.Weights) - 1
	return len(l.p.Weights) - 1
}

// vector registers 1-D weights as one float32 vector, parts padded to pads.
func (l *lowerer) vector(name string, parts []WeightPart) int {
	key := "vec:" + name
	for _, p := range parts {
		key += fmt.Sprintf(":%s/%d", p.Name, p.PadRows)
	}
	return l.weight(key, WeightRef{Name: name, Kind: WeightVector, Type: dtype.F32, Parts: parts, Cols: 1, PadCols: 1})
}

// vectorOf registers the single 1-D weight node w.
func (l *lowerer) vectorOf(w *ir.Node) int {
	n := w.Ints("ne")[0]
	return l.vector(w.Str("name"), []WeightPart{{Name: w.Str("name"), Rows: n, PadRows: n}})
}

func (l *lowerer) valueOf(n *ir.Node) (view, error) {
	v, ok := l.val[n.ID]
	if !ok {
		return view{}, fmt.Errorf("operand %%%d (%v) has no value", n.ID, n.Op)
	}
	return v, nil
}

func (l *lowerer) embed(n *ir.Node) error {
	tab := n.Args[0]
	t, ne := tab.DType("type"), tab.Ints("ne")
	// Registered like a product's weight, so a tied output projection
	// shares the device copy.
	w, err := l.matrix([]matPart{{t: t, name: tab.Str("name"), n: ne[1], padN: ne[1], k: ne[0]}}, ne[0])
	if err != nil {
		return err
	}
	k, err := l.kernel(Embedding(t, ne[0], l.blockArm("embedding", EmbeddingClass(t, ne[0]))))
	if err != nil {
		return err
	}
	b := l.buffer("x", ir.T, ne[0])
	l.launch(k, ir.T, []int{n.ID}, inArg(InTokens), wArg(w), bufArg(view{buf: b, width: ne[0], stride: ne[0]}), rowsArg())
	l.val[n.ID] = view{buf: b, width: ne[0], stride: ne[0]}
	return nil
}

func (l *lowerer) output(n *ir.Node) error {
	v, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if !v.contiguous() {
		return fmt.Errorf("logits are not a contiguous buffer")
	}
	l.p.Logits = v.buf
	if l.o.Argmax {
		k, err := l.kernel(Argmax(v.width, l.blockArm("argmax", ArgmaxClass(v.width))))
		if err != nil {
			return err
		}
		b := l.buffer("argmax", ir.S, 1)
		l.p.Buffers.Buffers[b].Int32 = true
		l.launch(k, ir.S, []int{n.ID}, bufArg(v), bufArg(view{buf: b, width: 1, stride: 1}), rowsArg())
		l.p.Argmax = b
	}
	if l.o.Sample {
		k, err := l.kernel(Sample(v.width, DefaultSampleArm))
		if err != nil {
			return err
		}
		work := l.buffer("sample_work", ir.S, v.width)
		out := l.buffer("sample_out", ir.S, SampleOutWords)
		l.p.Buffers.Buffers[out].Int32 = true
		sample := func(in SampleInput) Arg { return Arg{Kind: ArgSample, Index: int(in)} }
		l.launch(k, ir.S, []int{n.ID}, bufArg(v), bufArg(view{buf: work, width: v.width, stride: v.width}),
			sample(SampleRecords), sample(SampleBias), sample(SamplePenalties), sample(SampleMasks),
			bufArg(view{buf: out, width: SampleOutWords, stride: SampleOutWords}), rowsArg())
		l.p.SampleOut = out
		if l.p.Argmax >= 0 { // read after the step, like the sampling outputs
			l.p.Buffers.Buffers[l.p.Argmax].Last = len(l.p.Launches) - 1
		}
	}
	return nil
}

func (l *lowerer) lastTokens(n *ir.Node) error {
	x, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	if l.o.Class == Decode {
		l.val[n.ID] = x // one token per sequence: the last token of s is token s
		return nil
	}
	if !x.contiguous() {
		return fmt.Errorf("last_tokens of a strided value")
	}
	k, err := l.kernel(GatherRows(x.width, l.arms.Block))
	if err != nil {
		return err
	}
	b := l.buffer("last", ir.S, x.width)
	y := view{buf: b, width: x.width, stride: x.width}
	l.launch(k, ir.S, []int{n.ID}, bufArg(x), inArg(InLast), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

func (l *lowerer) swiglu(n *ir.Node) error {
	g, err := l.valueOf(n.Args[0])
	if err != nil {
		return err
	}
	u, err := l.valueOf(n.Args[1])
	if err != nil {
		return err
	}
	w := g.width
	if g.buf != u.buf || g.off != 0 || u.off != w || u.width != w || g.stride != 2*w {
		return fmt.Errorf("swiglu operands are not the halves of one fused gate/up row")
	}
	if l.fuseSwiGLU(n, w) {
		// the product computes it (GEMVSwiGLU) from the [gate | up] rows
		l.swiglus[n.ID] = true
		l.val[n.ID] = view{buf: g.buf, width: 2 * w, stride: 2 * w}
		return nil
	}
	k, err := l.kernel(SwiGLU(w, l.blockArm("swiglu", SwiGLUClass(w))))
	if err != nil {
		return err
	}
	b := l.buffer("ffn", n.Shape[0], w)
	y := view{buf: b, width: w, stride: w}
	l.launch(k, n.Shape[0], []int{n.ID}, bufArg(view{buf: g.buf, stride: g.stride}), bufArg(y), rowsArg())
	l.val[n.ID] = y
	return nil
}

// scale returns the attention node's score scale as float32.
func attnScale(n *ir.Node) float32 { return float32(n.Float("scale")) }

// isNaNOrInf reports a non-finite float attribute.
func isNaNOrInf(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
