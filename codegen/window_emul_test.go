package codegen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// The decode kernels' emulation (emuDecode) with a sliding window and a
// soft cap: the splits cover only the window's keys (every key read lies
// in it), the partials keep their contract, and the result is the
// reference's.
func TestDecodeKernelEmulationWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	lens := []int32{1, 31, 40, 500, 1000}
	const capacity = 1024
	for _, c := range []struct {
		group, hd, threads int
		cache              dtype.Type
	}{{2, 256, 256, dtype.F16}, {4, 64, 128, dtype.F16}, {1, 128, 128, CacheQ8}, {8, 128, 256, dtype.F32}} {
		for _, win := range []int{1, 32, 100, 4096} {
			for _, cap := range []float32{0, 2.5} {
				s := AttnShape{Heads: 2 * c.group, HeadsKV: 2, HeadDim: c.hd, QStride: 2*c.group*c.hd + 64, Cache: c.cache, Window: win, Softcap: cap}
				for _, a := range []DecodeArm{{Chunk: 32}, {Chunk: 64, Live: 1}, {Chunk: 128, Live: 2}, {Chunk: 128, Live: 3, SMs: 132},
					{Chunk: 128, Live: 2, Preload: true}} {
					arm := a
					arm.Threads = c.threads
					t.Run(fmt.Sprintf("g%d_d%d_%v_w%d_c%g/%v", c.group, c.hd, c.cache, win, cap, arm), func(t *testing.T) {
						splits := arm.Splits(s.KeySpan(capacity))
						if win < capacity {
							require.LessOrEqual(t, splits, arm.Splits(capacity))
						}
						pages, base, rows := scatterPages(r, len(lens), capacity, s.page())
						kvw := s.HeadsKV * s.HeadDim
						kc, vc := randF32(r, rows*kvw), randF32(r, rows*kvw)
						for i := range kc {
							kc[i] *= 4 // scores of several units, so that the cap bites
						}
						var kb, vb []byte
						if s.Cache == CacheQ8 {
							var err error
							kb, err = EncodeCache(s.Cache, kvw, kc)
							require.NoError(t, err)
							vb, err = EncodeCache(s.Cache, kvw, vc)
							require.NoError(t, err)
							kc, err = DecodeCache(s.Cache, kvw, kb)
							require.NoError(t, err)
							vc, err = DecodeCache(s.Cache, kvw, vb)
							require.NoError(t, err)
						}
						q := randF32(r, len(lens)*s.QStride)
						got, po, pml := emuDecode(t, s, arm, splits, q, pages, base, lens, kc, vc, kb, vb)
						want := RefAttention(s, q, base, lens, pages, kc, vc)
						require.Less(t, RelErr(got, want), 1e-5)
						// the window changes the result where a sequence is longer than it
						full := s
						full.Window, full.Softcap = 0, 0
						if other := RefAttention(full, q, base, lens, pages, kc, vc); win < 1000 || cap > 0 {
							require.Greater(t, RelErr(other, want), 1e-3)
						}
						for seq, n := range lens {
							nk := min(int(n), win)
							chunk := arm.Chunk
							if arm.Live >= 2 {
								chunk = arm.ChunkFor(nk, splits, len(lens), s.HeadsKV)
							}
							for h := range s.Heads {
								for sp := range splits {
									p := (seq*s.Heads+h)*splits + sp
									if sp*chunk >= nk {
										require.True(t, math.IsInf(float64(pml[2*p]), -1) && pml[2*p+1] == 0, "neutral pair")
									} else {
										require.Greater(t, pml[2*p+1], float32(0))
										require.False(t, math.IsNaN(float64(po[p*s.HeadDim])))
									}
								}
							}
						}
					})
				}
			}
		}
	}
}
