package codegen

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/ir/dtype"
)

// emuDecode mirrors DecodeAttention's partial and combine kernels lane by
// lane in float32: the tiling of decodeTile, the warp-uniform key loop with
// U slots per lane group (slots past the split's end reload its last key and
// are masked), the shuffle butterflies of the score and of the warp merge,
// the online softmax, the shared-memory merge of the warps and the combine.
// It returns the combined output and the partials (part_o and part_ml start
// as NaN, so what the partial kernel leaves unwritten stays NaN). Every
// key read is checked to lie inside its sequence's live keys, and found
// through the sequence's page table (pages from base[seq]). For
// the 8-bit cache kb and vb hold the cache bytes (kc and vc are unused):
// each lane reads its int8 vectors and their block scales at the byte
// offsets the kernel computes (CROW, to_scales), takes the scale on each
// vector's partial dot for keys and on the probability for values.
func emuDecode(t *testing.T, s AttnShape, arm DecodeArm, splits int, q []float32, pages, base, lens []int32, kc, vc []float32, kb, vb []byte) (out, po, pml []float32) {
	tl := arm.tile(s)
	HD, G, HQ, HKV := s.HeadDim, s.Heads/s.HeadsKV, s.Heads, s.HeadsKV
	NW, KPW, EPL := arm.Threads/32, tl.kpw(), tl.epl()
	scale := s.scale()
	exp := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	ninf := float32(math.Inf(-1))
	const mneg = float32(-3.0e38)
	seqs := len(lens)
	nan := float32(math.NaN())
	po = make([]float32, seqs*HQ*splits*HD)
	pml = make([]float32, seqs*HQ*splits*2)
	for i := range po {
		po[i] = nan
	}
	for i := range pml {
		pml[i] = nan
	}
	chunkOf := func(n int) int { return arm.ChunkFor(n, splits, seqs, HKV) }
	q8 := s.Cache == CacheQ8
	crow := HKV * HD // the row stride, in elements (bytes for the 8-bit cache)
	if q8 {
		crow = HKV*HD + HKV*HD/8
	}
	type lane struct {
		qr, acc [][]float32 // [HT][EPL]
		m, l    []float32
	}
	for seq := range seqs {
		n0 := int(lens[seq])
		lo := 0 // the first key in the window
		if s.Window > 0 {
			lo = max(0, n0-s.Window)
		}
		chunk := chunkOf(n0 - lo)
		visit := arm.LaunchSplits(splits, seqs, HKV) // the launched blocks
		if arm.Live == 4 {
			visit = (n0 - lo + chunk - 1) / chunk // the launched blocks take the live splits in turn
		}
		for kvh := range HKV {
			for split := range visit {
				j0 := lo + split*chunk
				n := min(chunk, n0-j0)
				p0 := (seq*HQ+kvh*G)*splits + split
				if n <= 0 {
					for g := range G {
						p := p0 + g*splits
						if arm.Live == 0 {
							for d := range HD {
								po[p*HD+d] = 0
							}
						}
						pml[2*p], pml[2*p+1] = ninf, 0
					}
					continue
				}
				// cache element of lane gl's vector i, element t, of key j of the split
				elem := func(j, gl, i, e int) int {
					require.True(t, j >= 0 && j0+j < n0 && j0+j >= lo, "key %d outside the live keys of the window", j0+j)
					row := PageRow(pages, int(base[seq]), j0+j, s.page())
					return row*crow + kvh*HD + (i*tl.lpk+gl)*tl.vec + e
				}
				// the 8-bit cache's scale of lane gl's vector i of key j, as the kernel addresses it
				scaleAt := func(c []byte, j, gl, i int) float32 {
					r := PageRow(pages, int(base[seq]), j0+j, s.page())*crow + kvh*HD + gl*tl.vec
					toScales := HKV*HD - kvh*HD - gl*tl.vec
					off := r + toScales + 4*((kvh*HD+(i*tl.lpk+gl)*tl.vec)>>5)
					require.Zero(t, off%4, "misaligned scale")
					return math.Float32frombits(binary.LittleEndian.Uint32(c[off:]))
				}
				for hp := 0; hp < G; hp += tl.ht {
					so := make([][][]float32, NW) // [NW][HT][HD]
					sm, sl := make([][]float32, NW), make([][]float32, NW)
					for w := range NW {
						var ls [32]lane
						for ln := range ls {
							gl := ln % tl.lpk
							L := &ls[ln]
							L.qr, L.acc = make([][]float32, tl.ht), make([][]float32, tl.ht)
							L.m, L.l = make([]float32, tl.ht), make([]float32, tl.ht)
							for hh := range tl.ht {
								L.qr[hh], L.acc[hh] = make([]float32, EPL), make([]float32, EPL)
								h := kvh*G + hp + hh
								for i := range tl.nv {
									for e := range tl.vec {
										L.qr[hh][i*tl.vec+e] = q[seq*s.QStride+h*HD+(i*tl.lpk+gl)*tl.vec+e] * scale
									}
								}
								L.m[hh] = mneg
							}
						}
						for jb := w * KPW * tl.u; jb < n; jb += NW * KPW * tl.u {
							kf := make([][][]float32, 32) // [lane][U][EPL]
							vf := make([][][]float32, 32)
							ksc, vsc := make([][][]float32, 32), make([][][]float32, 32) // [lane][U][NV]: 8-bit block scales
							for ln := range 32 {
								grp, gl := ln/tl.lpk, ln%tl.lpk
								kf[ln], vf[ln] = make([][]float32, tl.u), make([][]float32, tl.u)
								ksc[ln], vsc[ln] = make([][]float32, tl.u), make([][]float32, tl.u)
								for u := range tl.u {
									j := min(jb+u*KPW+grp, n-1)
									kf[ln][u], vf[ln][u] = make([]float32, EPL), make([]float32, EPL)
									ksc[ln][u], vsc[ln][u] = make([]float32, tl.nv), make([]float32, tl.nv)
									for i := range tl.nv {
										if q8 {
											ksc[ln][u][i], vsc[ln][u][i] = scaleAt(kb, j, gl, i), scaleAt(vb, j, gl, i)
										}
										for e := range tl.vec {
											x := elem(j, gl, i, e)
											if q8 {
												kf[ln][u][i*tl.vec+e], vf[ln][u][i*tl.vec+e] = float32(int8(kb[x])), float32(int8(vb[x]))
												continue
											}
											kf[ln][u][i*tl.vec+e], vf[ln][u][i*tl.vec+e] = kc[x], vc[x]
										}
									}
								}
							}
							sc := make([][][]float32, 32) // [lane][U][HT]
							for ln := range 32 {
								sc[ln] = make([][]float32, tl.u)
								for u := range tl.u {
									sc[ln][u] = make([]float32, tl.ht)
								}
							}
							for u := range tl.u {
								for hh := range tl.ht {
									var a [32]float32
									for ln := range 32 {
										if q8 {
											for i := range tl.nv {
												var ai float32
												for e := i * tl.vec; e < (i+1)*tl.vec; e++ {
													ai += ls[ln].qr[hh][e] * kf[ln][u][e]
												}
												a[ln] += ai * ksc[ln][u][i]
											}
											continue
										}
										for e := range EPL {
											a[ln] += ls[ln].qr[hh][e] * kf[ln][u][e]
										}
									}
									for o := tl.lpk / 2; o > 0; o >>= 1 {
										var b [32]float32
										for ln := range 32 {
											b[ln] = a[ln] + a[ln^o]
										}
										a = b
									}
									if c := s.Softcap; c > 0 {
										for ln := range 32 {
											a[ln] = c * float32(math.Tanh(float64(a[ln]*(1/c))))
										}
									}
									for ln := range 32 {
										if jb+u*KPW+ln/tl.lpk < n {
											sc[ln][u][hh] = a[ln]
										} else {
											sc[ln][u][hh] = ninf
										}
									}
								}
							}
							for ln := range 32 {
								L := &ls[ln]
								for hh := range tl.ht {
									mx := L.m[hh]
									for u := range tl.u {
										mx = max(mx, sc[ln][u][hh])
									}
									corr := exp(L.m[hh] - mx)
									L.m[hh] = mx
									L.l[hh] *= corr
									for e := range EPL {
										L.acc[hh][e] *= corr
									}
									for u := range tl.u {
										sc[ln][u][hh] = exp(sc[ln][u][hh] - mx)
										L.l[hh] += sc[ln][u][hh]
									}
								}
								for u := range tl.u {
									for hh := range tl.ht {
										for e := range EPL {
											p := sc[ln][u][hh]
											if q8 {
												p *= vsc[ln][u][e/tl.vec]
											}
											L.acc[hh][e] += p * vf[ln][u][e]
										}
									}
								}
							}
						}
						for o := tl.lpk; o < 32; o <<= 1 { // warp merge, simultaneous across lanes
							var nx [32]lane
							for ln := range 32 {
								a, b := &ls[ln], &ls[ln^o]
								nx[ln] = lane{qr: a.qr, acc: make([][]float32, tl.ht), m: make([]float32, tl.ht), l: make([]float32, tl.ht)}
								for hh := range tl.ht {
									mx := max(a.m[hh], b.m[hh])
									wa, wb := exp(a.m[hh]-mx), exp(b.m[hh]-mx)
									nx[ln].m[hh] = mx
									nx[ln].l[hh] = a.l[hh]*wa + b.l[hh]*wb
									nx[ln].acc[hh] = make([]float32, EPL)
									for e := range EPL {
										nx[ln].acc[hh][e] = a.acc[hh][e]*wa + b.acc[hh][e]*wb
									}
								}
							}
							ls = nx
						}
						so[w] = make([][]float32, tl.ht)
						for hh := range tl.ht {
							so[w][hh] = make([]float32, HD)
							for i := range so[w][hh] {
								so[w][hh][i] = nan // uninitialised shared memory
							}
							for ln := range tl.lpk {
								for i := range tl.nv {
									for e := range tl.vec {
										so[w][hh][(i*tl.lpk+ln)*tl.vec+e] = ls[ln].acc[hh][i*tl.vec+e]
									}
								}
							}
						}
						sm[w], sl[w] = ls[0].m, ls[0].l
					}
					for hh := range tl.ht {
						mx, sum := sm[0][hh], float32(0)
						sw := make([]float32, NW)
						for w := 1; w < NW; w++ {
							mx = max(mx, sm[w][hh])
						}
						for w := range NW {
							sw[w] = exp(sm[w][hh] - mx)
							sum += sl[w][hh] * sw[w]
						}
						for w := range NW {
							sw[w] /= sum
						}
						p := p0 + (hp+hh)*splits
						pml[2*p], pml[2*p+1] = mx, sum
						for d := range HD {
							var o float32
							for w := range NW {
								o += so[w][hh][d] * sw[w]
							}
							po[p*HD+d] = o
						}
					}
				}
			}
		}
	}
	out = make([]float32, seqs*HQ*HD)
	for seq := range seqs {
		n0 := int(lens[seq])
		if s.Window > 0 {
			n0 = min(n0, s.Window) // the keys the splits cover
		}
		live := splits
		if arm.Live != 0 {
			chunk := chunkOf(n0)
			live = (n0 + chunk - 1) / chunk
			if arm.Live != 4 {
				live = min(arm.LaunchSplits(splits, seqs, HKV), live)
			}
		}
		for h := range HQ {
			p0 := (seq*HQ + h) * splits
			m := ninf
			for i := range live {
				m = max(m, pml[2*(p0+i)])
			}
			for d := range HD {
				var num, den float32
				for i := range live {
					l := pml[2*(p0+i)+1]
					var wgt float32
					if l > 0 {
						wgt = l * exp(pml[2*(p0+i)]-m)
					}
					num += wgt * po[(p0+i)*HD+d]
					den += wgt
				}
				if den > 0 {
					out[(seq*HQ+h)*HD+d] = num / den
				}
			}
		}
	}
	return out, po, pml
}

