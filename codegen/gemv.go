package codegen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// GEMVArm is the tuning of the matrix-vector product.
type GEMVArm struct {
	Threads int // threads per block, a multiple of 32
	// RowsPerBlock is the output rows per block, Threads/RowsPerBlock
	// threads (whole warps; one warp with XQ 1) per row. For XQ 2 it is the
	// sets of RowsPerWarp rows a block, each shared by Threads/32/RowsPerBlock
	// warps (1, 2 or 4) that split its K; for XQ 3 the sets of rows a block
	// (RowsPerWarp tiles of 16 each), split the same way.
	RowsPerBlock int
	Unroll       int // unroll factor of the loop over a row's 32-element units (pipelined XQ 3: groups a stage)
	SharedX      int // 1: stage the activation row in shared memory; 0: read it from global memory
	// Layout is the weight layout the kernel reads: 0 the file's, 1 the
	// repacked planes of Repack (RepackTypes only; needs SharedX 1).
	Layout int
	// XQ 1 quantises the activations to int8 in shared memory and takes
	// dp4a products (gemv_xq.go; layout 1, one warp a row, tolerance XQTol).
	// XQ 2 takes the same products on activations an XQuant launch
	// quantised once for the whole product (and for the products that share
	// its input), reading them from global memory: no staging in the
	// blocks, and the prologue (norm, SwiGLU) runs once in XQuant. XQ 3
	// multiplies the same operands on int8 tensor cores (mma.sync, a warp
	// per 16 weight rows or a multiple; gemv_mma8.go), for batches. XQ 4
	// multiplies the weights dequantised to f16 on f16 tensor cores against
	// f16 activation rows an XHalf launch wrote (gemv_mmah.go; Q4_K and
	// Q6_K, pipelined: Stages > 0; tolerance HalfTol), for batches.
	XQ int
	// BatchRows is the activation rows a block serves with one weight read:
	// 1 to 16 with XQ 1 to 4, 0 otherwise (one row); XQ 4 arms may also
	// take 32 or 64 (wideBatch), so that a wide step reads each weight once,
	// and those of 8 rows or fewer (smallBatch) copy no token past the
	// step's rows.
	BatchRows int
	// RowsPerWarp is the weight rows each warp of an XQ 1 or 2 arm
	// computes together, so that each activation load serves all of them
	// and the block's activation rows serve RowsPerBlock×RowsPerWarp weight
	// rows: 0 (one) or 2 or 4. For XQ 3 and 4 it is the tiles of 16 weight
	// rows a warp multiplies with each activation fragment it loads (0: one).
	RowsPerWarp int
	// Stages is, for XQ 3 over Q4_K and Q6_K weights, the depth of each
	// warp's ring in shared memory, filled by cp.async (2, 4 or 8 stages of
	// Unroll groups of 32, at most 8 groups in all; gemv_mma8_pipe.go); 0
	// fetches one group ahead in registers. XQ 4 arms always have a ring.
	Stages int
	// Ordered 1 makes an XQ 3 arm add its terms in the order
	// of the unsplit XQ 2 kernels (gemv_mma8_order.go): each row's sum is
	// then the float the one-row and batch kernels compute, bit for bit,
	// for Q4_K, Q6_K and Q4_0 weights; its split (8, 16 or 32 warps) keeps
	// 32/split lane sums a lane, and with Stages a ring of that many
	// groups (Unroll 1) feeds each warp. Ordered 10·s + u (s 2, u 1, 2, 4
	// or 8; unpipelined, 16 or 32 warps) keeps the order of the XQ 2
	// kernels split over s warps with unroll u instead, each warp's
	// stretches of u·32 groups apart (orderSplit, orderUnroll). Not a
	// tuned knob: the int8 class of the batch-invariant configuration
	// names it (LowerOptions.InvariantInt8).
	Ordered int
	// Prefetch 1 makes an XQ 2 arm of two or more activation rows a block
	// load row j+1's group before it takes row j's dots, so the loads of a
	// unit's rows overlap the dots instead of waiting in turn (each row's
	// dots otherwise sit behind a branch on the block's row count, which
	// the compiler does not hoist the next row's loads across). Only the
	// order of the loads changes, not the arithmetic.
	Prefetch int
	// MinBlocks, on an XQ 2 arm, asks the compiler for that many blocks
	// a multiprocessor (__launch_bounds__'s second argument): registers
	// capped at 65536 / (MinBlocks·Threads) a thread, so that more warps
	// hide the loads' latency (Nsight Compute put the one-row products at
	// 16 warps a multiprocessor and the 5-row ones at 1.29 waves of three
	// blocks, docs/PERFORMANCE.md session 36). 0: the compiler's choice.
	// The arithmetic is the same; only register allocation (and spills)
	// change. Names carry "_b" and the count.
	MinBlocks int
}

