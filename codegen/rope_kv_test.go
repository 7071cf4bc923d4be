package codegen

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// emulateRopeKV runs RopeKV's thread → (head, pair) mapping on the CPU as
// the generated kernel does (grid (ntok, Blocks), Threads threads, loads of
// every head before any store), counting how often each q, k-cache and
// v-cache element is written and each qkv element read. For the 8-bit
// cache the k and v heads go to the block's shared rows first, and its
// warps then quantise them block by block (cache values are the
// dequantised ones; each block's scale counts as a write of its first
// element's slot in ks or vs, [rows][kvw/32]).
func emulateRopeKV(s RopeShape, pl ropePlan, qkv []float32, pos, slot []int32, inv, kc, vc []float32) (qo, ko, vo []float32, reads, qw, kw, vw, ks, vs []int) {
	qo = append([]float32(nil), qkv...)
	ko = append([]float32(nil), kc...)
	vo = append([]float32(nil), vc...)
	reads, qw = make([]int, len(qkv)), make([]int, len(qkv))
	kw, vw = make([]int, len(kc)), make([]int, len(vc))
	HD, stride, kvw := s.HeadDim, s.QKVStride(), s.HeadsKV*s.HeadDim
	q8 := s.Cache == CacheQ8
	if q8 {
		ks, vs = make([]int, len(kc)/CacheBlock), make([]int, len(vc)/CacheBlock)
	}
	for t := range pos {
		for by := 0; by < pl.Blocks; by++ {
			var kvs []float32 // the block's shared rows: kvs[UPB][HD]
			if q8 {
				kvs = make([]float32, pl.UPB*HD)
				for i := range kvs {
					kvs[i] = float32(math.NaN())
				}
			}
			for tid := 0; tid < pl.Threads; tid++ {
				lane, i0 := tid/pl.Pairs, tid%pl.Pairs
				if pl.laneGuard() && lane >= pl.Lanes {
					continue
				}
				if !pl.laneGuard() && lane >= pl.Lanes {
					panic("thread without a head lane and no guard")
				}
				row := t * stride
				p := float32(pos[t])
				crow := int(slot[t]) * kvw
				cs, sn := make([]float32, pl.PPT), make([]float32, pl.PPT)
				pa, pb := make([]int, pl.PPT), make([]int, pl.PPT)
				for j := 0; j < pl.PPT; j++ {
					i := i0 + j*pl.Threads
					pa[j], pb[j] = s.ropePairs(i)
					cs[j], sn[j] = 1, 0
					if i < s.RopeDim/2 {
						sv, cv := math.Sincos(float64(p * inv[i]))
						sn[j], cs[j] = float32(sv), float32(cv)
					}
				}
				ok := func(u, j int) bool {
					return u < pl.Units && (!pl.pairGuard() || i0+j*pl.Threads < pl.Pairs)
				}
				xa, xb := make([][]float32, pl.HPT), make([][]float32, pl.HPT)
				for k := 0; k < pl.HPT; k++ {
					xa[k], xb[k] = make([]float32, pl.PPT), make([]float32, pl.PPT)
					u := by*pl.UPB + k*pl.Lanes + lane
					for j := 0; j < pl.PPT; j++ {
						if ok(u, j) {
							h := row + u*HD
							xa[k][j], xb[k][j] = qo[h+pa[j]], qo[h+pb[j]]
							reads[h+pa[j]]++
							reads[h+pb[j]]++
						}
					}
				}
				for k := 0; k < pl.HPT; k++ {
					u := by*pl.UPB + k*pl.Lanes + lane
					for j := 0; j < pl.PPT; j++ {
						if !ok(u, j) {
							continue
						}
						va, vb := xa[k][j], xb[k][j]
						a, b := pa[j], pb[j]
						if u < s.Heads+s.HeadsKV && i0+j*pl.Threads < s.RopeDim/2 {
							ra := va*cs[j] - vb*sn[j]
							vb = va*sn[j] + vb*cs[j]
							va = ra
						}
						switch {
						case u < s.Heads:
							h := row + u*HD
							qo[h+a], qo[h+b] = va, vb
							qw[h+a]++
							qw[h+b]++
						case q8:
							h := (u - by*pl.UPB) * HD
							kvs[h+a], kvs[h+b] = va, vb
						case u < s.Heads+s.HeadsKV:
							c := crow + (u-s.Heads)*HD
							ko[c+a], ko[c+b] = roundCache(s.Cache, va), roundCache(s.Cache, vb)
							kw[c+a]++
							kw[c+b]++
						default:
							c := crow + (u-s.Heads-s.HeadsKV)*HD
							vo[c+a], vo[c+b] = roundCache(s.Cache, va), roundCache(s.Cache, vb)
							vw[c+a]++
							vw[c+b]++
						}
					}
				}
			}
			if !q8 {
				continue
			}
			// __syncthreads, then a warp a block of 32: qb = warp, warp + NT/32, …
			q := make([]int8, CacheBlock)
			for warp := 0; warp < pl.Threads/32; warp++ {
				for qb := warp; qb < pl.UPB*(HD/32); qb += pl.Threads / 32 {
					li, e0 := qb/(HD/32), (qb%(HD/32))*32
					u := by*pl.UPB + li
					if u < s.Heads || u >= pl.Units {
						continue
					}
					isk := u < s.Heads+s.HeadsKV
					c := (u - s.Heads) * HD
					dst, wr, sw := ko, kw, ks
					if !isk {
						c, dst, wr, sw = (u-s.Heads-s.HeadsKV)*HD, vo, vw, vs
					}
					c += e0
					x := kvs[li*HD+e0 : li*HD+e0+32]
					for _, v := range x {
						if v != v {
							panic("a block quantised before all its elements were staged")
						}
					}
					sc := quantBlock(x, q)
					crow := int(slot[t]) * kvw
					for l := range 32 {
						dst[crow+c+l] = float32(q[l]) * sc
						wr[crow+c+l]++
					}
					sw[crow/CacheBlock+c>>5]++
				}
			}
		}
	}
	return qo, ko, vo, reads, qw, kw, vw, ks, vs
}

