package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/tunedb"
)

var errTunedb = errors.New("tunedb")

func init() {
	cmd := &cobra.Command{
		Use:   "tunedb",
		Short: "inspect and ship per-card kernel arms: list, show, export, import, diff",
		Long: "The tunedb holds, per card (device key) and kernel family and shape class, the arm `memra autotune`\n" +
			"chose. Shipped defaults are embedded in the binary; user entries in os.UserConfigDir()/memra/tunedb\n" +
			"override them. A card with no entry uses the nearest card of the same architecture.",
	}
	cmd.PersistentFlags().String("dir", "", "user tunedb folder (default os.UserConfigDir()/memra/tunedb)")
	list := &cobra.Command{Use: "list", Short: "list the cards with entries", Args: cobra.NoArgs, RunE: tunedbList}
	show := &cobra.Command{Use: "show KEY", Short: "show a card's entries (user over shipped)", Args: cobra.ExactArgs(1), RunE: tunedbShow}
	export := &cobra.Command{Use: "export KEY", Short: "write a card's merged entries as JSON", Args: cobra.ExactArgs(1), RunE: tunedbExport}
	export.Flags().StringP("output", "o", "", "file to write (default stdout)")
	imp := &cobra.Command{Use: "import FILE…", Short: "validate tunedb files and merge them into the user tunedb", Args: cobra.MinimumNArgs(1), RunE: tunedbImport}
	diff := &cobra.Command{Use: "diff A B", Short: "compare two cards' entries (device keys or JSON files)", Args: cobra.ExactArgs(2), RunE: tunedbDiff}
	cmd.AddCommand(list, show, export, imp, diff)
	rootCmd.AddCommand(cmd)
}

func openTunedb(cmd *cobra.Command) (*tunedb.DB, error) {
	dir, _ := cmd.Flags().GetString("dir")
	return tunedb.Open(dir)
}

func tunedbList(cmd *cobra.Command, _ []string) error {
	db, err := openTunedb(cmd)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "key\tname\tarch\tSMs\tGiB\tshipped\tuser")
	for _, d := range db.Devices() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", d.Key, d.Device.Name, d.Device.Arch(), d.Device.SMs, d.Device.MemGiB, d.Shipped, d.User)
	}
	return tw.Flush()
}

// fileArg returns the file a KEY or path argument names.
func fileArg(db *tunedb.DB, arg string) (*tunedb.File, map[string]tunedb.Origin, error) {
	if f, origins, ok := db.File(arg); ok {
		return f, origins, nil
	}
	if _, err := os.Stat(arg); err == nil {
		f, err := tunedb.ReadFile(arg)
		return f, nil, err
	}
	if _, err := tunedb.ParseKey(arg); err != nil {
		return nil, nil, err
	}
	return nil, nil, fmt.Errorf("%w: no entries for %s (see `memra tunedb list`)", errTunedb, arg)
}

func tunedbShow(cmd *cobra.Command, args []string) error {
	db, err := openTunedb(cmd)
	if err != nil {
		return err
	}
	f, origins, err := fileArg(db, args[0])
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s (%s, %s, %d SMs, %d GiB)\n", f.Key, f.Device.Name, f.Device.Arch(), f.Device.SMs, f.Device.MemGiB)
	fmt.Fprintln(tw, "family\tclass\tarm\tµs\trunner-up\tµs\tdefault µs\ttried\tfailed\tdate\tfrom")
	for _, e := range f.Entries {
		ru, rt, dt := "-", "-", "-"
		if e.RunnerUp != nil {
			ru, rt = e.RunnerUp.ArmName, fmt.Sprintf("%.2f", e.RunnerUp.TimeUS)
		}
		if e.Default != nil {
			dt = fmt.Sprintf("%.2f", e.Default.TimeUS)
		}
		from := string(origins[e.Family+"/"+e.Class])
		if from == "" {
			from = "file"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Family, e.Class, e.ArmName, e.TimeUS, ru, rt, dt, e.Tried, len(e.Failed), e.Date, from)
	}
	return tw.Flush()
}

func tunedbExport(cmd *cobra.Command, args []string) error {
	db, err := openTunedb(cmd)
	if err != nil {
		return err
	}
	f, _, err := fileArg(db, args[0])
	if err != nil {
		return err
	}
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	if o, _ := cmd.Flags().GetString("output"); o != "" {
		return os.WriteFile(o, b, 0o644)
	}
	_, err = cmd.OutOrStdout().Write(b)
	return err
}

func tunedbImport(cmd *cobra.Command, args []string) error {
	db, err := openTunedb(cmd)
	if err != nil {
		return err
	}
	for _, a := range args {
		f, err := tunedb.ReadFile(a)
		if err != nil {
			return err
		}
		p, err := db.Import(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "imported %d entries for %s into %s\n", len(f.Entries), f.Key, p)
	}
	return nil
}

func tunedbDiff(cmd *cobra.Command, args []string) error {
	db, err := openTunedb(cmd)
	if err != nil {
		return err
	}
	a, _, err := fileArg(db, args[0])
	if err != nil {
		return err
	}
	b, _, err := fileArg(db, args[1])
	if err != nil {
		return err
	}
	_, err = tunedb.WriteDiff(cmd.OutOrStdout(), a, b)
	return err
}
