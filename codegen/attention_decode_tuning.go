package codegen

import (
	"cmp"
	"fmt"
)

// DecodeArm is the tuning of split-KV decode attention.
type DecodeArm struct {
	Threads int // threads per block of the partial kernel
	Chunk   int // keys per split
	// Live selects how the splits follow the sequence's live KV length
	// (read from kv_len on the device, so the launch geometry stays that of
	// the capacity and graph replay holds):
	//   0: fixed CHUNK-key splits; an empty split writes a zero output and a
	//      neutral (max −inf, sum 0) pair; the combine reads every split.
	//   1: fixed CHUNK-key splits; an empty split writes only the neutral
	//      pair and exits; the combine reads only the live splits.
	//   2: as 1, with the live length spread over all splits: chunk =
	//      min(CHUNK, ⌈len/splits⌉ rounded up to 32, at least 32), so short contexts use
	//      every block instead of the first few.
	//   3: as 2, but in the fewest splits that still give each of the
	//      card's SMs multiprocessors a block: chunk = min(CHUNK, max(32,
	//      ⌈len/splits⌉, ⌈len/want⌉) rounded up to 32), want =
	//      ⌈SMs/(HKV·sequences)⌉. On the H200 five
	//      128-key splits of llama2-7b's 32 kv heads (160 blocks) beat
	//      twenty of 32 keys and three of ~200, at batch 1 and 16; Live 2
	//      gives a served 4096-position cache the twenty at 600 keys.
	//   4: splits of a length that depends on the sequence alone, chunk =
	//      max(CHUNK, ⌈len/MaxLiveSplits⌉ rounded up to 32), so a sequence's
	//      sums never depend on the step's width (batch invariant, as Live
	//      2), launched as Live 3 launches them (the splits that give each
	//      multiprocessor liveBlocksPerSM blocks): a block takes split y,
	//      y + launched, … (with Preload, each split's first step is loaded
	//      before the wait, which only the first split's loads precede).
	//      Where Live 3 would give a sequence
	//      one split of 600 keys at 64 sequences, Live 4 gives it five of
	//      CHUNK 128 in one block, and at one sequence the same five. The
	//      --batch-invariant configuration's (decodeArm maps Live 3 to it).
	Live int
	// SMs (Live 3 only; not a tuned knob: lowering sets it from
	// LowerOptions.Multiprocessors) is the card's multiprocessor count.
	SMs int
	// Preload (not a tuned knob: lowering sets it from
	// LowerOptions.DecodePreload): the partial kernel reads the sequence's
	// length and its first step's key and value rows before it waits for
	// the previous kernel (programmatic dependent launch), and after the
	// wait reloads only the newest row, the one that kernel wrote. Every
	// older row was written by an earlier step. Names carry "_p".
	Preload bool
	// Newest (with Preload; not a tuned knob: lowering sets it to the
	// program's sequences, at most MaxSharedRows) is how many rows at the
	// end of a sequence the step itself may have written: a speculative
	// verify step's drafts share their sequence's pages, each entry writing
	// its own position, so the rows from len - Newest on are the kernel
	// before attention's and are read again after the wait. 0 or 1: the
	// newest row alone (a one-sequence program). Names carry the count
	// after "_p" where it is above 1.
	Newest int
	// Fuse: the combine runs in the partial kernel, in the block that
	// finishes each (sequence, kv head) last (DecodeAttentionFused): one
	// launch instead of two, the same floats. Names carry "_f".
	Fuse bool
}

// OnCard returns a for a card of sms multiprocessors (0: the default
// card's, DefaultMultiprocessors): a Live 3 arm sizes its splits by them;
// the others carry none. A tunedb point of Live 3 has no SMs knob: this
// is where lowering, the catalogs and the kernel-check cases set it.
func (a DecodeArm) OnCard(sms int) DecodeArm {
	if a.Live >= 3 {
		a.SMs = cmp.Or(sms, DefaultMultiprocessors)
	} else {
		a.SMs = 0
	}
	return a
}

// Invariant returns the arm a batch-invariant class (invariant true)
// runs for a: Live 3 sizes a sequence's splits by the step's sequence
// count, so its sums would depend on the batch; Live 4's depend on the
// sequence's length alone and launch as Live 3's do. Lowering maps every
// pick through it, and autotune times the attention arms so (a Live 3
// point is then timed as the Live 4 kernels it lowers to).
func (a DecodeArm) Invariant(invariant bool) DecodeArm {
	if a.Live == 3 && invariant {
		a.Live = 4
	}
	return a
}

// DefaultDecodeArm is the arm used before tuning.
var DefaultDecodeArm = DecodeArm{Threads: 256, Chunk: 64}

