package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memra-ai/memra/ir/dtype"
)

// Point is one arm of a family's search space written as knob values by
// knob name, the form the autotuner searches and the tunedb stores.
type Point map[string]int

// String is a stable form of p: "name=value" pairs sorted by name, joined by
// commas.
func (p Point) String() string {
	parts := make([]string, 0, len(p))
	for _, k := range sortedKeys(p) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, p[k]))
	}
	return strings.Join(parts, ",")
}

// Equal reports whether p and q hold the same knob values.
func (p Point) Equal(q Point) bool {
	if len(p) != len(q) {
		return false
	}
	for k, v := range p {
		if w, ok := q[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Space is the uniform view of one kernel family's tuning space: its knobs,
// the constraints an arm must meet and the arm used before tuning. It is
// data over the family's typed arm (GEMVArm, MMAArm, …); it changes nothing
// in how kernels are generated.
type Space struct {
	Family  string // family name, as in Kernel.Family (decode attention: "attn_decode")
	Knobs   []Knob // the tuning dimensions and the values searched
	Default Point  // the arm used when the tunedb has no entry
	// optional are knobs a point may leave out, with the value implied
	// then (knobs added after tunedbs were written: old points stay
	// valid and keep their names). Arms leaves them out at that value.
	optional Point
	// check validates the typed arm built from a complete point.
	check func(Point) error
	// unsearched, when set, names valid arms that Arms leaves out: arms
	// chosen by hand until measured (they still run where named).
	unsearched func(Point) bool
	// name returns the typed arm's short name.
	name func(Point) string
}

// Valid reports whether p names every knob of the space and nothing else,
// and meets the family's constraints. Values outside a knob's searched list
// are accepted when the family's Validate accepts them.
func (s Space) Valid(p Point) error {
	for name := range p {
		if !slices.ContainsFunc(s.Knobs, func(k Knob) bool { return k.Name == name }) {
			return fmt.Errorf("%w: %s arm %v: want knobs %s", ErrUnsupported, s.Family, p, s.knobNames())
		}
	}
	full := Point{}
	for _, k := range s.Knobs {
		v, ok := p[k.Name]
		if !ok {
			if v, ok = s.optional[k.Name]; !ok {
				return fmt.Errorf("%w: %s arm %v: no knob %q", ErrUnsupported, s.Family, p, k.Name)
			}
		}
		full[k.Name] = v
	}
	return s.check(full)
}

// canonical returns p without the optional knobs at their implied value.
func (s Space) canonical(p Point) Point {
	for k, v := range s.optional {
		if w, ok := p[k]; ok && w == v {
			delete(p, k)
		}
	}
	return p
}

// ArmName returns the family's short name of arm p (e.g. "t256_r8_u4_s1"),
// or p.String() when p is not a valid arm.
func (s Space) ArmName(p Point) string {
	if s.Valid(p) != nil {
		return p.String()
	}
	return s.name(p)
}

// Arms lists every valid arm of the space in a stable order.
func (s Space) Arms() []Point {
	return enumerate(s.Knobs, func(v map[string]int) Point { return s.canonical(Point(v)) }, func(p Point) error {
		if s.unsearched != nil && s.unsearched(p) {
			return ErrUnsupported
		}
		return s.Valid(p)
	})
}

// Size is the number of valid arms.
func (s Space) Size() int { return len(s.Arms()) }

func (s Space) knobNames() string {
	names := make([]string, len(s.Knobs))
	for i, k := range s.Knobs {
		names[i] = k.Name
	}
	return strings.Join(names, ",")
}

// Point returns a as a Point.
func (a BlockArm) Point() Point { return Point{"threads": a.Threads} }

// Point returns a as a Point; layout 0 (the file's) is left out, as in
// points written before the knob existed.
func (a GEMVArm) Point() Point {
	p := Point{"threads": a.Threads, "rows_per_block": a.RowsPerBlock, "unroll": a.Unroll, "shared_x": a.SharedX}
	if a.Layout != 0 {
		p["layout"] = a.Layout
	}
	if a.XQ != 0 {
		p["xq"], p["batch_rows"] = a.XQ, a.BatchRows
	}
	if a.RowsPerWarp != 0 {
		p["rows_per_warp"] = a.RowsPerWarp
	}
	if a.Stages != 0 {
		p["stages"] = a.Stages
	}
	if a.Ordered != 0 {
		p["ordered"] = a.Ordered // a knob no search varies
	}
	if a.Prefetch != 0 {
		p["prefetch"] = a.Prefetch
	}
	if a.MinBlocks != 0 {
		p["min_blocks"] = a.MinBlocks
	}
	return p
}

// Point returns a as a Point.
func (a MMAArm) Point() Point {
	p := Point{"bm": a.BM, "bn": a.BN, "warps_m": a.WarpsM, "warps_n": a.WarpsN}
	if a.Pipe != 0 {
		p["pipe"] = a.Pipe
	}
	return p
}

// Point returns a as a Point ("live" only for the live-length arms, whose
// space is "attn_decode_live").
func (a DecodeArm) Point() Point {
	if a.Live != 0 {
		p := Point{"threads": a.Threads, "chunk": a.Chunk, "live": a.Live}
		if a.Fuse {
			p["fuse"] = 1
		}
		return p
	}
	return Point{"threads": a.Threads, "chunk": a.Chunk}
}

// Point returns a as a Point.
func (a PrefillArm) Point() Point { return Point{"warps": a.Warps} }

// BlockArmOf returns the BlockArm p describes (missing knobs are zero).
func BlockArmOf(p Point) BlockArm { return BlockArm{Threads: p["threads"]} }

// GEMVArmOf returns the GEMVArm p describes (missing knobs are zero).
func GEMVArmOf(p Point) GEMVArm {
	return GEMVArm{Threads: p["threads"], RowsPerBlock: p["rows_per_block"], Unroll: p["unroll"], SharedX: p["shared_x"], Layout: p["layout"],
		XQ: p["xq"], BatchRows: p["batch_rows"], RowsPerWarp: p["rows_per_warp"], Stages: p["stages"], Ordered: p["ordered"], Prefetch: p["prefetch"],
		MinBlocks: p["min_blocks"]}
}

// MMAArmOf returns the MMAArm p describes (missing knobs are zero).
func MMAArmOf(p Point) MMAArm {
	return MMAArm{BM: p["bm"], BN: p["bn"], WarpsM: p["warps_m"], WarpsN: p["warps_n"], Pipe: p["pipe"]}
}

// DecodeArmOf returns the DecodeArm p describes (missing knobs are zero).
func DecodeArmOf(p Point) DecodeArm {
	return DecodeArm{Threads: p["threads"], Chunk: p["chunk"], Live: p["live"], Fuse: p["fuse"] != 0}
}

// PrefillArmOf returns the PrefillArm p describes (missing knobs are zero).
func PrefillArmOf(p Point) PrefillArm { return PrefillArm{Warps: p["warps"]} }

// armSpace builds a Space over a typed arm A.
func armSpace[A interface {
	Validate() error
	String() string
}](family string, knobs []Knob, def Point, of func(Point) A) Space {
	return Space{Family: family, Knobs: knobs, Default: def,
		check: func(p Point) error { return of(p).Validate() },
		name:  func(p Point) string { return of(p).String() }}
}

// Spaces returns the search space of every tunable kernel family, in a
// fixed order.
func Spaces() []Space {
	block := func(f string) Space { return armSpace(f, BlockKnobs, DefaultBlockArm.Point(), BlockArmOf) }
	return []Space{
		block("embedding"),
		block("rmsnorm"),
		block("rope_kv"),
		block("swiglu"),
		block("argmax"),
		armSpace("attn_decode", DecodeKnobs, DefaultDecodeArm.Point(), DecodeArmOf),
		armSpace("attn_prefill", PrefillKnobs, DefaultPrefillArm.Point(), PrefillArmOf),
		armSpace("attn_flash", FlashKnobs, DefaultFlashArm.Point(), FlashArmOf),
		gemvSpace(),
		mmaSpace(),
		armSpace("gemm_small", GemmSmallKnobs, DefaultGemmSmallArm.Point(), GemmSmallArmOf),
		decodeLiveSpace(),
		armSpace("moe_route", BlockKnobs, DefaultMoERouteArm.Point(), BlockArmOf),
		moeSpace(),
		block("moe_sum"),
		armSpace("tail", TailKnobs, TailArm{}.Point(), TailArmOf),
	}
}

// decodeLiveSpace is the attn_decode_live family's space; "fuse" is
// optional (0), so the entries recorded before it existed stay valid
// points.
func decodeLiveSpace() Space {
	s := armSpace("attn_decode_live", DecodeLiveKnobs, DefaultDecodeLiveArm.Point(), DecodeArmOf)
	s.optional = Point{"fuse": 0}
	return s
}

// moeSpace is the moe_gemv family's space; "xq" is optional (0), so the
// entries recorded before it existed stay valid points.
func moeSpace() Space {
	s := armSpace("moe_gemv", MoEKnobs, DefaultMoEArm.Point(), MoEArmOf)
	s.optional = Point{"xq": 0}
	return s
}

// mmaSpace is the mma family's space; "pipe" is optional (0), so the
// entries recorded before it existed stay valid points.
func mmaSpace() Space {
	s := armSpace("mma", MMAKnobs, DefaultMMAArm.Point(), MMAArmOf)
	s.optional = Point{"pipe": 0}
	return s
}

// gemvSpace is the gemv family's space over every weight type: layout 1
// arms are valid for some types only (see GEMVSpaceFor).
func gemvSpace() Space {
	s := armSpace("gemv", GEMVKnobs, DefaultGEMVArm.Point(), GEMVArmOf)
	s.optional = Point{"layout": 0, "xq": 0, "batch_rows": 0, "rows_per_warp": 0, "stages": 0, "ordered": 0, "prefetch": 0, "min_blocks": 0}
	s.unsearched = func(p Point) bool { return !searched(GEMVArmOf(p)) }
	return s
}

// GEMVSpaceFor is the gemv space of products with weights of type t: the
// layout knob searches 1 only when t has a repacked layout, and Valid
// rejects layout 1 arms for other types.
func GEMVSpaceFor(t dtype.Type) Space {
	s := gemvSpace()
	if !Repackable(t) {
		s.Knobs = slices.Clone(s.Knobs)
		for i, k := range s.Knobs {
			if k.Name == "layout" || k.Name == "xq" {
				s.Knobs[i] = Knob{Name: k.Name, Values: []int{0}}
			}
			if k.Name == "batch_rows" || k.Name == "rows_per_warp" {
				s.Knobs[i] = Knob{Name: k.Name, Values: []int{0}}
			}
		}
	}
	s.check = func(p Point) error { return GEMVArmOf(p).ValidFor(t) }
	return s
}

// searched reports whether the search spaces hold a valid GEMV arm: of
// the XQ 2 arms that split K over a row set's warps, those of the one-row
// space with two warps a row set, as lowering's untuned arm splits the
// products of fewer blocks than the card has multiprocessors (SplitUntuned;
// four warps a row set and split batch arms are chosen by hand:
// a tunedb entry, Arms, kernel-check --gemv-arms).
func searched(a GEMVArm) bool {
	return a.XQ != 2 || a.kSplit() == 1 || (a.kSplit() == 2 && a.BatchRows == 1)
}

// narrowedGEMVSpace is GEMVSpaceFor(t) with the knobs named in values
// searched over those values instead (the others as they are), in
// GEMVSpaceFor's knob order: the spaces of the one-row, batch, large,
// small and wide arms.
func narrowedGEMVSpace(t dtype.Type, values map[string][]int) Space {
	return GEMVSpaceFor(t).Narrowed(values)
}

// Narrowed is s with the knobs named in values searched over those values
// instead (the others, the default and the checks as they are); s's knobs
// are not changed.
func (s Space) Narrowed(values map[string][]int) Space {
	s.Knobs = slices.Clone(s.Knobs)
	for i, k := range s.Knobs {
		if v, ok := values[k.Name]; ok {
			s.Knobs[i] = Knob{Name: k.Name, Values: v}
		}
	}
	return s
}

// classGEMVSpace is narrowedGEMVSpace with values, searched whole (no
// knob left unsearched), from def, that refuses with refuse every point
// whose arm keep rejects: the space of one class of a product's arms.
func classGEMVSpace(t dtype.Type, values map[string][]int, def GEMVArm, keep func(GEMVArm) bool, refuse error) Space {
	s := narrowedGEMVSpace(t, values)
	check := s.check
	s.check = func(p Point) error {
		if !keep(GEMVArmOf(p)) {
			return refuse
		}
		return check(p)
	}
	s.unsearched = nil
	s.Default = def.Point()
	return s
}

// GEMVBatchClass is the shape class under which the tunedb keeps the batch
// arm (steps of two or more rows, Launch.One's other kernel) of the
// product of class.
func GEMVBatchClass(class string) string { return class + "_batch" }

// GEMVBatchSpaceFor is the gemv space of the batch arms of products with
// repacked weights of type t: the XQ 2 arms with four, eight or sixteen
// rows a block, which read the XQuant rows the untuned one-row arm reads,
// starting from DefaultXQGlobalBatchArm. The batch kernel serves steps of
// 2 to GEMVLargeRows-1 rows; from GEMVLargeRows the tensor-core kernel
// (Arms.GEMVLarge, XQ 3) runs, which measured slower than XQ 2 below that.
// Four rows a block with four weight rows a warp ran the 8-row step of
// llama3-8b's down product in 36.9 against the default's 46.9 µs on an
// H100 and no slower at 1 to 16 rows (docs/PERFORMANCE.md, session 29).
// Each arm comes with and without Prefetch (the next activation row's
// loads before this row's dots): on an H100 it made four of five batch
// arms slower at 5 rows (docs/PERFORMANCE.md, session 35), so a sweep
// weighs it like any knob. So is MinBlocks 4 (at most 64 registers, four
// blocks of 256 a multiprocessor: the 5-row products ran 1.29 waves of
// three, session 36).
func GEMVBatchSpaceFor(t dtype.Type) Space {
	s := narrowedGEMVSpace(t, map[string][]int{"layout": {1}, "shared_x": {1}, "xq": {2}, "batch_rows": {4, 8, 16}, "prefetch": {0, 1}, "min_blocks": {0, 4}})
	s.Default = DefaultXQGlobalBatchArm.Point()
	return s
}

// GEMVOneSpaceFor is the gemv space of the one-row arms of products with
// repacked weights of type t: the XQ 2 arms (one activation row a block,
// reading the rows an XQuant launch or a producer's epilogue wrote),
// starting from DefaultXQGlobalOneArm. Timed alone, an XQ 2 arm carries an
// XQuant launch that a one-sequence program does not run (the epilogues
// write its rows), so XQ 1 arms won there and then decoded llama2-7b
// q4_k_m at 420 against 471 tok/s on the H200, without the epilogues; the
// float-activation arms measured 1.5× the time of the int8 ones. MinBlocks
// 2 and 4 cap the registers so that more warps hide the loads (the
// one-row products held 16 warps a multiprocessor, session 36).
func GEMVOneSpaceFor(t dtype.Type) Space {
	s := narrowedGEMVSpace(t, map[string][]int{"layout": {1}, "shared_x": {1}, "batch_rows": {1}, "xq": {2}, "min_blocks": {0, 2, 4}})
	s.Default = DefaultXQGlobalOneArm.Point()
	return s
}

// SpaceFamilies lists the family names of Spaces, in order.
func SpaceFamilies() []string {
	var names []string
	for _, s := range Spaces() {
		names = append(names, s.Family)
	}
	return names
}

// SpaceByName returns the search space of family name.
func SpaceByName(name string) (Space, error) {
	i := slices.IndexFunc(Spaces(), func(s Space) bool { return s.Family == name })
	if i < 0 {
		return Space{}, fmt.Errorf("%w: no tunable family %q (have %s)", ErrUnsupported, name, strings.Join(SpaceFamilies(), ", "))
	}
	return Spaces()[i], nil
}