func (a GEMVArm) rowsPerWarp() int { return max(1, a.RowsPerWarp) }

// kSplit is the warps that share each of an XQ 2 or 3 arm's row sets,
// each taking every kSplit-th stretch of K (1 otherwise).
func (a GEMVArm) kSplit() int {
	if a.XQ < 2 || a.RowsPerBlock <= 0 {
		return 1
	}
	return max(1, a.Threads/32/a.RowsPerBlock)
}

// Split returns a with ks warps to each row set, each taking a share of
// its K (kSplit; XQ 2 and 3 arms): Threads becomes 32·ks·RowsPerBlock.
func (a GEMVArm) Split(ks int) GEMVArm {
	a.Threads = 32 * ks * a.RowsPerBlock
	return a
}

// xqMaxSplit is the most warps an XQ 2 arm's row set may be split over.
const xqMaxSplit = 4

func (a GEMVArm) batchRows() int { return max(1, a.BatchRows) }

// DefaultGEMVArm is the arm used before tuning: one warp per row, 8 rows per
// block, activations in shared memory.
var DefaultGEMVArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 1}

// DefaultRepackArm is the float product on the repacked layout, a warp a
// row (an arm of layout 1): 2.3× the file layout on the H200, and
// what the exact configuration's repacked products would take.
var DefaultRepackArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 1, Layout: 1}

// DefaultXQArm is the int8-activation arm (XQ 1): a warp a
// row, up to 16 decode rows a block (FitXQ: fewer where rows are too long
// for shared memory).
var DefaultXQArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 4, SharedX: 1, Layout: 1, XQ: 1, BatchRows: 16}

// DefaultXQOneArm is the one-row arm of repacked products whose blocks
// quantise their own activations (XQ 1): int8 activations, four weight
// rows a warp sharing each activation load. On the H200 it decoded
// llama2-7b q4_k_m 1.5× as fast as the float product on the same layout
// (docs/PERFORMANCE.md); DefaultXQGlobalOneArm replaced it as the default.
var DefaultXQOneArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 1, BatchRows: 1, RowsPerWarp: 4}

// DefaultXQBatchArm is the batch arm of DefaultXQOneArm: int8
// activations, 16 rows a block per weight read, four weight rows a warp.
var DefaultXQBatchArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 1, BatchRows: 16, RowsPerWarp: 4}

// DefaultXQGlobalOneArm and DefaultXQGlobalBatchArm are the untuned arms
// of repacked products in one-row decode steps (Arms.GEMVQuant) and in
// steps of two or more rows (Arms.GEMVBatch): activations quantised once
// per product by XQuant (XQ 2), four weight rows a warp for one row, 16
// activation rows a block and two weight rows a warp for batches. On the
// H200 they decoded llama2-7b q4_k_m at 1.14× (batch 1) and 1.9× (batch
// 16) the XQ 1 arms with fused prologues (docs/PERFORMANCE.md).
var (
	DefaultXQGlobalOneArm   = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 1, RowsPerWarp: 4}
	DefaultXQGlobalBatchArm = GEMVArm{Threads: 256, RowsPerBlock: 8, Unroll: 1, SharedX: 1, Layout: 1, XQ: 2, BatchRows: 16, RowsPerWarp: 2}
)

// DefaultXQMMAArm is the int8 tensor-core arm (XQ 3) of steps of
// GEMVLargeRows rows or more (Arms.GEMVLarge): two tiles of 16 weight rows
// (32 rows) a block, its eight warps splitting K, 16 activation rows a
// block. On the H200 (llama2-7b q4_k_m, docs/PERFORMANCE.md) it decoded
// 16 sequences at 1.05× DefaultXQGlobalBatchArm and 64 at 1.37×, but 2 to
// 8 at 0.54 to 0.80×: its mma tiles cost the same for 2 rows as for 16.
var DefaultXQMMAArm = GEMVArm{Threads: 256, RowsPerBlock: 1, Unroll: 1, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2}

