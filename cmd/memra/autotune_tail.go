package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/tunedb"
)

// tailVerifyRows is the batch at which the narrow tails are confirmed: a
// speculative verify step of one stream and 4 drafts (memra run --spec's
// default), in a backend of that many sequences, as the narrow programs
// are lowered.
const tailVerifyRows = 5

// tailGroups are the confirmation groups of family "tail", which has no
// kernels of its own to time: each one-sequence tail on its own at batch
// 1, the two narrow tails together at tailVerifyRows. Each entry turns its
// class on; its times are filled in from the verdict (tailEntries).
func tailGroups() []autotune.ConfirmGroup {
	narrow := autotune.ConfirmGroup{Name: "narrow tails (verify steps)", Batch: tailVerifyRows}
	var out []autotune.ConfirmGroup
	for _, c := range codegen.TailClasses {
		e := tunedb.Entry{Family: "tail", Class: c, Arm: codegen.TailArm{On: true}.Point(), ArmName: codegen.TailArm{On: true}.String(), Tried: 2}
		if codegen.NarrowTail(c) {
			narrow.Entries = append(narrow.Entries, e)
			continue
		}
		out = append(out, autotune.ConfirmGroup{Name: "tail " + c, Batch: 1, Entries: []tunedb.Entry{e}})
	}
	return append(out, narrow)
}

// tailsThatLower keeps the groups whose entries change the decode program
// the model lowers at the group's batch: a class with no place in the
// model's program (post_norm where the model has no post-norms) lowers
// the same kernels as without it, and two backends of a large model
// would be built to time the same steps.
func tailsThatLower(path string, base codegen.ArmPicker, groups []autotune.ConfirmGroup, logf func(string, ...any)) ([]autotune.ConfirmGroup, error) {
	m, err := load.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	kernels := func(seqs int, pick codegen.ArmPicker) ([]string, error) {
		d, _, err := cuda.Lower(m, cuda.BackendOptions{MaxSeqs: seqs, Context: confirmPrompt + confirmGen + 1, PrefillTokens: confirmPrompt, Pick: pick})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, ln := range d.Launches {
			names = append(names, d.Kernels[ln.KernelFor(seqs)].Name)
		}
		return names, nil
	}
	var out []autotune.ConfirmGroup
	plain := map[int][]string{} // the program without any group's entries, by batch
	for _, g := range groups {
		without, ok := plain[g.Batch]
		if !ok {
			if without, err = kernels(g.Batch, base); err != nil {
				return nil, fmt.Errorf("autotune: lowering %s: %w", g.Name, err)
			}
			plain[g.Batch] = without
		}
		with, err := kernels(g.Batch, autotune.Overlay(base, g.Entries))
		if err != nil {
			return nil, fmt.Errorf("autotune: lowering %s: %w", g.Name, err)
		}
		if slices.Equal(with, without) {
			logf("%s: the model's decode program at batch %d is the same with it; not timed", g.Name, g.Batch)
			continue
		}
		out = append(out, g)
	}
	return out, nil
}

// tailEntries returns the entries of the groups verdicts kept, each timed
// as a whole step with it (µs) beside the step without it (runner-up "off").
func tailEntries(verdicts []autotune.Confirmed, date, ver string, driver int) []tunedb.Entry {
	var out []tunedb.Entry
	off := codegen.TailArm{}
	for _, v := range verdicts {
		if !v.Keep {
			continue
		}
		for _, e := range v.Group.Entries {
			e.TimeUS = v.Result.Tuned.TimeUS
			e.RunnerUp = &tunedb.Timed{Arm: off.Point(), ArmName: off.String(), TimeUS: v.Result.Baseline.TimeUS}
			e.Date, e.MemraVersion, e.Driver = date, ver, driver
			out = append(out, e)
		}
	}
	return out
}

// runAutotuneTails is `memra autotune MODEL --families tail`: each tail
// class judged in whole decode steps of MODEL (autotune.Confirm against
// the card's tunedb), the kept ones written as the sweep's entries are.
func runAutotuneTails(cmd *cobra.Command, args []string, confirm bool) error {
	f := cmd.Flags()
	out := cmd.OutOrStdout()
	if list, _ := f.GetBool("list"); list {
		for _, g := range tailGroups() {
			fmt.Fprintf(out, "%-48s batch %d, %d entries\n", g.Name, g.Batch, len(g.Entries))
		}
		return nil
	}
	if len(args) != 1 || !confirm {
		return fmt.Errorf("%w: family tail has no kernels to time: it is judged in whole decode steps, which needs a MODEL and --confirm", errAutotune)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return fmt.Errorf("autotune needs a GPU: %w", err)
	}
	info := dev.Info()
	_ = dev.Close() // the confirmation's backends take the card
	key := cuda.DeviceKey(info)
	db, err := tunedb.Open("")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "autotune tail classes of %s on %s (%s, driver %d); device key %s\n", args[0], info.Name, info.Arch(), info.DriverVersion, key)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var until time.Time
	if budget, _ := f.GetDuration("budget"); budget > 0 {
		until = time.Now().Add(budget)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", a...) }
	base := cuda.TunedPicker(db, key)
	groups, err := tailsThatLower(args[0], base, tailGroups(), logf)
	if err != nil {
		return err
	}
	verdicts, err := confirmE2E(ctx, until, args[0], base, groups, logf)
	writeVerdicts(out, verdicts)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "memra: %v; the tails it did not judge are not written\n", err)
	}
	entries := tailEntries(verdicts, time.Now().UTC().Format("2006-01-02"), buildVersion(), info.DriverVersion)
	if werr := writeEntries(cmd, db, key, entries); werr != nil {
		return werr
	}
	return err
}

// writeEntries writes entries into the user tunedb (--write-user) and a
// shipped-defaults folder (--write-shipped), merged with what is there.
func writeEntries(cmd *cobra.Command, db *tunedb.DB, key tunedb.DeviceKey, entries []tunedb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	f, out := cmd.Flags(), cmd.OutOrStdout()
	if wu, _ := f.GetBool("write-user"); wu {
		p, err := db.Put(key, entries)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "tunedb: %d entries written to %s\n", len(entries), p)
	}
	if dir, _ := f.GetString("write-shipped"); dir != "" {
		file := tunedb.NewFile(key)
		path := filepath.Join(dir, key.String()+".json")
		if _, err := os.Stat(path); err == nil {
			if file, err = tunedb.ReadFile(path); err != nil {
				return err
			}
		}
		file.Merge(entries)
		p, err := tunedb.WriteDir(dir, file)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "tunedb: %d entries written to %s\n", len(entries), p)
	}
	return nil
}
