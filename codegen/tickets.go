package codegen

// Grid-wide tails: a kernel whose blocks each write part of what a last
// step needs whole (a row's products before its norm, a head's split
// partials before their combine) takes a ticket a block once its writes
// are fenced, and the block that takes the last runs that step. The
// counters are the program's ArgTickets, zero before a launch and left
// zero by it (the last block sets its counter back).

// The tails are arms of family "tail" (TailArm), one class each
// (TailPostNorm, TailHeadRope, TailQuantNext), off where the tunedb has no
// entry: on an H100 (session 34) gemma3-12b q4_k_m decoded at 216.33
// tok/s with the post-norm and head RoPE tails against 226.25 without
// (0.956×, one call), the trigger after each tail holding back the next
// kernel's launch. Triggering before the tail's work instead gave NaN
// logits on an H100 (session 35: the post-norm and quantising MoE down
// tails; the head RoPE tail stayed correct), so the trigger stays after
// the work. An entry with on 1 turns a tail on for a card.
//
// Two more classes bring the one-sequence program's epilogues to decode
// programs of 2 to NarrowSeqs sequences (a speculative verify step's K + 1
// rows of one stream, a small server), whose launches otherwise quantise
// each product's rows and run RoPE apart (LowerOptions.NoQuantOut's
// QuantOutBatch, the runtime's default, measured slower at batch 16 on the
// H200): TailNarrowQuantOut, the residual products and the attention's
// combine quantising the next product's rows (QuantOutNorm, QuantOutAttn;
// the gate/up product's SwiGLU stays a launch where a batch arm runs),
// and TailNarrowRope, RoPE in the QKV products (XQEnds.Rope). Each writes
// the floats of the launches it replaces, as in the one-sequence program.
// On an H100 both made llama2-7b q4_k_m's 5-row step 1.094× faster
// (session 35); off without an entry, which `memra autotune MODEL
// --families tail` writes where whole decode steps confirm a class.
const (
	TailPostNorm       = "post_norm"        // Gemma's post-norms in the products before them (XQEnds.PostNorm)
	TailHeadRope       = "head_rope"        // RoPE and the q/k norms in the QKV products (XQEnds.HeadRope)
	TailQuantNext      = "quant_next"       // the next layer's XQuant in the summing MoE down product (MoEShape.QuantNext)
	TailNarrowQuantOut = "narrow_quant_out" // the quantising epilogues in decode programs of 2 to NarrowSeqs sequences
	TailNarrowRope     = "narrow_rope"      // RoPE in the QKV products of such programs
)

// NarrowSeqs is the most sequences of a decode program that the narrow
// tails (TailNarrowQuantOut, TailNarrowRope) apply to.
const NarrowSeqs = 8

// TailClasses are the classes of family "tail", in order.
var TailClasses = []string{TailPostNorm, TailHeadRope, TailQuantNext, TailNarrowQuantOut, TailNarrowRope}

// NarrowTail reports whether tail class applies to decode programs of 2 to
// NarrowSeqs sequences (the others to one-sequence programs).
func NarrowTail(class string) bool { return class == TailNarrowQuantOut || class == TailNarrowRope }

// TailArm is whether a program runs a tail (or an epilogue) of its class.
type TailArm struct{ On bool }

// TailKnobs is the search space of TailArm.
var TailKnobs = []Knob{{"on", []int{0, 1}}}

// TailArmOf returns the TailArm of tunedb point p.
func TailArmOf(p Point) TailArm { return TailArm{On: p["on"] != 0} }

// Point returns a as a tunedb point.
func (a TailArm) Point() Point {
	if a.On {
		return Point{"on": 1}
	}
	return Point{"on": 0}
}

// Validate reports whether a is well formed (always).
func (a TailArm) Validate() error { return nil }

// String is the arm's name.
func (a TailArm) String() string {
	if a.On {
		return "on"
	}
	return "off"
}

// tailOn reports whether the tunedb turns the tail of class on.
func (l *lowerer) tailOn(class string) bool {
	p, ok := l.picked("tail", class)
	return ok && TailArmOf(p).On
}

// narrowOn reports whether this is a decode program of 2 to NarrowSeqs
// sequences and the tunedb turns the narrow tail of class on.
func (l *lowerer) narrowOn(class string) bool {
	return l.o.Class == Decode && l.o.MaxSeqs >= 2 && l.o.MaxSeqs <= NarrowSeqs && l.tailOn(class)
}

// ticketsArg returns the counters of a launch that takes n tickets: n
// int32 of the program's ArgTickets that no other launch takes. Kernels
// overlap under programmatic dependent launch (a block of the next may run
// before the last of this one ends: the fused attention's blocks that hold
// no live split take their ticket before they wait), so two launches
// counting on the same counters could take each other's tickets; the
// first fused attention after a QKV product with HeadRope did (NaN logits
// on an H100, session 34).
func (l *lowerer) ticketsArg(n int) Arg {
	a := Arg{Kind: ArgTickets, Offset: 4 * l.p.Tickets}
	l.p.Tickets += n
	return a
}

// emitLastBlock writes the ticket of a block among total (an int
// expression) that share the counter at ticket (an int* expression), after
// the block's writes (what) are fenced, then body in the block that took
// the last, after a fence (it reads the others' writes, past L1).
func emitLastBlock(w *Writer, ticket, total, what string, body func()) {
	w.Line("__shared__ int fin;")
	w.Linef("__threadfence(); // %s visible to every block before its ticket", what)
	w.Line("__syncthreads();")
	w.If("threadIdx.x == 0", func() {
		w.Linef("int* tk = %s;", ticket)
		w.Linef("fin = atomicAdd(tk, 1) == %s - 1;", total)
		w.If("fin", func() { w.Line("*tk = 0; // the next launch counts from zero") })
	})
	w.Line("__syncthreads();")
	w.If("fin", func() {
		w.Line("__threadfence();")
		body()
	})
}

// emitRowDefines writes, for a tail that works on rows of n by threads
// threads after a kernel body that had its own K, XR and SL, those macros
// redefined for the rows (XQuant's meanings: the row length, its
// quantised bytes, the chunks of 8 a thread).
func emitRowDefines(w *Writer, n, threads int) {
	w.Line("#undef K")
	w.Line("#undef XR")
	w.Line("#undef SL")
	w.Linef("#define K %d", n)
	w.Linef("#define XR %d // bytes of the quantised row", XQRowBytes(n))
	w.Linef("#define SL %d // chunks of 8 a thread", ceilDiv(n/8, threads))
}

// emitNormRowQuant writes the quantisation of the row of K floats at src
// into the row at dst as XQuant with the norm weight nw writes it, by
// threads threads (emitXQuantRowLd; the row read with ld).
func emitNormRowQuant(w *Writer, src, dst string, threads int, ld string) {
	w.Linef("const float4* xp = (const float4*)(%s);", src)
	w.Linef("u8* qr = %s;", dst)
	w.Line("float4* meta = (float4*)(qr + K);")
	emitXQuantRowLd(w, Prologue{Kind: ProNorm}, threads, ld)
}