// DecodeKnobs is the search space of DecodeArm.
var DecodeKnobs = []Knob{{"threads", []int{64, 128, 256}}, {"chunk", []int{64, 128, 256, 512, 1024}}}

// Validate reports whether a is well formed. A Live 3 arm may leave SMs
// 0 (a tunedb entry: lowering sets the card's); its kernels need them
// (validKernel).
func (a DecodeArm) Validate() error {
	if a.Threads < 32 || a.Threads > 1024 || a.Threads%32 != 0 || a.Chunk < 32 || a.Chunk > 4096 || a.Live < 0 || a.Live > 4 ||
		(a.Live < 3 && a.SMs != 0) || a.SMs < 0 || a.SMs > 1024 || a.Newest < 0 || a.Newest > MaxSharedRows {
		return fmt.Errorf("%w: decode attention arm %+v", ErrUnsupported, a)
	}
	return nil
}

// validKernel is Validate for an arm kernels are generated from: a Live 3
// arm must know its card's multiprocessors.
func (a DecodeArm) validKernel() error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Live >= 3 && a.SMs == 0 {
		return fmt.Errorf("%w: decode attention arm %v: Live %d needs the card's multiprocessors (SMs)", ErrUnsupported, a, a.Live)
	}
	return nil
}

// DecodeArms lists every valid DecodeArm of the search space.
func DecodeArms() []DecodeArm {
	return enumerate(DecodeKnobs, func(v map[string]int) DecodeArm { return DecodeArm{Threads: v["threads"], Chunk: v["chunk"]} }, DecodeArm.Validate)
}

// DecodeLiveKnobs is the search space of the live-length arms (Live 1,
// 2 and 3; a Live 3 point has no SMs knob: lowering sets the card's), tuned
// as family "attn_decode_live" so that the attn_decode space and its
// recorded entries stay as they are.
//
// Chunks of 32 keys are for Live 4 at few kv heads: its splits hold at
// least CHUNK keys, so qwen3-30b-a3b's 4 kv heads at 512 keys run 16
// blocks in CHUNK-128 splits and 64 in CHUNK-32 ones (the spread Live 3
// gives one sequence, and on an H100 the fastest of 60 arms timed as
// Live 3 there: docs/PERFORMANCE.md, session 33); a long sequence still
// gets ⌈len/32⌉-key splits.
//
// fuse 1 runs the combine in the partial kernel (DecodeArm.Fuse).
var DecodeLiveKnobs = []Knob{{"threads", []int{64, 128, 256}}, {"chunk", []int{32, 64, 128, 256, 512, 1024}}, {"live", []int{1, 2, 3, 4}}, {"fuse", []int{0, 1}}}

// DefaultDecodeLiveArm is the live-length arm used before tuning: Live 3,
// which lowering gives the card's multiprocessors. It won on both cards
// measured: on the H200 five 128-key splits beat Live 2's twenty at batch 1
// and 16; on the H100 (llama2-7b q4_k_m at a server's 4,096-position
// cache, tg128@512) 411.56 tok/s against 384.12 at batch 1 and 3,219.52
// against 2,404.89 at batch 64 (docs/PERFORMANCE.md, session 21).
var DefaultDecodeLiveArm = DecodeArm{Threads: 256, Chunk: 128, Live: 3}

// String is the arm's short name used in kernel names and tables.
func (a DecodeArm) String() string {
	s := fmt.Sprintf("t%d_c%d", a.Threads, a.Chunk)
	if a.Live != 0 {
		s += fmt.Sprintf("_l%d", a.Live)
	}
	if a.Live >= 3 {
		s += fmt.Sprintf("_m%d", a.SMs)
	}
	if a.Preload {
		s += "_p"
		if a.Newest > 1 {
			s += fmt.Sprint(a.Newest)
		}
	}
	if a.Fuse {
		s += "_f"
	}
	return s
}

// tile is the partial kernel's tiling of s under a: decodeTile's.
func (a DecodeArm) tile(s AttnShape) decodeTiling { return decodeTile(s, a.Threads) }

