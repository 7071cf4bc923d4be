package codegen

import "fmt"

// A step's inputs, page tables and sampling records reach the device
// through one kernel launch, StepInputs, instead of a copy each: the host
// packs them into page-locked memory, which the device reads in place
// (mapped into its address space under unified addressing), and the
// kernel writes each word where the step's kernels read it. A pipelined
// step fed the tokens of the step before (runtime.PipelinedStepper) takes
// them from that step's output on the device in the same launch.
//
// The packed slot, in 32-bit words:
//
//	[NumInputs][width]  the first width rows of each input (InTokens first)
//	[tab]               the step's page tables (ArgPages)
//	[rec]               the sampling records (SampleRecords), if any

// StepInputsMaxBlocks bounds StepInputs' grid: its threads loop over the
// words past it (a prefill step's inputs are some tens of thousands).
const StepInputsMaxBlocks = 64

// StepInputsWords is the words of a packed slot of width rows of each
// input, tab page table entries and rec record words: StepInputs' word
// count (its Dims.Tokens).
func StepInputsWords(width, tab, rec int) int { return int(NumInputs)*width + tab + rec }

// PackStepInputs writes the packed slot into dst (at least
// StepInputsWords words): the first width words of each input, input i at
// inputs[i·pitch:], then tab, then rec. It returns the words written.
func PackStepInputs(dst, inputs []uint32, pitch, width int, tab, rec []uint32) int {
	n := 0
	for i := range int(NumInputs) {
		n += copy(dst[n:n+width], inputs[i*pitch:i*pitch+width])
	}
	n += copy(dst[n:], tab)
	n += copy(dst[n:], rec)
	return n
}

// StepInputs returns the kernel that writes a step's inputs from a packed
// slot (see above) host, read in place from page-locked host memory:
//
//	step_inputs(const u32* host, u32* inputs, int pitch_words, int width_words,
//	            u32* tab, int tab_words, u32* rec, int rec_words,
//	            const u32* feed, int feed_stride_words, int feed_n)
//
// Input i's rows go to inputs + i·pitch_words, the page tables to tab,
// the records to rec. Where feed is not null, the first feed_n rows of
// InTokens are feed[r·feed_stride_words] (the device's output of the
// step before) instead of the slot's. grid min(⌈words/threads⌉,
// StepInputsMaxBlocks) of arm.Threads, words (Dims.Tokens) from
// StepInputsWords; a grid-stride loop covers the rest. It is launched on
// its own, with no programmatic dependent launch: it must not start
// before the step before it has read the inputs it overwrites, and the
// step's first kernel waits for it (pdl_wait) before it reads them.
func StepInputs(arm BlockArm) (*Kernel, error) {
	if err := arm.Validate(); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("step_inputs_%s", arm)
	params := []Param{{"const u32*", "host"}, {"u32* __restrict__", "inputs"}, {"int", "pitch_words"}, {"int", "width_words"},
		{"u32* __restrict__", "tab"}, {"int", "tab_words"}, {"u32* __restrict__", "rec"}, {"int", "rec_words"},
		{"const u32* __restrict__", "feed"}, {"int", "feed_stride_words"}, {"int", "feed_n"}}
	src := source(fmt.Sprintf("step inputs from page-locked host memory: %v", arm), []string{"types"}, func(w *Writer) {
		w.Linef("#define NUM_INPUTS %d", int(NumInputs))
		w.Linef("#define IN_TOKENS %d", int(InTokens))
		w.Blank()
		w.Comment("a word of the slot in host memory: fetched again, never a cached line (the slot is")
		w.Comment("rewritten by the host every other step)")
		w.Emit(Func{Name: "host_word", Return: "u32", Params: []Param{{"const u32*", "p"}}, Body: func(w *Writer) {
			w.Line("return __ldcv(p);")
		}})
		w.Emit(Func{Name: name, Global: true, LaunchBounds: arm.Threads, Params: params, Body: func(w *Writer) {
			w.Line("const int in_words = NUM_INPUTS * width_words, tab_end = in_words + tab_words;")
			w.Line("const int total = tab_end + rec_words;")
			w.For("j", "blockIdx.x * blockDim.x + threadIdx.x", "total", "gridDim.x * blockDim.x", 0, func() {
				w.IfElse("j < in_words", func() {
					w.Line("const int a = j / width_words, r = j - a * width_words;")
					w.Comment("a fed step's tokens: the step before's output on the device")
					w.Line("const bool fed = a == IN_TOKENS && r < feed_n && feed != 0;")
					w.Line("inputs[(size_t)a * pitch_words + r] = fed ? feed[(size_t)r * feed_stride_words] : host_word(host + j);")
				}, func() {
					w.IfElse("j < tab_end", func() {
						w.Line("tab[j - in_words] = host_word(host + j);")
					}, func() {
						w.Line("rec[j - tab_end] = host_word(host + j);")
					})
				})
			})
		}})
	})
	return &Kernel{Family: "step_inputs", Name: name, Source: src, Params: params, Launch: func(d Dims) Geometry {
		blocks := min(max(ceilDiv(d.Tokens, arm.Threads), 1), StepInputsMaxBlocks)
		return Geometry{Grid: dim3(blocks, 1, 1), Block: dim3(arm.Threads, 1, 1)}
	}}, nil
}

// RefStepInputs is StepInputs on the host: the words of the packed slot
// host to inputs (input i's rows at i·pitch), tab and rec, the first
// feedN tokens from feed[r·feedStride] where feed is not nil.
func RefStepInputs(host, inputs []uint32, pitch, width int, tab, rec, feed []uint32, feedStride, feedN int) {
	in := int(NumInputs) * width
	for j := range StepInputsWords(width, len(tab), len(rec)) {
		switch {
		case j < in:
			a, r := j/width, j%width
			v := host[j]
			if a == int(InTokens) && r < feedN && feed != nil {
				v = feed[r*feedStride]
			}
			inputs[a*pitch+r] = v
		case j < in+len(tab):
			tab[j-in] = host[j]
		default:
			rec[j-in-len(tab)] = host[j]
		}
	}
}
