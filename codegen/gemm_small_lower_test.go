package codegen

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

func TestLowerSmallBatch(t *testing.T) {
	g := buildGraph(t, smallQwen3, synthTensors(smallQwen3, dtype.Q4_K, dtype.Q6_K))
	tests := []struct {
		name       string
		seqs       int
		small      bool
		wantFamily string
		notFamily  string
	}{
		{"batch 8, switch on", 8, true, "gemm_small", "gemv"},
		{"batch 1, switch on", 1, true, "gemv", "gemm_small"},
		{"batch 8, switch off", 8, false, "gemv", "gemm_small"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lower(g, LowerOptions{Class: Decode, MaxSeqs: tc.seqs, Context: 256, Cache: dtype.F16, Argmax: true, SmallBatch: tc.small})
			require.NoError(t, err)
			fams := map[string]int{}
			for _, l := range p.Launches {
				fams[p.Kernels[l.Kernel].Family]++
			}
			require.Positive(t, fams[tc.wantFamily], "%v", fams)
			require.Zero(t, fams[tc.notFamily], "%v", fams)
			require.Positive(t, fams["attn_decode"])
		})
	}
}

// simDecodeLive mirrors the live-length partial and combine kernels in Go
// (chunk rule, neutral partials of empty splits, the combine's live-split
// bound and its skip of sum-0 partials), in float64.
func simDecodeLive(s AttnShape, arm DecodeArm, splits int, q []float32, pages, base, lens []int32, kc, vc []float32) []float32 {
	D, G, kvw := s.HeadDim, s.Heads/s.HeadsKV, s.HeadsKV*s.HeadDim
	scale := float64(s.scale())
	chunkOf := func(n int) int {
		if arm.Live == 2 {
			return arm.ChunkFor(n, splits, len(lens), s.HeadsKV)
		}
		return arm.Chunk
	}
	out := make([]float32, len(lens)*s.Heads*D)
	for seq, n32 := range lens {
		n := int(n32)
		chunk := chunkOf(n)
		for h := 0; h < s.Heads; h++ {
			qh := q[seq*s.QStride+h*D:]
			pm, pl := make([]float64, splits), make([]float64, splits)
			po := make([][]float64, splits)
			for sp := range splits { // the partial kernel's blocks
				j0 := sp * chunk
				cnt := min(chunk, n-j0)
				if cnt <= 0 {
					pm[sp], pl[sp] = math.Inf(-1), 0 // neutral, no output written
					continue
				}
				sc := make([]float64, cnt)
				m := math.Inf(-1)
				for j := range sc {
					row := kc[PageRow(pages, int(base[seq]), j0+j, s.page())*kvw+h/G*D:]
					for d := 0; d < D; d++ {
						sc[j] += float64(qh[d]) * scale * float64(row[d])
					}
					m = math.Max(m, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - m)
					sum += sc[j]
				}
				po[sp] = make([]float64, D)
				for d := 0; d < D; d++ {
					for j, p := range sc {
						po[sp][d] += p * float64(vc[PageRow(pages, int(base[seq]), j0+j, s.page())*kvw+h/G*D+d])
					}
					po[sp][d] /= sum
				}
				pm[sp], pl[sp] = m, sum
			}
			live := min(splits, (n+chunk-1)/chunk) // the combine kernel
			m := math.Inf(-1)
			for i := range live {
				m = math.Max(m, pm[i])
			}
			for d := 0; d < D; d++ {
				var num, den float64
				for i := range live {
					if pl[i] > 0 {
						w := pl[i] * math.Exp(pm[i]-m)
						num += w * po[i][d]
						den += w
					}
				}
				if den > 0 {
					out[seq*s.Heads*D+h*D+d] = float32(num / den)
				}
			}
		}
	}
	return out
}

func TestDecodeLiveCombineMath(t *testing.T) {
	s := AttnShape{Heads: 4, HeadsKV: 2, HeadDim: 32, QStride: 4 * 32, Cache: dtype.F32}
	r := rand.New(rand.NewPCG(7, 8))
	const capacity = 512
	tests := []struct {
		name string
		lens []int32
	}{
		{"only the first chunk live", []int32{1, 7, 64}},
		{"ragged", []int32{65, 300, 511}},
		{"full capacity", []int32{512}},
	}
	for _, live := range []int{1, 2} {
		arm := DecodeArm{Threads: 64, Chunk: 64, Live: live}
		splits := arm.Splits(capacity)
		for _, tc := range tests {
			t.Run(arm.String()+"/"+tc.name, func(t *testing.T) {
				pages, base, rows := scatterPages(r, len(tc.lens), capacity, s.page())
				kc, vc := randF32(r, rows*s.HeadsKV*s.HeadDim), randF32(r, rows*s.HeadsKV*s.HeadDim)
				q := randF32(r, len(tc.lens)*s.QStride)
				got := simDecodeLive(s, arm, splits, q, pages, base, tc.lens, kc, vc)
				want := RefAttention(s, q, base, tc.lens, pages, kc, vc)
				require.Less(t, RelErr(got, want), 1e-6)
			})
		}
	}
	// a sequence with no keys yields zeros, not NaN
	arm := DecodeArm{Threads: 64, Chunk: 64, Live: 2}
	z := simDecodeLive(s, arm, 8, make([]float32, s.QStride), []int32{0}, []int32{0}, []int32{0}, nil, nil)
	for _, v := range z {
		require.Zero(t, v)
	}
}
