package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/memra-ai/memra/ir"
	"github.com/memra-ai/memra/ir/dtype"
)

// tensorSpec is one tensor of a synthesized model, in GGUF naming.
type tensorSpec struct {
	name  string
	role  string // token_embd, attn_q, …, "norm", "bias"
	layer int    // −1 outside the blocks
	ne    []int  // GGUF order: ne[0] is the row length
	kind  int    // kindMatrix, kindNorm, kindBias, kindFreqs
}

const (
	kindMatrix = iota
	kindNorm
	kindBias
	kindFreqs
)

func (t *tensorSpec) elems() int {
	n := 1
	for _, d := range t.ne {
		n *= d
	}
	return n
}

// tensorsOf lists the tensors of a model in the order GGUF converters write them.
func tensorsOf(hp ir.HParams) []tensorSpec {
	d, q, kv := hp.Embedding, hp.Heads*hp.HeadDim, hp.HeadsKV*hp.HeadDim
	ts := []tensorSpec{{name: "token_embd.weight", role: "token_embd", layer: -1, ne: []int{d, hp.VocabSize}}}
	if hp.RopeScaling.Type == "llama3" {
		ts = append(ts, tensorSpec{name: "rope_freqs.weight", role: "rope_freqs", layer: -1, ne: []int{hp.RopeDim / 2}, kind: kindFreqs})
	}
	for l := 0; l < hp.Layers; l++ {
		blk := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		mat := func(role string, in, out int) tensorSpec {
			return tensorSpec{name: blk(role + ".weight"), role: role, layer: l, ne: []int{in, out}}
		}
		ts = append(ts, tensorSpec{name: blk("attn_norm.weight"), role: "norm", layer: l, ne: []int{d}, kind: kindNorm})
		ts = append(ts, mat("attn_q", d, q), mat("attn_k", d, kv), mat("attn_v", d, kv))
		if hp.QKVBias {
			for _, b := range []struct {
				r string
				n int
			}{{"attn_q", q}, {"attn_k", kv}, {"attn_v", kv}} {
				ts = append(ts, tensorSpec{name: blk(b.r + ".bias"), role: "bias", layer: l, ne: []int{b.n}, kind: kindBias})
			}
		}
		if hp.QKNorm {
			ts = append(ts,
				tensorSpec{name: blk("attn_q_norm.weight"), role: "norm", layer: l, ne: []int{hp.HeadDim}, kind: kindNorm},
				tensorSpec{name: blk("attn_k_norm.weight"), role: "norm", layer: l, ne: []int{hp.HeadDim}, kind: kindNorm})
		}
		ts = append(ts, mat("attn_output", q, d))
		if isGemma(hp.Arch) {
			ts = append(ts, tensorSpec{name: blk("post_attention_norm.weight"), role: "norm", layer: l, ne: []int{d}, kind: kindNorm})
		}
		ts = append(ts, tensorSpec{name: blk("ffn_norm.weight"), role: "norm", layer: l, ne: []int{d}, kind: kindNorm})
		ts = append(ts, ffnTensors(hp, l)...)
		if isGemma(hp.Arch) {
			ts = append(ts, tensorSpec{name: blk("post_ffw_norm.weight"), role: "norm", layer: l, ne: []int{d}, kind: kindNorm})
		}
	}
	ts = append(ts, tensorSpec{name: "output_norm.weight", role: "norm", layer: -1, ne: []int{d}, kind: kindNorm})
	if !hp.TiedEmbedding {
		ts = append(ts, tensorSpec{name: "output.weight", role: "output", layer: -1, ne: []int{d, hp.VocabSize}})
	}
	return ts
}

// rowsPerChunk fixes the unit of random generation, so the values do not
// depend on how many goroutines produce them.
const rowsPerChunk = 64

// seedFor derives a generator seed from the model seed, a tensor name and a chunk.
func seedFor(seed uint64, name string, chunk int) (uint64, uint64) {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	binary.LittleEndian.PutUint64(b[:], uint64(chunk))
	h.Write(b[:])
	s := h.Sum64()
	return s, s ^ 0x9e3779b97f4a7c15
}

// floats returns the canonical float32 values of a tensor: what a Hugging
// Face checkpoint of this model stores (rotate-half Q/K layout).
func floats(seed uint64, hp ir.HParams, t *tensorSpec) []float32 {
	n := t.elems()
	out := make([]float32, n)
	switch t.kind {
	case kindFreqs:
		copy(out, llama3Freqs(hp))
		return out
	case kindNorm, kindBias:
		r := rand.New(rand.NewPCG(seedFor(seed, t.name, 0)))
		for i := range out {
			switch {
			case t.kind == kindNorm && isGemma(hp.Arch):
				out[i] = float32(0.1 * r.NormFloat64()) // w of Gemma's 1 + w
			case t.kind == kindNorm:
				out[i] = float32(1 + 0.1*r.NormFloat64())
			default:
				out[i] = float32(0.1 * r.NormFloat64())
			}
		}
		return out
	}
	ne0 := t.ne[0]
	rows := n / ne0
	sigma := 1 / math.Sqrt(float64(ne0))
	parallelChunks(rows, func(c, r0, r1 int) {
		r := rand.New(rand.NewPCG(seedFor(seed, t.name, c)))
		for i := r0 * ne0; i < r1*ne0; i++ {
			out[i] = float32(sigma * r.NormFloat64())
		}
	})
	return out
}