func TestDecodeKernelEmulation(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	lens := []int32{1, 31, 32, 33, 500}
	const capacity = 512
	type cfg struct {
		group, hd, threads int
		cache              dtype.Type
	}
	cfgs := []cfg{
		{1, 64, 128, dtype.F16}, {1, 128, 128, dtype.F16}, {4, 64, 128, dtype.F16}, {4, 128, 128, dtype.F16},
		{1, 128, 64, dtype.F32}, {4, 128, 256, dtype.F32}, {8, 128, 128, dtype.BF16}, {16, 128, 128, dtype.F16},
		{2, 96, 128, dtype.F16}, {1, 256, 256, dtype.F32}, {4, 32, 64, dtype.F16},
		{1, 128, 128, CacheQ8}, {4, 64, 128, CacheQ8}, {8, 128, 256, CacheQ8}, {1, 256, 256, CacheQ8},
	}
	arms := []DecodeArm{{Chunk: 32}, {Chunk: 64}, {Chunk: 256}, {Chunk: 64, Live: 1}, {Chunk: 64, Live: 2}, {Chunk: 256, Live: 2},
		{Chunk: 128, Live: 3, SMs: 132}, {Chunk: 256, Live: 3, SMs: 16}, {Chunk: 128, Live: 4, SMs: 132}, {Chunk: 64, Live: 4, SMs: 16}, {Chunk: 32, Live: 4, SMs: 132}}
	for _, c := range cfgs {
		s := AttnShape{Heads: 2 * c.group, HeadsKV: 2, HeadDim: c.hd, QStride: 2*c.group*c.hd + 64, Cache: c.cache}
		for _, a := range arms {
			arm := DecodeArm{Threads: c.threads, Chunk: a.Chunk, Live: a.Live, SMs: a.SMs}
			name := fmt.Sprintf("g%d_d%d_%v/%v", c.group, c.hd, c.cache, arm)
			t.Run(name, func(t *testing.T) {
				splits := arm.Splits(capacity)
				pages, base, rows := scatterPages(r, len(lens), capacity, s.page())
				kvw := s.HeadsKV * s.HeadDim
				kc, vc := randF32(r, rows*kvw), randF32(r, rows*kvw)
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
					requireQ8ScaleLoads(t, s, arm)
				}
				q := randF32(r, len(lens)*s.QStride)
				got, po, pml := emuDecode(t, s, arm, splits, q, pages, base, lens, kc, vc, kb, vb)
				want := RefAttention(s, q, base, lens, pages, kc, vc)
				require.Less(t, RelErr(got, want), 1e-5)
				// the partials: written exactly where the contract says
				chunk := arm.Chunk
				for seq, n := range lens {
					if arm.Live >= 2 {
						chunk = arm.ChunkFor(int(n), splits, len(lens), s.HeadsKV)
					}
					for h := range s.Heads {
						for sp := range arm.LaunchSplits(splits, len(lens), s.HeadsKV) { // the others are not launched
							p := (seq*s.Heads+h)*splits + sp
							empty := sp*chunk >= int(n)
							if empty && arm.Live == 4 {
								// a Live 4 block visits live splits only: nothing else is written
								require.True(t, math.IsNaN(float64(pml[2*p])) && math.IsNaN(float64(po[p*s.HeadDim])), "split %d past the live keys written", sp)
								continue
							}
							if empty {
								require.True(t, math.IsInf(float64(pml[2*p]), -1) && pml[2*p+1] == 0, "neutral pair")
							} else {
								require.Greater(t, pml[2*p+1], float32(0))
							}
							for d := range s.HeadDim {
								v := po[p*s.HeadDim+d]
								switch {
								case empty && arm.Live != 0:
									require.True(t, math.IsNaN(float64(v)), "empty live split output written")
								case empty:
									require.Zero(t, v)
								default:
									require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
								}
							}
						}
					}
				}
			})
		}
	}
	// a sequence with no keys yields zeros, not NaN
	s := AttnShape{Heads: 4, HeadsKV: 1, HeadDim: 64, QStride: 256, Cache: dtype.F16}
	for _, live := range []int{0, 2, 4} {
		arm := DecodeArm{Threads: 128, Chunk: 64, Live: live}.OnCard(132)
		z, _, _ := emuDecode(t, s, arm, 8, make([]float32, s.QStride), []int32{0}, []int32{0}, []int32{0}, nil, nil, nil, nil)
		for _, v := range z {
			require.Zero(t, v)
		}
	}
}

