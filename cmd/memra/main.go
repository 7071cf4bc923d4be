// Command memra is the memra CLI: run, serve, compile, autotune, bench,
// synth, tokenize and inspect models.
//
// Configuration comes, highest first, from flags, MEMRA_* environment
// variables (MEMRA_MAX_TOKENS for --max-tokens), a config file (--config, or
// memra.yaml in the working directory), and the defaults. This package is the
// only importer of viper.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// version is set by the linker (-X main.version=…) for releases; memra
// reports it with the build's VCS revision (buildVersion).
var version = "dev"

// rootCmd is the top command; each subcommand file adds itself in init.
var rootCmd = &cobra.Command{
	Use:           "memra",
	Short:         "memra: an LLM inference engine built as a kernel compiler plus runtime",
	Version:       buildVersion(),
	SilenceUsage:  true,
	SilenceErrors: true,
	PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
		return bindConfig(cmd)
	},
}

func init() {
	rootCmd.PersistentFlags().String("config", "", "config file (YAML, TOML or JSON); default ./memra.yaml if present")
}

// bindConfig fills every flag the user did not set from MEMRA_* environment
// variables and the config file, so that flags > env > file > defaults.
func bindConfig(cmd *cobra.Command) error {
	v := viper.New()
	v.SetEnvPrefix("MEMRA")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	if f, _ := cmd.Flags().GetString("config"); f != "" {
		v.SetConfigFile(f)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config file %s: %w", f, err)
		}
	} else if _, err := os.Stat("memra.yaml"); err == nil {
		v.SetConfigFile("memra.yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config file memra.yaml: %w", err)
		}
	}
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil || f.Name == "config" {
			return
		}
		if !v.IsSet(f.Name) {
			return
		}
		val := v.Get(f.Name)
		var s string
		switch x := val.(type) {
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			s = strings.Join(parts, ",")
		default:
			s = fmt.Sprint(x)
		}
		if err := cmd.Flags().Set(f.Name, s); err != nil {
			firstErr = fmt.Errorf("--%s from environment/config (%q): %w", f.Name, s, err)
		}
	})
	return firstErr
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "memra:", err)
		os.Exit(1)
	}
}
