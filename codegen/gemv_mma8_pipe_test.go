package codegen

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/stretchr/testify/require"
)

// TestMMA8PipeArms: the pipelined arms' names parse back, and Validate
// takes rings of 2, 4 or 8 stages of 1, 2 or 4 groups (8 groups at most)
// on XQ 3 arms only, within the shared memory a block may have.
func TestMMA8PipeArms(t *testing.T) {
	a, err := ParseGEMVArm("t512_r1_u2_s1_l1_m16_w2_p2")
	require.NoError(t, err)
	require.Equal(t, DefaultXQMMAPipeArm, a)
	require.Equal(t, "t512_r1_u2_s1_l1_m16_w2_p2", a.String())
	require.Equal(t, a, GEMVArmOf(a.Point()))
	require.NoError(t, GEMVSpaceFor(dtype.Q4_K).Valid(a.Point()), "a named arm outside the searched values")
	for _, bad := range []func(a *GEMVArm){
		func(a *GEMVArm) { a.Stages = 3 },
		func(a *GEMVArm) { a.Stages, a.Unroll = 4, 4 }, // 16 groups
		func(a *GEMVArm) { a.Unroll = 3 },
		func(a *GEMVArm) { a.XQ = 2 },
		func(a *GEMVArm) { a.Stages, a.Unroll, a.RowsPerWarp = 8, 1, 4 }, // 16 warps of 64 rows: too much shared memory
	} {
		b := DefaultXQMMAPipeArm
		bad(&b)
		require.ErrorIs(t, b.Validate(), ErrUnsupported, "%+v", b)
	}
	for _, s := range []string{"t256_r1_u1_s1_l1_m16_w2_p4", "t512_r2_u1_s1_l1_m16_w2_p4", "t512_r1_u4_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_p8"} {
		a, err := ParseGEMVArm(s)
		require.NoError(t, err, s)
		require.Equal(t, s, a.String())
	}
}

// TestMMA8PipeKernel: the kernel's weights are copied before the wait for
// the previous kernel and its activations after, every stage waits for
// the copies P-1 stages back, the launch asks for each warp's ring (with
// the opt-in once static and dynamic memory pass 48 KB), and types the
// arm does not pipeline take the unpipelined default with its batch rows.
func TestMMA8PipeKernel(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		for _, s := range []string{"t512_r1_u2_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_w2_p4", "t256_r1_u1_s1_l1_m12_p8"} {
			a, err := ParseGEMVArm(s)
			require.NoError(t, err)
			k, err := GEMVXQ(ty, 1000, 11008, true, a, XQEnds{NormIn: true, NormEps: 1e-5}, 0)
			require.NoError(t, err, s)
			require.True(t, strings.HasSuffix(k.Name, "_"+s), k.Name)
			src := k.Source
			wait := strings.Index(src, "    pdl_wait();")
			require.Positive(t, wait, s)
			require.Less(t, strings.Index(src, "cp_cg16(wsa"), wait, "weights before the wait")
			require.Greater(t, strings.Index(src, "cp_ca16(wsa"), wait, "activations after it")
			require.Equal(t, 8/a.Unroll, strings.Count(src, "CP_WAIT(P - 2);"), "a wait a stage of the super-block")
			require.Equal(t, 8, strings.Count(src, "const u8* st = ws + "), "a slot read a group")
			require.True(t, strings.Contains(src, "#define K 11008\n") && strings.Contains(src, "#define NSB (K / 256)"), "43 super-blocks a row")
			pt := mma8PipeTypes[ty]
			g := k.Launch(Dims{Tokens: 20})
			mb := a.batchRows()
			require.Equal(t, [3]uint32{uint32(ceilDiv(1000, 16*a.rowsPerWarp())), uint32(ceilDiv(20, mb)), 1}, g.Grid)
			require.Equal(t, uint32(a.mma8PipeShared(pt)), g.Shared)
			require.Equal(t, g.Shared+g.StaticShared > 48<<10, g.SharedOverDefault())
		}
	}
	k, err := GEMVXQ(dtype.Q8_0, 1000, 512, false, DefaultXQMMAPipeArm, XQEnds{}, 0)
	require.NoError(t, err)
	want := DefaultXQMMAArm
	want.BatchRows = DefaultXQMMAPipeArm.BatchRows
	require.True(t, strings.HasSuffix(k.Name, "_"+want.String()), k.Name)
	require.False(t, strings.Contains(k.Source, "cp.async"), "the unpipelined kernel")
}