func TestDecodeTile(t *testing.T) {
	want := map[string]decodeTiling{
		"g1_d128_f16_t128": {vec: 8, lpk: 16, nv: 1, ht: 1, u: 4},
		"g4_d128_f16_t128": {vec: 8, lpk: 16, nv: 1, ht: 4, u: 4},
		"g8_d128_f16_t128": {vec: 4, lpk: 32, nv: 1, ht: 8, u: 4},
		"g1_d128_f32_t128": {vec: 4, lpk: 32, nv: 1, ht: 1, u: 4},
		"g1_d96_f16_t128":  {vec: 8, lpk: 4, nv: 3, ht: 1, u: 1},
		"g1_d64_f16_t128":  {vec: 8, lpk: 8, nv: 1, ht: 1, u: 4},
	}
	for _, g := range []int{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32} {
		for hd := 32; hd <= 256; hd += 32 {
			for _, c := range []dtype.Type{dtype.F32, dtype.F16, dtype.BF16} {
				for _, th := range []int{32, 64, 128, 256, 512, 1024} {
					s := AttnShape{Heads: g, HeadsKV: 1, HeadDim: hd, QStride: g * hd, Cache: c}
					tl := decodeTile(s, th)
					name := fmt.Sprintf("g%d_d%d_%s_t%d", g, hd, typeTag(c), th)
					if w, ok := want[name]; ok {
						require.Equal(t, w, tl, name)
					}
					require.Equal(t, hd, tl.lpk*tl.nv*tl.vec, name)
					require.Zero(t, 32%tl.lpk, name)
					require.Zero(t, g%tl.ht, name)
					require.GreaterOrEqual(t, tl.u, 1, name)
					require.LessOrEqual(t, tl.ht*tl.epl(), max(32, tl.epl()), name)
					require.LessOrEqual(t, (th/32)*(tl.ht*hd+3*tl.ht)*4, 48<<10, "%s: static shared memory", name)
				}
			}
		}
	}
}

