package codegen

import (
	"fmt"
	"strings"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// StepClass is the shape class a Program is lowered for.
type StepClass int

const (
	// Decode steps have one new token per sequence (T = S): GEMV products
	// and split-KV decode attention; their launches are captured as CUDA
	// graphs per batch-size bucket.
	Decode StepClass = iota
	// Prefill steps have any number of tokens of one or several sequences:
	// tensor-core products and causal prefill attention.
	Prefill
)

// String returns "decode" or "prefill".
func (c StepClass) String() string {
	if c == Prefill {
		return "prefill"
	}
	return "decode"
}

// Input is a per-step int32 array the host writes before the launches.
type Input int

const (
	// InTokens [T]: the step's token ids.
	InTokens Input = iota
	// InPositions [T]: each token's position in its sequence.
	InPositions
	// InSlots [T]: each token's KV cache row: its page's first row plus
	// its position within the page (PageRow).
	InSlots
	// InTokBase [T]: where the page table of each token's sequence starts
	// in the step's page tables (ArgPages).
	InTokBase
	// InTiles [T]: the first token of each tile of the tensor-core prefill
	// attention (FlashTiles: a sequence's tokens cut every
	// Program.FlashRows), then -1.
	InTiles
	// InKVBase [S]: where the page table of each sequence starts in the
	// step's page tables (ArgPages).
	InKVBase
	// InKVLen [S]: each sequence's cached length after the step.
	InKVLen
	// InLast [S]: the index of each sequence's last token in the step.
	InLast
	// NumInputs is the number of inputs.
	NumInputs
)

var inputNames = [NumInputs]string{"tokens", "positions", "slots", "tok_base", "tiles", "kv_base", "kv_len", "last"}

// String names the input.
func (in Input) String() string {
	if in < 0 || in >= NumInputs {
		return fmt.Sprintf("input%d", int(in))
	}
	return inputNames[in]
}

// Rows is the symbolic length of the input: ir.T or ir.S.
func (in Input) Rows() ir.Dim {
	if in >= InKVBase {
		return ir.S
	}
	return ir.T
}

// ArgKind says what a launch argument is bound to.
type ArgKind uint8

const (
	// ArgBuffer is an activation buffer of the plan (Index), at byte Offset.
	ArgBuffer ArgKind = iota + 1
	// ArgWeight is device weight Index.
	ArgWeight
	// ArgInput is per-step input Index (an Input).
	ArgInput
	// ArgKCache is the key cache of layer Index.
	ArgKCache
	// ArgVCache is the value cache of layer Index.
	ArgVCache
	// ArgRows is the int row count of the launch (its Rows dimension).
	ArgRows
	// ArgConst is the int constant Value.
	ArgConst
	// ArgNull is a null pointer (an unused operand).
	ArgNull
	// ArgPages is the step's page tables, int32: the page of positions
	// [i·PageSize, (i+1)·PageSize) of a sequence is entry base + i, base
	// its InKVBase (InTokBase for each of its tokens).
	ArgPages
	// ArgSample is the host-written sampling input Index (a SampleInput).
	ArgSample
	// ArgTickets is the program's launch counters, int32, Program.Tickets
	// of them: zero before every launch that uses them, which leaves them
	// zero (DecodeAttentionFused).
	ArgTickets
)

// Arg binds one kernel parameter.
type Arg struct {
	Kind   ArgKind
	Index  int
	Offset int // bytes, for ArgBuffer
	Value  int // for ArgConst
}

// Launch is one kernel launch of a Program.
type Launch struct {
	Kernel int    // index into Program.Kernels
	Rows   ir.Dim // ir.T or ir.S: the Dims.Tokens the geometry and ArgRows use
	Args   []Arg  // one per kernel parameter
	Nodes  []int  // the IR nodes this launch computes
	// One, when positive, is 1 + the index of the kernel launched instead
	// when the step has a single row (batch-1 decode): a kernel with the
	// same parameters and weight layout, tuned for one row.
	One int
	// Large, when positive, is 1 + the index of the kernel launched
	// instead when the step has LargeFrom rows or more: a kernel with the
	// same parameters and weight layout, for large batches.
	Large int
	// LargeFrom is the step rows from which Large runs (0: GEMVLargeRows).
	LargeFrom int
	// Wide, when positive, is 1 + the index of the kernel launched instead
	// of Large when the step has WideFrom rows or more: the f16 product
	// with more activation rows a block (GEMVArm.BatchRows 32 or 64).
	Wide     int
	WideFrom int
}

// largeFrom is the step rows from which l launches its Large kernel.
func (l *Launch) largeFrom() int {
	if l.LargeFrom > 0 {
		return l.LargeFrom
	}
	return GEMVLargeRows
}

// KernelFor returns the index of the kernel l launches for a step whose
// Dims.Tokens is rows.
//
// A Large kernel from one row (LargeFrom 1: the batch-invariant
// configuration, LowerOptions.HalfFrom 1) runs every step, one row too.
func (l *Launch) KernelFor(rows int) int {
	if l.Wide > 0 && rows >= l.WideFrom {
		return l.Wide - 1
	}
	if l.Large > 0 && rows >= l.largeFrom() {
		return l.Large - 1
	}
	if l.One > 0 && rows == 1 {
		return l.One - 1
	}
	return l.Kernel
}

// WeightKind says how a device weight is built from model tensors.
type WeightKind int

const (
	// WeightMatrix is rows of a stored type: the parts' rows one after
	// another, each row padded with zeros to PadCols elements and each part
	// with zero rows to its PadRows (padding only for float types).
	WeightMatrix WeightKind = iota
	// WeightVector is float32: each part's elements (a 1-D tensor converted
	// from any float type, or zeros when Name is empty), padded to PadRows.
	WeightVector
	// WeightRope is the RoPE table: Rope.Dims/2 float32 inverse frequencies
	// with the position scale and the frequency factors (tensor Factors, if
	// any) applied.
	WeightRope
)

// WeightPart is one model tensor inside a device weight.
type WeightPart struct {
	Name    string // GGUF tensor name ("" for zeros)
	Rows    int    // rows (matrix) or elements (vector)
	PadRows int    // rows or elements on the device (≥ Rows)
	// Experts, when positive, says the tensor is 3-D: Experts matrices of
	// Rows/Experts rows one after another (a mixture of experts' ne
	// [cols, rows/experts, experts]).
	Experts int
}

// NE is the GGUF shape (ne order) of a matrix part of rows of cols.
func (p WeightPart) NE(cols int) []int {
	if p.Experts > 0 {
		return []int{cols, p.Rows / p.Experts, p.Experts}
	}
	return []int{cols, p.Rows}
}

// WeightRef is one device weight a Program reads.
type WeightRef struct {
	Name    string // display name
	Kind    WeightKind
	Type    dtype.Type // stored type (F32 for vectors and rope tables)
	Parts   []WeightPart
	Cols    int // elements per row in the model file (matrices)
	PadCols int // elements per row on the device
	Rope    ir.RopeParams
	Factors string // rope frequency factors tensor, or ""
	// Layout is the matrix's device layout: 0 the file's rows, 1 the
	// planes of Repack (read by layout-1 GEMV arms). Same size either way.
	Layout int
}

// Rows returns the rows (or elements, for vectors) on the device.
func (w *WeightRef) Rows() int {
	n := 0
	for _, p := range w.Parts {
		n += p.PadRows
	}
	return n
}

// Bytes returns the device size of the weight.
func (w *WeightRef) Bytes() int64 {
	switch w.Kind {
	case WeightMatrix:
		rb, err := w.Type.RowBytes(w.PadCols)
		if err != nil {
			panic("BUG: weight " + w.Name + ": " + err.Error())
		}
		return int64(rb) * int64(w.Rows())
	case WeightRope:
		return 4 * int64(w.Rope.Dims/2)
	}
	return 4 * int64(w.Rows())
}

// RopeTable returns the contents of a WeightRope: θ_i·PositionScale for
// i < Rope.Dims/2 (ir.RopeParams.Thetas, which applies llama3 or YaRN
// scaling, or factors, the values of tensor Factors), the inverse
// frequencies the RoPE kernels multiply positions by.
func (w *WeightRef) RopeTable(factors []float32) []float32 {
	th := w.Rope.Thetas(factors)
	scale := w.Rope.PositionScale()
	inv := make([]float32, len(th))
	for i, t := range th {
		inv[i] = float32(t * scale)
	}
	return inv
}

// Program is a model's forward step lowered for one step class: the kernels
// (each specialised to the model's dims and weight types), the launches in
// order with their argument bindings, the activation buffer plan and the
// device weights.
type Program struct {
	Model     string
	Arch      string
	Class     StepClass
	MaxTokens int // largest T of a step of the class
	MaxSeqs   int // largest S
	Context   int // KV positions per sequence (Dims.KVLen of every launch)
	PageSize  int // KV cache rows a page (AttnShape.PageSize)
	Cache     dtype.Type
	Layers    int
	KVWidth   int // floats per cached position and layer: HeadsKV·HeadDim
	Vocab     int
	// FlashRows is the tokens a tile of the tensor-core prefill attention
	// holds (InTiles), 0 where the program does not run it.
	FlashRows int
	// Tickets is the int32 launch counters the program's kernels take
	// (ArgTickets): zeroed once when allocated, left zero by each launch.
	Tickets  int
	Kernels  []*Kernel
	Launches []Launch
	Buffers  BufferPlan
	Weights  []WeightRef
	Logits   int // buffer holding the [S][Vocab] logits
	Argmax   int // buffer holding the [S] int32 argmax, or -1
	// SampleOut is the buffer holding the [S][SampleOutWords] int32
	// outputs of the sampling kernel (LowerOptions.Sample), or -1.
	SampleOut int
	// HiddenIn is the [T][E] buffer a pipeline stage after the first reads
	// its hidden_in from (filled before the launches), or -1.
	HiddenIn int
	// HiddenOut is the [T][E] buffer holding a pipeline stage's hidden_out
	// after the launches (a stage before the last: Logits is -1), or -1.
	HiddenOut int
	// StepInputs is the kernel (StepInputs) that writes the step's inputs,
	// page tables and sampling records from page-locked host memory before
	// the launches: every program from Lower has one (-1 otherwise). It has
	// no Launch: the runtime launches it with the words of each step.
	StepInputs int
}

// Dims returns the symbolic sizes of launch l in a step of T tokens over S
// sequences.
func (p *Program) Dims(l *Launch, T, S int) Dims {
	rows := T
	if l.Rows == ir.S {
		rows = S
	}
	return Dims{Tokens: rows, Seqs: S, KVLen: p.Context}
}

// WeightBytes returns the device bytes of all weights.
func (p *Program) WeightBytes() int64 {
	var n int64
	for i := range p.Weights {
		n += p.Weights[i].Bytes()
	}
	return n
}

// PageBytes returns the bytes of one KV cache page of every layer (keys
// and values).
func (p *Program) PageBytes() int64 {
	return 2 * int64(p.Layers) * int64(p.PageSize) * int64(CacheRowBytes(p.Cache, p.KVWidth))
}

// Source returns every kernel's source, one after another, as written to
// kernels.cu.
func (p *Program) Source() string {
	var b strings.Builder
	for i, k := range p.Kernels {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "// ===== kernel %d: %s (%s) =====\n", i, k.Name, k.Family)
		b.WriteString(k.Source)
	}
	return b.String()
}

