package main

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/ir/dtype"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/tunedb"
)

// cpuKey is this machine's CPU tunedb key for a backend of threads threads
// (0: all cores).
func cpuKey(threads int) tunedb.CPUKey {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	return tunedb.CPUKey{Model: cpu.ModelName(), ISA: dtype.Q8Kernels(), Cores: threads}
}

// cpuTiles returns the blocking of each int8 product from the tunedb: this
// CPU's entries, else the nearest CPU's of the same instruction set, else
// the family default.
func cpuTiles(threads int) cpu.TilesFunc {
	key := cpuKey(threads)
	return func(t dtype.Type, n, k int) cpu.Tiles {
		arm, _ := tunedb.CPULookup(key, cpu.ProductClass(t, n, k))
		return cpu.Tiles{TokenBlock: arm["token_block"], TokenTile: arm["token_tile"]}
	}
}

// cpuProductClass is one product shape a model multiplies.
type cpuProductClass struct {
	t    dtype.Type
	n, k int
}

// cpuClasses lists the distinct products of m's layers' matrices that have
// an int8 or float product, largest first. The output projection is left
// out: it multiplies one token a sequence, whatever the blocking.
func cpuClasses(m *load.Model) []cpuProductClass {
	seen := map[cpuProductClass]bool{}
	for name, t := range m.Tensors {
		if len(t.Shape) != 2 || !dtype.Packable(t.Type, t.Shape[0]) || name == "output.weight" || name == "token_embd.weight" {
			continue
		}
		seen[cpuProductClass{t.Type, t.Shape[1], t.Shape[0]}] = true
	}
	var out []cpuProductClass
	for c := range seen {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].n*out[i].k, out[j].n*out[j].k; a != b {
			return a > b
		}
		return cpu.ProductClass(out[i].t, out[i].n, out[i].k) < cpu.ProductClass(out[j].t, out[j].n, out[j].k)
	})
	return out
}

// runAutotuneCPU tunes the blocking of the CPU's int8 products (family
// cpu_product) for the products of MODEL: each arm is timed on one thread,
// in thread CPU time, with --prefill tokens, --reps rounds; the fastest
// goes to the CPU tunedb.
func runAutotuneCPU(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	out := cmd.OutOrStdout()
	if len(args) != 1 {
		return fmt.Errorf("%w: --device cpu tunes the products of a MODEL", errAutotune)
	}
	m, err := load.Open(args[0])
	if err != nil {
		return err
	}
	defer m.Close()
	prefill, _ := f.GetInt("prefill")
	reps, _ := f.GetInt("reps")
	budget, _ := f.GetDuration("budget")
	classes := cpuClasses(m)
	if len(classes) == 0 {
		return fmt.Errorf("%w: %s has no matrix with an int8 or float product", errAutotune, args[0])
	}
	if list, _ := f.GetBool("list"); list {
		for _, c := range classes {
			fmt.Fprintf(out, "%s/%-40s %d arms\n", tunedb.CPUFamily, cpu.ProductClass(c.t, c.n, c.k), len(cpu.TileArms(c.t, prefill)))
		}
		return nil
	}
	threads, _ := f.GetInt("threads")
	key := cpuKey(threads)
	fmt.Fprintf(out, "autotune: %s (%s), %d products at %d tokens, budget %v\n", key.Model, key.ISA, len(classes), prefill, budget)
	start := time.Now()
	var entries []tunedb.CPUEntry
	for i, c := range classes {
		left := budget - time.Since(start)
		if left <= 0 {
			fmt.Fprintf(out, "autotune: budget spent; %d products not tuned\n", len(classes)-i)
			break
		}
		arms := cpu.TileArms(c.t, prefill)
		// rounds that fit this task's share of what is left: one round
		// first, to time it
		times, err := cpu.TimeProduct(c.t, c.n, c.k, prefill, arms, 1)
		if err != nil {
			return err
		}
		var round time.Duration
		for _, d := range times {
			round += d
		}
		if r := int(left / time.Duration(len(classes)-i) / max(round, 1)); r > 1 {
			if times, err = cpu.TimeProduct(c.t, c.n, c.k, prefill, arms, min(reps, r)); err != nil {
				return err
			}
		}
		order := make([]int, len(arms))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return times[order[a]] < times[order[b]] })
		arm := func(j int) map[string]int {
			return map[string]int{"token_block": arms[j].TokenBlock, "token_tile": arms[j].TokenTile}
		}
		us := func(j int) float64 { return float64(times[j].Nanoseconds()) / 1000 }
		best := order[0]
		e := tunedb.CPUEntry{Family: tunedb.CPUFamily, Class: cpu.ProductClass(c.t, c.n, c.k), Arm: arm(best),
			ArmName: tunedb.CPUArmName(arm(best)), TimeUS: us(best), Tried: len(arms),
			Date: time.Now().UTC().Format("2006-01-02"), MemraVersion: buildVersion()}
		if len(order) > 1 {
			e.RunnerUp = &tunedb.CPUTimed{Arm: arm(order[1]), ArmName: tunedb.CPUArmName(arm(order[1])), TimeUS: us(order[1])}
		}
		e.Default = &tunedb.CPUTimed{Arm: arm(0), ArmName: tunedb.CPUArmName(arm(0)), TimeUS: us(0)} // arms[0] is the default
		entries = append(entries, e)
		fmt.Fprintf(out, "%s/%-28s %-8s %9.1f µs  default %-8s %9.1f µs  ×%.3f  (%d arms)\n", tunedb.CPUFamily, e.Class,
			e.ArmName, e.TimeUS, e.Default.ArmName, e.Default.TimeUS, e.Default.TimeUS/e.TimeUS, len(arms))
	}
	if len(entries) == 0 {
		return fmt.Errorf("%w: nothing tuned", errAutotune)
	}
	if user, _ := f.GetBool("write-user"); user {
		db, err := tunedb.Open("")
		if err != nil {
			return err
		}
		p, err := db.PutCPU(key, entries)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "autotune: wrote %s\n", p)
	}
	if dir, _ := f.GetString("write-shipped"); dir != "" {
		p, err := tunedb.WriteCPU(dir, key, entries)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "autotune: wrote %s\n", p)
	}
	return nil
}