// TestDecodeArmSplits: the live arms take at most MaxLiveSplits, and
// other arms keep capacity/Chunk.
func TestDecodeArmSplits(t *testing.T) {
	for _, c := range []struct {
		arm         DecodeArm
		kvLen, want int
	}{
		{DecodeArm{Chunk: 128, Live: 2}, 640, 5},
		{DecodeArm{Chunk: 128, Live: 2}, 4096, 32},
		{DecodeArm{Chunk: 128, Live: 2}, 8192, MaxLiveSplits}, // capped: longer chunks instead
		{DecodeArm{Chunk: 64, Live: 2}, 200, 4},
		{DecodeArm{Chunk: 128}, 640, 5},
		{DecodeArm{Chunk: 128, Live: 2}, 32768, MaxLiveSplits},
		{DecodeArm{Chunk: 128, Live: 3, SMs: 132}, 131072, MaxLiveSplits},
		{DecodeArm{Chunk: 128, Live: 1}, 32768, 256}, // fixed chunks are never capped (lowering makes them live 2)
	} {
		require.Equal(t, c.want, c.arm.Splits(c.kvLen), "%+v at %d", c.arm, c.kvLen)
	}
}

// TestDecodeArmChunkFor: Live 3 launches only the splits that give every
// multiprocessor four blocks and takes the fewest of them that still give
// every multiprocessor a block (five of 128 keys for llama2-7b's 32 kv
// heads at 600 keys, whatever the capacity), never more splits than the
// launch has, and Live 2 spreads the live keys over all of them.
func TestDecodeArmChunkFor(t *testing.T) {
	l2 := DecodeArm{Chunk: 128, Live: 2}
	l3 := DecodeArm{Chunk: 128, Live: 3, SMs: 132}
	for _, c := range []struct {
		arm                      DecodeArm
		kvLen, splits, seqs, hkv int
		want                     int
	}{
		{l2, 600, 5, 1, 32, 128},   // bench's 640-position cache
		{l2, 600, 32, 1, 32, 32},   // a served 4096-position cache
		{l3, 600, 5, 1, 32, 128},   // want 5
		{l3, 600, 32, 1, 32, 128},  // the same five splits
		{l3, 600, 32, 16, 32, 320}, // 16 sequences: two splits launched (four blocks a multiprocessor)
		{l3, 600, 32, 64, 32, 608}, // 64 sequences: one split of all the keys
		{l3, 100, 32, 1, 32, 32},   // four splits of 32 keys
		{l3, 600, 32, 1, 8, 64},    // want 17 splits: 36 keys, rounded up to 64
		{l3, 600, 5, 1, 8, 128},    // no more than the launch's 5 splits
		{l3, 4000, 32, 1, 32, 256}, // 17 splits launched: 4,000 keys in 16 of 256
		{DecodeArm{Chunk: 128, Live: 1}, 600, 32, 1, 32, 128},
	} {
		require.Equal(t, c.want, c.arm.ChunkFor(c.kvLen, c.splits, c.seqs, c.hkv), "%+v", c)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		arm := DecodeArm{Chunk: 32 << r.IntN(6), Live: 2 + r.IntN(2), SMs: 1 + r.IntN(200)}
		capacity := 1 + r.IntN(8192)
		splits := arm.Splits(capacity)
		n, seqs, hkv := 1+r.IntN(capacity), 1+r.IntN(64), 1<<r.IntN(6)
		chunk := arm.ChunkFor(n, splits, seqs, hkv)
		require.True(t, chunk >= 32 && chunk%32 == 0 || chunk == arm.Chunk, "%+v", arm)
		launched := arm.LaunchSplits(splits, seqs, hkv)
		require.LessOrEqual(t, ceilDiv(n, chunk), launched, "%+v: %d keys in %d launched splits of %d (capacity %d)", arm, n, launched, chunk, capacity)
	}
}