// String is the readable dump of the program (memra compile --dump,
// plan.txt): header, kernels, inputs, buffers, weights and launches.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "program %s %q %s: max tokens %d, max seqs %d, context %d, cache %v in pages of %d\n",
		p.Arch, p.Model, p.Class, p.MaxTokens, p.MaxSeqs, p.Context, p.Cache, p.PageSize)
	fmt.Fprintf(&b, "kernels %d:\n", len(p.Kernels))
	for i, k := range p.Kernels {
		fmt.Fprintf(&b, "  k%d %s %s\n", i, k.Family, k.Name)
	}
	b.WriteString("inputs:\n")
	for in := Input(0); in < NumInputs; in++ {
		fmt.Fprintf(&b, "  in.%s : I32[%v]\n", in, in.Rows())
	}
	fmt.Fprintf(&b, "buffers (arena %d bytes, %d without reuse):\n", p.Buffers.ArenaBytes, p.Buffers.TotalBytes())
	for i, bf := range p.Buffers.Buffers {
		fmt.Fprintf(&b, "  b%d %s : %s[%v,%d] @%d +%d live L%d..L%d\n", i, bf.Name, bf.elemName(), bf.Rows, bf.Width, bf.Offset, bf.Size, bf.First, bf.Last)
	}
	fmt.Fprintf(&b, "weights (%d bytes):\n", p.WeightBytes())
	for i := range p.Weights {
		w := &p.Weights[i]
		fmt.Fprintf(&b, "  w%d %s : %s\n", i, w.Name, w.describe())
	}
	fmt.Fprintf(&b, "launches %d (geometry at T=%d, S=%d):\n", len(p.Launches), p.MaxTokens, p.MaxSeqs)
	for i := range p.Launches {
		l := &p.Launches[i]
		k := p.Kernels[l.Kernel]
		g := k.Launch(p.Dims(l, p.MaxTokens, p.MaxSeqs))
		args := make([]string, len(l.Args))
		for j, a := range l.Args {
			args[j] = k.Params[j].Name + "=" + a.describe()
		}
		nodes := make([]string, len(l.Nodes))
		for j, n := range l.Nodes {
			nodes[j] = fmt.Sprintf("%%%d", n)
		}
		one := ""
		if l.One > 0 {
			one = fmt.Sprintf(" (k%d at one row)", l.One-1)
		}
		if l.Large > 0 {
			one += fmt.Sprintf(" (k%d from %d rows)", l.Large-1, l.largeFrom())
		}
		if l.Wide > 0 {
			one += fmt.Sprintf(" (k%d from %d rows)", l.Wide-1, l.WideFrom)
		}
		fmt.Fprintf(&b, "  L%d k%d%s rows=%v grid(%d,%d,%d) block(%d) smem %d (%s)  ; %s\n", i, l.Kernel, one, l.Rows,
			g.Grid[0], g.Grid[1], g.Grid[2], g.Block[0], g.Shared, strings.Join(args, ", "), strings.Join(nodes, " "))
	}
	if p.HiddenIn >= 0 {
		fmt.Fprintf(&b, "hidden_in b%d, ", p.HiddenIn)
	}
	if p.HiddenOut >= 0 {
		fmt.Fprintf(&b, "hidden_out b%d", p.HiddenOut)
	} else {
		fmt.Fprintf(&b, "logits b%d", p.Logits)
	}
	if p.Argmax >= 0 {
		fmt.Fprintf(&b, ", argmax b%d", p.Argmax)
	}
	if p.SampleOut >= 0 {
		fmt.Fprintf(&b, ", sample b%d", p.SampleOut)
	}
	if p.StepInputs >= 0 {
		fmt.Fprintf(&b, ", step inputs k%d", p.StepInputs)
	}
	b.WriteString("\n")
	return b.String()
}