// DefaultXQMMAPipeArm is the tensor-core arm of steps of GEMVLargeRows
// rows or more (Arms.GEMVLarge) for Q4_K and Q6_K weights: each warp's
// groups fed to it through a ring of two stages of two groups in shared
// memory by cp.async (gemv_mma8_pipe.go), 32 weight rows a block, its 16
// warps splitting K. On the H200 (llama2-7b q4_k_m, tg128@512, 16
// sequences, docs/PERFORMANCE.md) it decoded at 1.34× DefaultXQMMAArm
// (2341 against 1749 tok/s); the other types take DefaultXQMMAArm.
var DefaultXQMMAPipeArm = GEMVArm{Threads: 512, RowsPerBlock: 1, Unroll: 2, SharedX: 1, Layout: 1, XQ: 3, BatchRows: 16, RowsPerWarp: 2, Stages: 2}

// DefaultXQHalfArm is the f16 tensor-core arm (XQ 4, gemv_mmah.go) in
// DefaultXQMMAPipeArm's geometry: 32 weight rows a block, 16 warps
// splitting K, rings of two stages of two groups; Arms.GEMVLarge's default
// for Q4_K and Q6_K weights. On an H100 (llama2-7b q4_k_m, tg128@512, 16
// sequences, docs/PERFORMANCE.md) it decoded at 1.16× DefaultXQMMAPipeArm
// (2539.51 against 2193.98 tok/s), with kernel-check and parity at 16
// sequences passing.
var DefaultXQHalfArm = GEMVArm{Threads: 512, RowsPerBlock: 1, Unroll: 2, SharedX: 1, Layout: 1, XQ: 4, BatchRows: 16, RowsPerWarp: 2, Stages: 2}

// GEMVLargeRows is the step rows from which products take the
// Arms.GEMVLarge kernel (Launch.Large): the batch where DefaultXQMMAArm
// overtook DefaultXQGlobalBatchArm on the H200.
const GEMVLargeRows = 16

// HalfLargeRows is the step rows from which the f16 tensor-core products
// (Arms.GEMVLarge of XQ 4) run in place of the batch arm
// (LowerOptions.HalfFrom overrides it). On an H100 (llama2-7b q4_k_m,
// tg32@128, docs/PERFORMANCE.md) they decoded 2 sequences at 0.87× the
// batch arm, 3 at 1.00×, 4 at 1.01×, 6 and 8 at 1.27×, 12 at 1.51×: their
// weight decoding costs the same for any rows, the batch arm's work grows
// with them. 3, not 4: the CUDA runtime pads a decode step to its graph's
// batch (1, 2, 4, 8, …), and from 3 rows a step of s sequences takes the
// kernels of the graph it is padded to, so replayed and plain steps
// compute in the same numerical class (f16 or int8 activations).
const HalfLargeRows = 3

// FitXQ halves an int8-activation arm's BatchRows until its activation rows
// of k elements fit shared memory (XQ 1; XQ 2 arms stage nothing).
func FitXQ(a GEMVArm, k int) GEMVArm {
	for a.XQ == 1 && a.BatchRows > 1 && xqShared(k, a.BatchRows) > xqMaxShared {
		a.BatchRows /= 2
	}
	return a
}

// GEMVKnobs is the search space of GEMVArm.
var GEMVKnobs = []Knob{
	{"threads", []int{64, 128, 256, 512}},
	{"rows_per_block", []int{1, 2, 4, 8, 16}},
	{"unroll", []int{1, 2, 4, 8}},
	{"shared_x", []int{0, 1}},
	{"layout", []int{0, 1}},
	{"xq", []int{0, 1, 2, 3}},
	{"batch_rows", []int{0, 1, 2, 4, 8, 16}},
	{"rows_per_warp", []int{0, 2, 4}},
	{"stages", []int{0}},     // the pipelined XQ 3 arms run where named (Arms.GEMVLarge, GEMVLargeClass)
	{"ordered", []int{0}},    // the ordered arms run where the int8 invariant class names them
	{"prefetch", []int{0}},   // searched by the batch space (GEMVBatchSpaceFor)
	{"min_blocks", []int{0}}, // searched by the one-row and batch spaces
}