func TestRopePairsCoverHead(t *testing.T) {
	for _, s := range []RopeShape{{HeadDim: 128, RopeDim: 128}, {HeadDim: 128, RopeDim: 128, Half: true},
		{HeadDim: 80, RopeDim: 32, Half: true}, {HeadDim: 96, RopeDim: 40}, {HeadDim: 8, RopeDim: 2, Half: true}} {
		seen := make([]int, s.HeadDim)
		for i := 0; i < s.HeadDim/2; i++ {
			a, b := s.ropePairs(i)
			seen[a]++
			seen[b]++
			if i < s.RopeDim/2 && s.Half {
				require.Equal(t, s.RopeDim/2, b-a)
			} else {
				require.Equal(t, 1, b-a)
			}
		}
		for e, n := range seen {
			require.Equal(t, 1, n, "%+v element %d", s, e)
		}
	}
}

// TestRopeKVMapping checks, for shapes and block sizes covering every guard
// (lanes, pairs per thread, ragged units), that the kernel's mapping reads
// each q, k, v element of every token once, writes each q element and each
// element of the token's cache rows once, nothing else, and computes what
// RefRopeKV does.
func TestRopeKVMapping(t *testing.T) {
	shapes := []RopeShape{
		{Heads: 32, HeadsKV: 32, HeadDim: 128, RopeDim: 128, Cache: dtype.F16},
		{Heads: 32, HeadsKV: 8, HeadDim: 128, RopeDim: 128, Half: true, Cache: dtype.BF16},
		{Heads: 28, HeadsKV: 4, HeadDim: 128, RopeDim: 64, Half: true, Cache: dtype.F32},
		{Heads: 8, HeadsKV: 2, HeadDim: 80, RopeDim: 32, Half: true, Cache: dtype.F16},
		{Heads: 6, HeadsKV: 3, HeadDim: 96, RopeDim: 40, Cache: dtype.F32},
		{Heads: 16, HeadsKV: 8, HeadDim: 256, RopeDim: 128, Half: true, Cache: dtype.BF16},
		{Heads: 8, HeadsKV: 4, HeadDim: 8, RopeDim: 8, Cache: dtype.F16},
		{Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64, Cache: dtype.F16},
		{Heads: 5, HeadsKV: 5, HeadDim: 2, RopeDim: 2, Half: true, Cache: dtype.F32},
		{Heads: 32, HeadsKV: 32, HeadDim: 128, RopeDim: 128, Cache: CacheQ8},
		{Heads: 32, HeadsKV: 8, HeadDim: 128, RopeDim: 128, Half: true, Cache: CacheQ8},
		{Heads: 4, HeadsKV: 2, HeadDim: 64, RopeDim: 64, Cache: CacheQ8},
		{Heads: 16, HeadsKV: 8, HeadDim: 256, RopeDim: 128, Half: true, Cache: CacheQ8},
		{Heads: 28, HeadsKV: 4, HeadDim: 96, RopeDim: 64, Half: true, Cache: CacheQ8},
	}
	threads := []int{32, 64, 96, 128, 160, 256, 512, 1024}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range shapes {
		require.NoError(t, s.validate())
		const ntok = 3
		qkv := randF32(r, ntok*s.QKVStride())
		pos, slot := []int32{0, 7999, 123}, []int32{4, 0, 2}
		inv := make([]float32, s.RopeDim/2)
		for i := range inv {
			inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(s.RopeDim)))
		}
		cacheN := 5 * s.HeadsKV * s.HeadDim
		kc, vc := randF32(r, cacheN), randF32(r, cacheN)
		wq, wk, wv := RefRopeKV(s, qkv, pos, slot, inv, kc, vc)
		for _, nt := range threads {
			pl := newRopePlan(s, nt)
			require.LessOrEqual(t, pl.UPB*(pl.Blocks-1), pl.Units-1, "%+v t%d: an empty block", s, nt)
			qo, ko, vo, reads, qw, kw, vw, ks, vs := emulateRopeKV(s, pl, qkv, pos, slot, inv, kc, vc)
			for i, n := range reads {
				require.Equal(t, 1, n, "%+v t%d: qkv element %d read %d times", s, nt, i, n)
			}
			qd := s.Heads * s.HeadDim
			for i, n := range qw {
				want := 0
				if i%s.QKVStride() < qd {
					want = 1
				}
				require.Equal(t, want, n, "%+v t%d: qkv element %d written %d times", s, nt, i, n)
			}
			kvw := s.HeadsKV * s.HeadDim
			for i := range kw {
				want := 0
				for _, sl := range slot {
					if i/kvw == int(sl) {
						want = 1
					}
				}
				require.Equal(t, want, kw[i], "%+v t%d: k cache element %d", s, nt, i)
				require.Equal(t, want, vw[i], "%+v t%d: v cache element %d", s, nt, i)
				if s.Cache == CacheQ8 && i%CacheBlock == 0 {
					require.Equal(t, want, ks[i/CacheBlock], "%+v t%d: k cache scale of element %d", s, nt, i)
					require.Equal(t, want, vs[i/CacheBlock], "%+v t%d: v cache scale of element %d", s, nt, i)
				}
			}
			require.Less(t, RelErr(qo, wq), 1e-6, "%+v t%d q", s, nt)
			require.Less(t, RelErr(ko, wk), 1e-3, "%+v t%d k", s, nt)
			require.Less(t, RelErr(vo, wv), 1e-9, "%+v t%d v", s, nt)
		}
	}
}

// TestRopeKVGeometry pins the grid at batch 1 for llama2-7b's shape: many
// blocks, each thread reusing its angles over two heads.
func TestRopeKVGeometry(t *testing.T) {
	s := RopeShape{Heads: 32, HeadsKV: 32, HeadDim: 128, RopeDim: 128, Cache: dtype.F16}
	k, err := RopeKV(s, DefaultBlockArm)
	require.NoError(t, err)
	g := k.Launch(Dims{Tokens: 1})
	require.Equal(t, [3]uint32{1, 12, 1}, g.Grid)
	require.Equal(t, [3]uint32{256, 1, 1}, g.Block)
	require.Equal(t, [3]uint32{5, 12, 1}, k.Launch(Dims{Tokens: 5}).Grid)
	require.Equal(t, 1, newRopePlan(RopeShape{Heads: 8, HeadsKV: 4, HeadDim: 8, RopeDim: 8}, 256).Blocks)
}