func (a Arg) describe() string {
	switch a.Kind {
	case ArgBuffer:
		if a.Offset != 0 {
			return fmt.Sprintf("b%d+%d", a.Index, a.Offset)
		}
		return fmt.Sprintf("b%d", a.Index)
	case ArgWeight:
		return fmt.Sprintf("w%d", a.Index)
	case ArgInput:
		return "in." + Input(a.Index).String()
	case ArgKCache:
		return fmt.Sprintf("kcache[%d]", a.Index)
	case ArgVCache:
		return fmt.Sprintf("vcache[%d]", a.Index)
	case ArgRows:
		return "rows"
	case ArgConst:
		return fmt.Sprint(a.Value)
	case ArgNull:
		return "null"
	case ArgPages:
		return "pages"
	case ArgSample:
		return "sample." + SampleInput(a.Index).String()
	case ArgTickets:
		return fmt.Sprintf("tickets+%d", a.Offset/4)
	}
	return "?"
}

func (w *WeightRef) describe() string {
	parts := make([]string, len(w.Parts))
	for i, p := range w.Parts {
		name := p.Name
		if name == "" {
			name = "zeros"
		}
		parts[i] = fmt.Sprintf("%s[%d", name, p.Rows)
		if p.PadRows != p.Rows {
			parts[i] += fmt.Sprintf("→%d", p.PadRows)
		}
		parts[i] += "]"
	}
	switch w.Kind {
	case WeightMatrix:
		cols := fmt.Sprint(w.Cols)
		if w.PadCols != w.Cols {
			cols += fmt.Sprintf("→%d", w.PadCols)
		}
		rp := ""
		if w.Layout == 1 {
			rp = " repacked"
		}
		return fmt.Sprintf("%v%s matrix %d×%s = %s, %d bytes", w.Type, rp, w.Rows(), cols, strings.Join(parts, " + "), w.Bytes())
	case WeightRope:
		f := ""
		if w.Factors != "" {
			f = " ÷ " + w.Factors
		}
		r := w.Rope
		sc := r.Scaling
		if r.Scaling != "none" {
			sc += fmt.Sprintf(" factor %g", r.Factor)
		}
		if r.OrigCtx > 0 {
			sc += fmt.Sprintf(" over %d positions, ramp %g–%g turns", r.OrigCtx, r.LowFreq, r.HighFreq)
		}
		return fmt.Sprintf("rope inv_freq[%d] %v dims %d base %g scaling %s%s", r.Dims/2, r.Style, r.Dims, r.Base, sc, f)
	}
	return fmt.Sprintf("F32 vector[%d] = %s", w.Rows(), strings.Join(parts, " + "))
}