// Validate reports whether a is well formed.
func (a GEMVArm) Validate() error {
	if a.Threads < 32 || a.Threads > 1024 || a.Threads%32 != 0 || a.RowsPerBlock <= 0 ||
		a.Threads%a.RowsPerBlock != 0 || (a.Threads/a.RowsPerBlock)%32 != 0 || a.Unroll <= 0 || a.SharedX < 0 || a.SharedX > 1 ||
		a.Layout < 0 || a.Layout > 1 || (a.Layout == 1 && a.SharedX != 1) ||
		a.XQ < 0 || a.XQ > 4 || (a.XQ != 0 && (a.Layout != 1 || (a.XQ == 1 && a.Threads/a.RowsPerBlock != 32))) ||
		(a.XQ == 2 && a.Threads/a.RowsPerBlock > 32*xqMaxSplit) ||
		(a.XQ == 0 && a.BatchRows != 0) || (a.XQ != 0 && (a.BatchRows < 1 || a.BatchRows > 16) && !a.wideBatch()) ||
		(a.BatchRows > 16 && !a.wideFits()) ||
		(a.RowsPerWarp != 0 && a.RowsPerWarp != 2 && a.RowsPerWarp != 4) || (a.RowsPerWarp != 0 && a.XQ == 0) ||
		(a.XQ == 3 && a.mma8SplitBytes() > 48<<10) || // the split sums in static shared memory
		(a.XQ == 4 && (a.Stages == 0 || a.mmahMaxShared() > xqMaxShared || a.mmahRegs() > a.mmahRegLimit())) ||
		(a.Stages != 0 && (a.XQ < 3 || (a.Stages != 2 && a.Stages != 4 && a.Stages != 8) || (a.Unroll != 1 && a.Unroll != 2 && a.Unroll != 4) ||
			a.Stages*a.Unroll > 8 || a.mma8PipeMaxShared() > xqMaxShared)) ||
		(a.Ordered != 0 && (!validOrder(a.Ordered) || a.XQ != 3 || 32%a.kSplit() != 0 || a.kSplit() < 8 ||
			(a.orderSplit() > 1 && (a.Stages != 0 || a.kSplit() < 16)) ||
			(a.Stages != 0 && (a.Unroll != 1 || a.mma8OrderPipeMaxShared() > xqMaxShared)))) ||
		a.Prefetch < 0 || a.Prefetch > 1 || (a.Prefetch == 1 && (a.XQ != 2 || a.BatchRows < 2)) ||
		a.MinBlocks < 0 || (a.MinBlocks > 0 && (a.XQ != 2 || a.MinBlocks*a.Threads > 1024)) {
		return fmt.Errorf("%w: gemv arm %+v", ErrUnsupported, a)
	}
	return nil
}

// GEMVArms lists every valid GEMVArm of the search space.
func GEMVArms() []GEMVArm {
	return enumerate(GEMVKnobs, func(v map[string]int) GEMVArm {
		return GEMVArmOf(v)
	}, func(a GEMVArm) error {
		if !searched(a) {
			return ErrUnsupported
		}
		return a.Validate()
	})
}

// String is the arm's short name used in kernel names and tables.
func (a GEMVArm) String() string {
	s := fmt.Sprintf("t%d_r%d_u%d_s%d", a.Threads, a.RowsPerBlock, a.Unroll, a.SharedX)
	if a.Layout != 0 {
		s += fmt.Sprintf("_l%d", a.Layout)
	}
	switch a.XQ {
	case 1:
		s += fmt.Sprintf("_q%d", a.batchRows())
	case 2:
		s += fmt.Sprintf("_g%d", a.batchRows())
	case 3:
		s += fmt.Sprintf("_m%d", a.batchRows())
	case 4:
		s += fmt.Sprintf("_h%d", a.batchRows())
	}
	if a.RowsPerWarp > 1 {
		s += fmt.Sprintf("_w%d", a.RowsPerWarp)
	}
	if a.Stages > 0 {
		s += fmt.Sprintf("_p%d", a.Stages)
	}
	if a.Ordered > 0 {
		s += fmt.Sprintf("_o%d", a.Ordered)
	}
	if a.Prefetch > 0 {
		s += fmt.Sprintf("_f%d", a.Prefetch)
	}
	if a.MinBlocks > 0 {
		s += fmt.Sprintf("_b%d", a.MinBlocks)
	}
	return s
}