// TestMMA8PipeGolden pins the default pipelined kernel's source at a small
// Q4_K shape (go test ./codegen -run TestMMA8PipeGolden -update rewrites it).
func TestMMA8PipeGolden(t *testing.T) {
	k, err := GEMVXQ(dtype.Q4_K, 384, 512, true, DefaultXQMMAPipeArm, XQEnds{NormIn: true, NormEps: 1e-6}, 0)
	require.NoError(t, err)
	path := filepath.Join("testdata", k.Name+".cu")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(k.Source), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./codegen -run TestMMA8PipeGolden -update")
	require.Equal(t, string(want), k.Source)
}

// TestMMA8PipeSchedule runs the generated kernel's copy and wait schedule
// for one warp, read back from the source, on warps of one to five
// super-blocks: with cp.async's rules (a commit group completes once at
// most P-2 newer ones are pending at a wait), every group must be read
// from a slot that holds it, whole, with its super-block's heads, and no
// slot may be refilled before it was read; every group of the warp's
// super-blocks is read once, in order, and nothing past them is copied.
// This checks the ring for every arm shape, including those no GPU run
// has timed.
func TestMMA8PipeSchedule(t *testing.T) {
	for _, ty := range []dtype.Type{dtype.Q4_K, dtype.Q6_K} {
		for _, s := range []string{"t512_r1_u2_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_w2_p2", "t256_r1_u1_s1_l1_m16_w2_p4",
			"t256_r1_u1_s1_l1_m16_w2_p8", "t256_r1_u2_s1_l1_m16_w2_p4", "t256_r1_u4_s1_l1_m16_w2_p2", "t128_r1_u1_s1_l1_m8_p4"} {
			a, err := ParseGEMVArm(s)
			require.NoError(t, err, s)
			k, err := GEMVXQ(ty, 256, 2048, false, a, XQEnds{}, 0)
			require.NoError(t, err, s)
			for nsb := 1; nsb <= 5; nsb++ {
				require.NoError(t, simulatePipe(k.Source, a.Stages, nsb), "%v %s, %d super-blocks", ty, s, nsb)
			}
		}
	}
}

var (
	pipeCopy    = regexp.MustCompile(`^cp_\w+\(wsa \+ (\d+) \* SB\b.*\(8 \* (ks|\(sb\)|\(sb \+ KS\)) \+ (\d+)\)`)
	pipeHead    = regexp.MustCompile(`^cp_\w+\(wsa \+ RING \* SB \+ (?:\(\(i \+ (\d)\) & 1\) \* WR \* HB \+ )?\(lane`)
	pipeConsume = regexp.MustCompile(`^const u8\* st = ws \+ (\d+) \* SB; // group 8·sb \+ (\d+)$`)
)

