package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime/hub"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

func init() {
	rootCmd.AddCommand(newPullCmd(), newLsCmd())
}

// modelHelp describes a MODEL argument, for the commands' long help.
const modelHelp = `MODEL is a GGUF file (any shard of a split one), a Hugging Face checkpoint folder,
or an hf: spec fetched into the Hugging Face cache (docs/DEPLOY.md): hf:OWNER/REPO (the
checkpoint), hf:OWNER/REPO:FILE.gguf or hf:OWNER/REPO:Q4_K_M (a GGUF file or quantisation),
with @REVISION after the repository for another branch, tag or commit.`

// openModel opens a model argument: "" or the built-in name is the
// embedded default model, an hf: spec is fetched first (modelPath).
func openModel(cmd *cobra.Command, arg string) (*load.Model, error) {
	if arg == "" || arg == builtin.Name {
		return builtin.Open()
	}
	path, err := modelPath(cmd, arg)
	if err != nil {
		return nil, err
	}
	return load.Open(path)
}

// modelPath turns a model argument into a local path: an hf: spec is
// fetched into the cache (progress bars and notices on stderr), anything
// else is a path already.
func modelPath(cmd *cobra.Command, arg string) (string, error) {
	if !hub.IsSpec(arg) {
		return arg, nil
	}
	snap, err := fetchSpec(cmd, arg)
	if err != nil {
		return "", err
	}
	return snap.Path, nil
}

// fetchSpec fetches an hf: spec with a progress bar per file on stderr.
func fetchSpec(cmd *cobra.Command, spec string) (*hub.Snapshot, error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	w := cmd.ErrOrStderr()
	sp, err := hub.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	c, err := hub.FromEnv()
	if err != nil {
		return nil, err
	}
	c.UserAgent = "memra/" + buildVersion()
	c.Progress = newBarProgress(w)
	c.Logf = func(format string, args ...any) { fmt.Fprintf(w, "memra: "+format+"\n", args...) }
	snap, err := c.Fetch(ctx, sp)
	if err != nil {
		return nil, err
	}
	if snap.Downloaded > 0 {
		fmt.Fprintf(w, "%s: downloaded %s into %s\n", sp, formatBytes(snap.Downloaded), snap.Dir)
	}
	return snap, nil
}

// barProgress shows a byte progress bar per file being downloaded.
type barProgress struct {
	w    io.Writer
	mu   sync.Mutex
	bars map[string]*progressbar.ProgressBar
}

func newBarProgress(w io.Writer) *barProgress {
	return &barProgress{w: w, bars: map[string]*progressbar.ProgressBar{}}
}

// Update implements hub.Progress.
func (p *barProgress) Update(file string, size, have int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.bars[file]
	if b == nil {
		b = progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(file),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
		p.bars[file] = b
	}
	_ = b.Set64(have)
}

// Done implements hub.Progress.
func (p *barProgress) Done(file string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.bars[file]; b != nil {
		if err == nil {
			_ = b.Finish()
		} else {
			_ = b.Exit()
			fmt.Fprintln(p.w)
		}
		delete(p.bars, file)
	}
}

// formatBytes writes a size with a binary unit.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newPullCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pull SPEC",
		Short: "Download an hf: model into the Hugging Face cache",
		Long: `Download the files of an hf: spec (hf:OWNER/REPO, hf:OWNER/REPO:FILE.gguf,
hf:OWNER/REPO:Q4_K_M, @REVISION after the repository) into the Hugging Face cache
($HF_HUB_CACHE, default $HF_HOME/hub, HF_HOME defaulting to ~/.cache/huggingface), and
print the path the other commands open. Files already cached are not fetched again;
an interrupted download resumes. HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE are honoured.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !hub.IsSpec(args[0]) {
				return fmt.Errorf("pull: %q is not an hf: spec (hf:OWNER/REPO[:FILE.gguf|:QUANT])", args[0])
			}
			snap, err := fetchSpec(cmd, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: commit %s, %d files\n", snap.Spec, snap.Commit, len(snap.Files))
			fmt.Fprintln(cmd.OutOrStdout(), snap.Path)
			return nil
		},
	}
}

func newLsCmd() *cobra.Command {
	var files bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the models in the Hugging Face cache",
		Long: `List the model repositories of the Hugging Face cache (the one memra pull and hf:
specs write, shared with the hub's own tools): their size on disk, the revisions and
commits cached, unfinished downloads and where they are. --files lists each commit's files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := hub.FromEnv()
			if err != nil {
				return err
			}
			repos, err := c.List()
			if err != nil {
				return err
			}
			return writeList(cmd.OutOrStdout(), c.Cache, repos, files)
		},
	}
	cmd.Flags().BoolVar(&files, "files", false, "list every cached commit's files")
	return cmd
}

// writeList prints the cache listing.
func writeList(out io.Writer, cache string, repos []hub.CachedRepo, files bool) error {
	if len(repos) == 0 {
		_, err := fmt.Fprintf(out, "no models in %s\n", cache)
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REPO\tSIZE\tREVISIONS\tCOMMITS\tPARTIAL\tPATH")
	for _, r := range repos {
		var refs []string
		for rev, commit := range r.Refs {
			refs = append(refs, rev+"="+short(commit))
		}
		slices.Sort(refs)
		var commits []string
		for _, s := range r.Snapshots {
			commits = append(commits, short(s.Commit))
		}
		partial := "-"
		if r.Partial > 0 {
			partial = formatBytes(r.Partial)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Repo, formatBytes(r.Size), orDash(strings.Join(refs, ",")),
			orDash(strings.Join(commits, ",")), partial, r.Dir)
		if files {
			for _, s := range r.Snapshots {
				for _, f := range s.Files {
					fmt.Fprintf(w, "  %s\t%s\t\t%s\t\t\n", f.Path, formatBytes(f.Size), short(s.Commit))
				}
			}
		}
	}
	return w.Flush()
}

func short(commit string) string { return commit[:min(len(commit), 12)] }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