// ParseGEMVArm parses the String form of a GEMVArm, e.g.
// "t256_r8_u4_s1_l1_q16_w2" (q: XQ 1, g: XQ 2, m: XQ 3, h: XQ 4, with the
// batch rows; p: the stages of a pipelined XQ 3 or 4 arm; o: Ordered).
func ParseGEMVArm(s string) (GEMVArm, error) {
	var a GEMVArm
	var global, mma, half int
	fields := map[byte]*int{'t': &a.Threads, 'r': &a.RowsPerBlock, 'u': &a.Unroll, 's': &a.SharedX, 'l': &a.Layout, 'q': &a.BatchRows, 'g': &global,
		'm': &mma, 'h': &half, 'w': &a.RowsPerWarp, 'p': &a.Stages, 'o': &a.Ordered, 'f': &a.Prefetch, 'b': &a.MinBlocks}
	for _, f := range strings.Split(s, "_") {
		if len(f) < 2 || fields[f[0]] == nil {
			return a, fmt.Errorf("%w: gemv arm %q: bad field %q", ErrUnsupported, s, f)
		}
		v, err := strconv.Atoi(f[1:])
		if err != nil {
			return a, fmt.Errorf("%w: gemv arm %q: bad field %q", ErrUnsupported, s, f)
		}
		*fields[f[0]] = v
	}
	kinds := 0
	for _, v := range []int{a.BatchRows, global, mma, half} {
		if v > 0 {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return a, fmt.Errorf("%w: gemv arm %q: more than one of q, g, m, h", ErrUnsupported, s)
	case global > 0:
		a.XQ, a.BatchRows = 2, global
	case mma > 0:
		a.XQ, a.BatchRows = 3, mma
	case half > 0:
		a.XQ, a.BatchRows = 4, half
	case a.BatchRows > 0:
		a.XQ = 1
	}
	if a.RowsPerWarp == 1 {
		a.RowsPerWarp = 0
	}
	return a, a.Validate()
}

// ValidFor reports whether a is well formed for weights of type t: layout
// 1 needs a repacked layout of t.
func (a GEMVArm) ValidFor(t dtype.Type) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Layout == 1 && !Repackable(t) {
		return fmt.Errorf("%w: gemv layout 1 for %v (have %v)", ErrUnsupported, t, RepackTypes)
	}
	return nil
}

// Prologue is what a GEMV computes from its activation rows while it
// stages them, in place of a launch of its own before the product.
type Prologue struct {
	Kind PrologueKind
	Eps  float32 // ProNorm
}

// PrologueKind names a GEMV prologue.
type PrologueKind int

const (
	ProNone PrologueKind = iota
	// ProNorm RMS-normalises each row: x / rms(x) · nw (GEMVNorm).
	ProNorm
	// ProSwiGLU reads rows of 2K, [gate | up], and takes silu(gate) · up
	// (GEMVSwiGLU).
	ProSwiGLU
)

// suffix is the kernel name part of the prologue.
func (p Prologue) suffix() string {
	return [...]string{"", "_norm", "_swiglu"}[p.Kind]
}

// PrologueFusable reports whether a product with arm over weights of type t
// can compute the norm or SwiGLU before it without a launch of its own:
// GEMVNorm and GEMVSwiGLU have kernels for the XQ 1 arms and the f16/bf16
// arms with activations in shared memory, whose staging of x computes it;
// the XQ 2 arms read activations XQuant quantised, and XQuant computes it.
func PrologueFusable(t dtype.Type, arm GEMVArm) bool {
	if arm.ValidFor(t) != nil {
		return false
	}
	return arm.XQ != 0 || ((t == dtype.F16 || t == dtype.BF16) && arm.SharedX == 1 && arm.Layout == 0)
}

// UntunedPrologues reports whether the decode products lowering runs
// untuned for weights of type t have prologue kernels: the int8-activation
// arms of the repacked types, the shared-memory arm of f16/bf16.
func UntunedPrologues(t dtype.Type) bool {
	return Repackable(t) || PrologueFusable(t, DefaultGEMVArm)
}

// GEMVNorm is GEMV of the RMS-normalised activations: y (+)= W·(x / rms(x)
// · nw), the norm computed by each block while it stages its activation
// rows, so the model's RMSNorm before a decode product needs no launch of
// its own nor a buffer round trip:
//
//	gemv(const u8* W, const float* x, const float* nw, float* y, int m)
//
// Only for the arms of PrologueFusable.
func GEMVNorm(t dtype.Type, n, k int, residual bool, arm GEMVArm, eps float32) (*Kernel, error) {
	return GEMVInto(t, n, k, residual, arm, Prologue{Kind: ProNorm, Eps: eps}, 0)
}