// q8ScaleLoad is the one form of the 8-bit cache's scale loads that
// emuDecode mirrors: the float at the row's scales plus the lane's block
// (pointer arithmetic inside the load, not added to the loaded value).
var q8ScaleLoad = regexp.MustCompile(`^\s*([kv])r_s\[u\]\[i\] = (\*|__ldcg)\(\(const float\*\)\(([kv])c \+ r \+ to_scales\) \+ \(\(kvh \* HD \+ \(i \* LPK \+ gl\) \* VEC\) >> 5\)\);$`)

// requireQ8ScaleLoads checks that every scale load of the 8-bit cache in
// the partial kernel of s and arm has the form emuDecode mirrors.
func requireQ8ScaleLoads(t *testing.T, s AttnShape, arm DecodeArm) {
	t.Helper()
	part, _, err := DecodeAttention(s, arm)
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(part.Source, "\n") {
		if !strings.Contains(line, "r_s[u][i] =") {
			continue
		}
		m := q8ScaleLoad.FindStringSubmatch(line)
		require.NotNil(t, m, "scale load not of the mirrored form: %s", line)
		require.Equal(t, m[1], m[3], line)
		n++
	}
	require.GreaterOrEqual(t, n, 2, "a key and a value scale load")
}

// TestDecodeLive4: Live 4 sizes a sequence's splits by its own length
// alone (the same for one sequence and 64, and on any card), launches as
// Live 3 does, may preload each split's first step (its kernel waits in
// the loop over a block's splits, after the first split's loads), and its
// live splits fit the capacity's.
func TestDecodeLive4(t *testing.T) {
	a := DecodeArm{Threads: 256, Chunk: 128, Live: 4}
	require.ErrorIs(t, a.validKernel(), ErrUnsupported, "Live 4 needs the card's multiprocessors")
	a = a.OnCard(132)
	require.NoError(t, a.validKernel())
	require.Equal(t, "t256_c128_l4_m132", a.String())
	p := a
	p.Preload = true
	require.NoError(t, p.validKernel())
	s := AttnShape{Heads: 32, HeadsKV: 32, HeadDim: 128, QStride: 4096, Cache: dtype.F16, PageSize: 16}
	k, err := decodePartial(s, p, false)
	require.NoError(t, err)
	loop := strings.Index(k.Source, "for (int split = blockIdx.y;")
	require.Positive(t, loop)
	require.NotContains(t, k.Source[:loop], "pdl_wait();", "no wait before the loop: each split preloads, then waits")
	require.Contains(t, k.Source[loop:], "pdl_wait();")
	for _, capacity := range []int{640, 4096, 32768} {
		splits := a.Splits(capacity)
		for _, n := range []int{1, 37, 128, 600, 4096, capacity} {
			if n > capacity {
				continue
			}
			c := a.ChunkFor(n, splits, 1, 32)
			for _, seqs := range []int{2, 3, 8, 64} {
				require.Equal(t, c, a.ChunkFor(n, splits, seqs, 32), "capacity %d, %d keys, %d sequences", capacity, n, seqs)
			}
			require.Equal(t, c, a.OnCard(16).ChunkFor(n, splits, 1, 32), "another card")
			require.LessOrEqual(t, ceilDiv(n, c), splits, "capacity %d, %d keys: live splits past the partials", capacity, n)
		}
	}
	require.Equal(t, a.OnCard(132).LaunchSplits(32, 64, 32), DecodeArm{Chunk: 128, Live: 3, SMs: 132}.LaunchSplits(32, 64, 32))
	require.Equal(t, 5, ceilDiv(600, a.ChunkFor(600, 32, 64, 32)), "five 128-key splits at 600 keys")
}