// parallelChunks calls f for every chunk of rowsPerChunk rows, on all cores.
func parallelChunks(rows int, f func(chunk, r0, r1 int)) {
	chunks := (rows + rowsPerChunk - 1) / rowsPerChunk
	next := make(chan int, chunks)
	for c := 0; c < chunks; c++ {
		next <- c
	}
	close(next)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				r0 := c * rowsPerChunk
				f(c, r0, min(r0+rowsPerChunk, rows))
			}
		}()
	}
	wg.Wait()
}

// llama3Freqs returns the per-frequency divisors of Llama 3.1 RoPE scaling,
// as the rope_freqs.weight tensor stores them.
func llama3Freqs(hp ir.HParams) []float32 {
	rs := hp.RopeScaling
	n := hp.RopeDim / 2
	out := make([]float32, n)
	lowWavelen := float64(rs.OriginalContext) / float64(rs.LowFreqFactor)
	highWavelen := float64(rs.OriginalContext) / float64(rs.HighFreqFactor)
	for i := 0; i < n; i++ {
		freq := math.Pow(float64(hp.RopeBase), -float64(2*i)/float64(hp.RopeDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = rs.Factor
		default:
			smooth := (float64(rs.OriginalContext)/wavelen - float64(rs.LowFreqFactor)) /
				float64(rs.HighFreqFactor-rs.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/float64(rs.Factor) + smooth))
		}
	}
	return out
}

// permuteRows turns rotate-half Q/K rows into the interleaved-pair order of
// llama GGUF files: within each head, row 2j+s comes from row s·d/2 + j.
func permuteRows(w []float32, ne0, headDim int) []float32 {
	rows := len(w) / ne0
	out := make([]float32, len(w))
	half := headDim / 2
	for r := 0; r < rows; r++ {
		h, k := r/headDim, r%headDim
		j, s := k/2, k%2
		src := h*headDim + s*half + j
		copy(out[r*ne0:(r+1)*ne0], w[src*ne0:(src+1)*ne0])
	}
	return out
}

// encode stores float32 values as type t, quantising on all cores.
func encode(t dtype.Type, ne0 int, x []float32) ([]byte, error) {
	rowBytes, err := t.RowBytes(ne0)
	if err != nil {
		return nil, err
	}
	rows := len(x) / ne0
	out := make([]byte, rows*rowBytes)
	var mu sync.Mutex
	var firstErr error
	parallelChunks(rows, func(_, r0, r1 int) {
		b, err := dtype.Quantize(t, x[r0*ne0:r1*ne0])
		if err != nil {
			mu.Lock()
			firstErr = err
			mu.Unlock()
			return
		}
		copy(out[r0*rowBytes:], b)
	})
	return out, firstErr
}

// randomBlocks fills a tensor of type t with random but valid blocks whose
// values have roughly the given standard deviation, without drawing floats
// and quantising them: the fast path for multi-gigabyte benchmark models,
// where values do not matter, only bytes and validity.
func randomBlocks(seed uint64, name string, t dtype.Type, ne0, rows int, sigma float64) ([]byte, error) {
	rowBytes, err := t.RowBytes(ne0)
	if err != nil {
		return nil, err
	}
	out := make([]byte, rows*rowBytes)
	bb := t.BlockBytes()
	scale := func(v float64) uint16 { return dtype.F32ToF16(float32(v)) }
	parallelChunks(rows, func(c, r0, r1 int) {
		r := rand.New(rand.NewPCG(seedFor(seed, name, c)))
		buf := out[r0*rowBytes : r1*rowBytes]
		for i := 0; i+8 <= len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		for i := len(buf) &^ 7; i < len(buf); i++ {
			buf[i] = byte(r.Uint32())
		}
		for b := 0; b+bb <= len(buf); b += bb {
			blk := buf[b : b+bb]
			put := func(off int, v float64) { binary.LittleEndian.PutUint16(blk[off:], scale(v)) }
			switch t {
			case dtype.Q4_0:
				put(0, sigma/4.6)
			case dtype.IQ4_NL:
				put(0, sigma/62)
			case dtype.Q5_0:
				put(0, sigma/9.2)
			case dtype.Q4_1:
				put(0, sigma/4.6)
				put(2, -7.5*sigma/4.6)
			case dtype.Q5_1:
				put(0, sigma/9.2)
				put(2, -15.5*sigma/9.2)
			case dtype.Q8_0:
				put(0, sigma/73.9)
			case dtype.Q2_K:
				put(80, sigma/8)
				put(82, sigma/16)
			case dtype.Q3_K:
				put(108, sigma/80)
			case dtype.Q4_K, dtype.Q5_K:
				put(0, sigma/150)
				put(2, sigma/300)
			case dtype.Q6_K:
				put(208, sigma/1200)
			case dtype.IQ4_XS:
				put(0, sigma/1100)
			default:
				panic("BUG: randomBlocks for " + t.String())
			}
		}
	})
	return out, nil
}