// GEMVSwiGLU is GEMV of silu(gate) · up: x holds m rows of 2k floats,
// [gate | up] (a fused gate/up product's output), and each block computes
// the k activations it multiplies while staging them (the FFN's down
// product without the SwiGLU launch). Parameters as GEMV's. Only for the
// arms of PrologueFusable.
func GEMVSwiGLU(t dtype.Type, n, k int, residual bool, arm GEMVArm) (*Kernel, error) {
	return GEMVInto(t, n, k, residual, arm, Prologue{Kind: ProSwiGLU}, 0)
}

// GEMVInto is GEMV with the prologue pro (ProNone, GEMVNorm's or
// GEMVSwiGLU's) whose output rows are ystride floats apart (0: n), so that
// products of different weight types write their columns of one fused row
// (y points at the first column) without a concatenation. Only for the
// arms of PrologueFusable; an XQ 2 arm takes no prologue here (its XQuant
// launch computes it).
func GEMVInto(t dtype.Type, n, k int, residual bool, arm GEMVArm, pro Prologue, ystride int) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if !PrologueFusable(t, arm) || (arm.XQ >= 2 && pro.Kind != ProNone) {
		return nil, fmt.Errorf("%w: gemv with a fused prologue for %v and arm %v", ErrUnsupported, t, arm)
	}
	if n <= 0 || k%8 != 0 || (ystride != 0 && ystride < n) {
		return nil, fmt.Errorf("%w: gemv with a fused prologue, N %d, K %d, output stride %d", ErrUnsupported, n, k, ystride)
	}
	if ystride == n {
		ystride = 0
	}
	if arm.XQ != 0 {
		return gemvXQ(t, n, k, residual, arm, pro, ystride)
	}
	return gemvHalf(t, n, k, residual, arm, pro, ystride)
}

// ysName is the kernel name part of an output row stride (0: none).
func ysName(ystride int) string {
	if ystride == 0 {
		return ""
	}
	return fmt.Sprintf("_ys%d", ystride)
}

// ysDefine is the YS #define of an output row stride: ystride, or N.
func ysDefine(ystride int) string {
	if ystride == 0 {
		return "#define YS N // output row stride"
	}
	return fmt.Sprintf("#define YS %d // output row stride", ystride)
}

// GEMV returns the matrix-vector product y = W·x for W of n rows of k
// elements of type t (GGUF layout: each row contiguous), dequantised in
// registers, for m activation rows x [m][k] → y [m][n]:
//
//	gemv(const u8* W, const float* x, float* y, int m)
//
// With residual the product is added to y (y += W·x). grid (⌈n/rows⌉, m).
// An arm of Layout 1 reads W in the layout of Repack(t, n, k, ·). An XQ 2
// arm reads the rows XQuant(k, ·) wrote instead of x:
//
//	gemv(const u8* W, const u8* xq, float* y, int m)
func GEMV(t dtype.Type, n, k int, residual bool, arm GEMVArm) (*Kernel, error) {
	if err := checkRow(t, k); err != nil {
		return nil, err
	}
	if err := arm.ValidFor(t); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: gemv with %d rows", ErrUnsupported, n)
	}
	if arm.XQ != 0 {
		return gemvXQ(t, n, k, residual, arm, Prologue{}, 0)
	}
	if arm.Layout == 1 {
		return gemvRepacked(t, n, k, residual, arm)
	}
	if (t == dtype.F16 || t == dtype.BF16) && arm.SharedX == 1 {
		return gemvHalf(t, n, k, residual, arm, Prologue{}, 0)
	}
	rowBytes, _ := t.RowBytes(k)
	tpr := arm.Threads / arm.RowsPerBlock
	epi := ""
	if residual {
		epi = "_res"
	}
	name := fmt.Sprintf("gemv_%s_n%d_k%d%s_%s", typeTag(t), n, k, epi, arm)
	params := productParams(false)
	shared := 0
	if arm.SharedX == 1 {
		shared = 4 * k
	}
	src := source(fmt.Sprintf("gemv: %v weights, N %d, K %d, residual %v, %v", t, n, k, residual, arm), []string{dqHelper(t), "warp", "pdl"}, func(w *Writer) {
		w.Linef("#define N %d", n)
		w.Linef("#define K %d", k)
		w.Linef("#define ROW_BYTES %d", rowBytes)
		w.Linef("#define TPR %d // threads per row", tpr)
		w.Linef("#define RPB %d // rows per block", arm.RowsPerBlock)
		w.Blank()
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("const int r = blockIdx.x * RPB + threadIdx.x / TPR;")
			w.Line("const int lane = threadIdx.x % TPR;")
			w.Line("const u8* wr = W + (size_t)r * ROW_BYTES;")
			w.Line("pdl_wait();")
			if arm.SharedX == 1 {
				w.Line("extern __shared__ float4 xs4[];")
				w.Line("const float4* xg = (const float4*)(x + (size_t)blockIdx.y * K);")
				w.For("i", "threadIdx.x", "K / 4", fmt.Sprint(arm.Threads), 0, func() { w.Line("xs4[i] = xg[i];") })
				w.Line("__syncthreads();")
				w.Line("const float* xs = (const float*)xs4;")
			} else {
				w.Line("const float* xs = x + (size_t)blockIdx.y * K;")
			}
			emitFloatRowDot(w, t, n, arm, tpr, residual)
			w.Line("pdl_launch();")
		}})
	})
	return &Kernel{Family: "gemv", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		return Geometry{Grid: dim3(ceilDiv(n, arm.RowsPerBlock), d.Tokens, 1), Block: dim3(arm.Threads, 1, 1), Shared: uint32(shared)}
	}}, nil
}