// simulatePipe executes the ring statements of a pipelined kernel's source
// for a warp of nsb super-blocks (see TestMMA8PipeSchedule).
func simulatePipe(src string, p, nsb int) error {
	type content struct{ sb, j, group int } // j -1: heads; group: the commit group of its copies (-1 while open)
	slots := map[int]*content{}
	heads := map[int]*content{}
	consumed := map[[2]int]bool{}
	committed, complete := 0, 0 // commit groups [0, committed) exist, [0, complete) have landed
	var open []*content
	next := [2]int{0, 0} // the group that must be read next
	write := func(m map[int]*content, slot, sb, j int) error {
		if sb >= nsb {
			return fmt.Errorf("copies super-block %d of %d", sb, nsb)
		}
		c := m[slot]
		if c != nil && (c.sb != sb || c.j != j) {
			last := [2]int{c.sb, c.j} // a group's slot is free once it was read, a head's once its last group was
			if j < 0 {
				last[1] = 7
			}
			if !consumed[last] {
				return fmt.Errorf("slot %d refilled with %d.%d before %d.%d was read (.-1: heads)", slot, sb, j, c.sb, c.j)
			}
		}
		if c == nil || c.sb != sb || c.j != j || c.group >= 0 {
			c = &content{sb, j, -1}
			m[slot] = c
			open = append(open, c)
		}
		return nil
	}
	lines := strings.Split(src, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "extern __shared__ uint4 psm[];") })
	loop := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "for (int i = 0; i < nsb; ++i) {" })
	if start < 0 || loop < 0 {
		return fmt.Errorf("no ring loop in the source")
	}
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	end := loop + 1
	for indent(lines[end]) > indent(lines[loop]) || strings.TrimSpace(lines[end]) != "}" {
		end++
	}
	run := func(body []string, i int) error {
		skip := -1 // the indent of a guard being skipped
		for n, l := range body {
			x := strings.TrimSpace(l)
			if skip >= 0 {
				if indent(l) == skip && x == "}" {
					skip = -1
				}
				continue
			}
			if x == "if (i + 1 < nsb) {" && i+1 >= nsb {
				skip = indent(l)
				continue
			}
			local := func(ref string) int {
				if ref == "(sb + KS)" {
					return i + 1
				}
				return i
			}
			switch m := [][]string{pipeCopy.FindStringSubmatch(x), pipeHead.FindStringSubmatch(x), pipeConsume.FindStringSubmatch(x)}; {
			case x == "CP_COMMIT();":
				for _, c := range open {
					c.group = committed
				}
				open = nil
				committed++
			case strings.HasPrefix(x, "CP_WAIT("):
				if !strings.HasPrefix(x, "CP_WAIT(P - 2);") {
					return fmt.Errorf("a wait other than P-2: %s", x)
				}
				complete = max(complete, committed-(p-2))
				if n+1 >= len(body) || !strings.HasPrefix(strings.TrimSpace(body[n+1]), "__syncwarp();") {
					return fmt.Errorf("a wait without __syncwarp after it")
				}
			case m[1] != nil:
				d := 0
				if m[1][1] != "" {
					d, _ = strconv.Atoi(m[1][1])
				}
				if err := write(heads, (i+d)&1, i+d, -1); err != nil {
					return err
				}
			case m[0] != nil:
				slot, _ := strconv.Atoi(m[0][1])
				j, _ := strconv.Atoi(m[0][3])
				if err := write(slots, slot, local(m[0][2]), j); err != nil {
					return err
				}
			case m[2] != nil:
				slot, _ := strconv.Atoi(m[2][1])
				j, _ := strconv.Atoi(m[2][2])
				c, h := slots[slot], heads[i&1]
				switch {
				case [2]int{i, j} != next:
					return fmt.Errorf("read group %d.%d, want %d.%d", i, j, next[0], next[1])
				case c == nil || c.sb != i || c.j != j:
					return fmt.Errorf("group %d.%d read from slot %d, which holds %+v", i, j, slot, c)
				case c.group < 0 || c.group >= complete:
					return fmt.Errorf("group %d.%d read before its copies landed", i, j)
				case h == nil || h.sb != i || h.group < 0 || h.group >= complete:
					return fmt.Errorf("group %d.%d read before its super-block's heads landed (%+v)", i, j, h)
				}
				consumed[[2]int{i, j}] = true
				next = [2]int{i + (j+1)/8, (j + 1) % 8}
			}
		}
		return nil
	}
	if err := run(lines[start:loop], 0); err != nil {
		return fmt.Errorf("before the loop: %w", err)
	}
	for i := range nsb {
		if err := run(lines[loop+1:end], i); err != nil {
			return fmt.Errorf("super-block %d: %w", i, err)
		}
	}
	if next != [2]int{nsb, 0} {
		return fmt.Errorf("read up to group %d.%d of %d super-blocks", next[0], next[1], nsb)
	}
	return nil
}
