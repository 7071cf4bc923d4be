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