// emitFloatRowDot writes the float arms' product of weight row r (wr, of
// type t, TPR threads a row) with the activations xs, and its store into
// y (added for a residual product): each thread's units dequantised and
// multiplied in float, then gemvRowStore's sums.
func emitFloatRowDot(w *Writer, t dtype.Type, n int, arm GEMVArm, tpr int, residual bool) {
	w.Line("float acc = 0.f;")
	end := "K / 32"
	if n%arm.RowsPerBlock != 0 {
		w.Comment("rows past N (last block only) skip the loop but join the reductions")
		w.Line("const int units = r < N ? K / 32 : 0;")
		end = "units"
	}
	w.For("u", "lane", end, "TPR", arm.Unroll, func() {
		w.Line("float v[32];")
		w.Linef("%s(wr, u, v);", dqFunc(t))
		w.Line("const float4* xu = (const float4*)(xs + 32 * u);")
		w.For("i", "0", "8", "1", -1, func() {
			w.Line("const float4 q = xu[i];")
			w.Line("acc += v[4 * i] * q.x + v[4 * i + 1] * q.y + v[4 * i + 2] * q.z + v[4 * i + 3] * q.w;")
		})
	})
	gemvRowStore(w, arm, tpr, n, residual, "N")
}

// productParams are the parameters of the product kernels (GEMV, MMA,
// gemm_small), with the norm weight nw when the RMSNorm is fused.
func productParams(norm bool) []Param {
	if norm {
		return []Param{{"const u8* __restrict__", "W"}, {"const float* __restrict__", "x"}, {"const float* __restrict__", "nw"},
			{"float* __restrict__", "y"}, {"int", "m"}}
	}
	return []Param{{"const u8* __restrict__", "W"}, {"const float* __restrict__", "x"}, {"float* __restrict__", "y"}, {"int", "m"}}
}

// gemvRowStore emits the end of a GEMV row shared by every layout: the
// warp (and, past 32 threads a row, the block) sum of acc, and the store of
// row r of y, added to y for a residual epilogue.
func gemvRowStore(w *Writer, arm GEMVArm, tpr, n int, residual bool, ys string) {
	w.Line("acc = warp_sum(acc);")
	if tpr > 32 {
		w.Linef("__shared__ float part[%d];", arm.Threads/32)
		w.If("(threadIdx.x & 31) == 0", func() { w.Line("part[threadIdx.x >> 5] = acc;") })
		w.Line("__syncthreads();")
		w.If("lane == 0", func() {
			w.Line("const float* pr = part + (threadIdx.x >> 5);")
			w.For("i", "1", fmt.Sprint(tpr/32), "1", -1, func() { w.Line("acc += pr[i];") })
		})
	}
	store := "lane == 0"
	if n%arm.RowsPerBlock != 0 {
		store = "lane == 0 && r < N"
	}
	w.If(store, func() {
		op := "="
		if residual {
			op = "+="
		}
		w.Linef("y[(size_t)blockIdx.y * %s + r] %s acc;", ys, op)
	})
}