// liveChunk writes the device expression of the keys per split into
// "const int chunk": CHUNK, for Live 2 the live length spread over the
// splits, for Live 3 over the fewest splits that give each multiprocessor
// a block (nseq: the device expression of the launch's sequence count).
// The partial and the combine kernels share it; ChunkFor is its Go mirror.
func (a DecodeArm) liveChunk(w *Writer, nseq string) {
	switch a.Live {
	case 2:
		w.Comment("at least the keys that cover len in splits (more than CHUNK where the splits were capped, MaxLiveSplits)")
		w.Line("const int chunk = max(min(CHUNK, max(32, ((len + splits - 1) / splits + 31) & ~31)), ((len + splits - 1) / splits + 31) & ~31);")
	case 3:
		w.Linef("const int want = (%d + HKV * %s - 1) / (HKV * %s); // splits that give each multiprocessor a block", a.SMs, nseq, nseq)
		w.Linef("const int ns = min(splits, (%d + HKV * %s - 1) / (HKV * %s)); // the splits launched (launchSplits)", liveBlocksPerSM*a.SMs, nseq, nseq)
		w.Line("const int chunk = max(min(CHUNK, max(32, (max((len + ns - 1) / ns, (len + want - 1) / want) + 31) & ~31)), ((len + ns - 1) / ns + 31) & ~31);")
	case 4:
		w.Comment("the sequence's own length alone sets its splits (batch invariant)")
		w.Linef("const int chunk = max(CHUNK, ((len + %d) / %d + 31) & ~31);", MaxLiveSplits-1, MaxLiveSplits)
	default:
		w.Line("const int chunk = CHUNK;")
	}
}

// ChunkFor is the keys a split of a sequence of kvLen keys holds, with
// splits the launch's split count, seqs its sequences and hkv the model's
// kv heads: the host's mirror of the kernels' expression (liveChunk).
func (a DecodeArm) ChunkFor(kvLen, splits, seqs, hkv int) int {
	up := func(n int) int { return (n + 31) &^ 31 }
	switch a.Live {
	case 2:
		return max(min(a.Chunk, max(32, up(ceilDiv(kvLen, splits)))), up(ceilDiv(kvLen, splits)))
	case 3:
		want := ceilDiv(a.SMs, hkv*seqs)
		ns := a.LaunchSplits(splits, seqs, hkv)
		return max(min(a.Chunk, max(32, up(max(ceilDiv(kvLen, ns), ceilDiv(kvLen, want))))), up(ceilDiv(kvLen, ns)))
	case 4:
		return max(a.Chunk, up(ceilDiv(kvLen, MaxLiveSplits)))
	}
	return a.Chunk
}

// liveBlocksPerSM is the partial kernel's blocks a multiprocessor that
// Live 3 launches at most: with many sequences a capacity's splits are
// mostly empty (64 sequences × 32 kv heads × 32 splits of a 4,096-position
// cache is 65,536 blocks for about 10,000 that hold keys), so it launches
// only the splits that give every multiprocessor this many blocks, each
// split the longer for it.
const liveBlocksPerSM = 4

// LaunchSplits is the partial kernel's launched splits of a launch whose
// capacity gives splits (Splits), over seqs sequences of hkv kv heads:
// splits, or for Live 3 and 4 the fewest that give each multiprocessor
// liveBlocksPerSM blocks. The partials keep the capacity's layout (a
// sequence's head strides splits); the launched ones cover its keys
// (Live 4: a block takes every launched-th split).
func (a DecodeArm) LaunchSplits(splits, seqs, hkv int) int {
	if a.Live < 3 {
		return splits
	}
	return max(1, min(splits, ceilDiv(liveBlocksPerSM*a.SMs, hkv*seqs)))
}

// liveSplits writes, for the live arms, "const int live": the splits that
// hold keys (len and chunk in scope), and returns the expression of the
// splits a combine reads: live, or splits.
func (a DecodeArm) liveSplits(w *Writer) string {
	if a.Live == 0 {
		return "splits"
	}
	if a.Live == 4 {
		w.Line("const int live = (len + chunk - 1) / chunk; // the splits holding keys, at most MaxLiveSplits")
		return "live"
	}
	n := "splits"
	if a.Live == 3 {
		n = "ns"
	}
	w.Linef("const int live = min(%s, (len + chunk - 1) / chunk); // the splits holding keys; neutral partials (sum 0) are skipped too", n)
	return "live"
}

// Splits returns the number of KV splits for a key length (the cache
// capacity): one a Chunk of keys.
//
// The live arms (2 and 3) take at most MaxLiveSplits: their chunk grows
// past Chunk where a long capacity would otherwise launch thousands of
// blocks a kv head that find no key (a 32k-position cache in 128-key
// splits is 256 of them, for a sequence of a few hundred keys).
func (a DecodeArm) Splits(kvLen int) int {
	n := max(1, ceilDiv(kvLen, a.Chunk))
	if a.Live >= 2 {
		n = min(n, MaxLiveSplits)
	}
	return n
}

// MaxSharedRows bounds the entries of one step that share a sequence's
// pages and write its newest rows: a speculative verify step's, the
// sequence's own token and at most 16 drafts (the runtime's bound on
// drafted tokens). DecodeArm.Newest is at most this.
const MaxSharedRows = 17

// MaxLiveSplits bounds the splits of the live decode attention arms
// (DecodeArm.Splits): 32, the count a 4096-position cache in the default
// 128-key chunks already had.
const MaxLiveSplits = 32
