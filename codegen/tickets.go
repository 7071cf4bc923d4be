package codegen

// Grid-wide tails: a kernel whose blocks each write part of what a last
// step needs whole (a row's products before its norm, a head's split
// partials before their combine) takes a ticket a block once its writes
// are fenced, and the block that takes the last runs that step. The
// counters are the program's ArgTickets, zero before a launch and left
// zero by it (the last block sets its counter back).

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
