package main

import (
	"bytes"
	"fmt"
	"github.com/spf13/cobra"

	"github.com/spf13/pflag"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/load"
)

// specOptions are the speculative decoding flags of run and serve.
type specOptions struct {
	mode     string // off or ngram; draft when a draft model is given
	draft    string // the draft model
	maxDraft int
	maxBatch int
}

const specHelp = "speculative decoding: off, or ngram (drafts from earlier text: the continuation of the latest earlier occurrence of the last tokens); --draft MODEL drafts with a model instead"

// addSpecFlags registers --spec, --draft, --spec-max-draft and --spec-max-batch.
func addSpecFlags(f *pflag.FlagSet, o *specOptions) {
	f.StringVar(&o.mode, "spec", "off", specHelp)
	f.StringVar(&o.draft, "draft", "", "draft model for speculative decoding (GGUF or Hugging Face folder) with the target's vocabulary; implies --spec draft")
	f.IntVar(&o.maxDraft, "spec-max-draft", runtime.DefaultSpecMaxDraft, "most tokens drafted a step (1 to 16); each sequence adapts below it to its acceptance")
	f.IntVar(&o.maxBatch, "spec-max-batch", runtime.DefaultSpecMaxBatch, "speculate while at most this many sequences run")
}

var specLimits = map[string]flagLimit{
	"spec-max-draft": {min: 1, max: 16},
	"spec-max-batch": atLeast(1, ""),
}

// on reports whether the flags ask for speculative decoding.
func (o specOptions) on() bool { return (o.mode != "" && o.mode != "off") || o.draft != "" }

// config builds the engine's SpecConfig for target: with a draft model it
// is opened, checked to share target's vocabulary token for token, and
// given a backend on device; release closes the draft model's file once
// the engine (which owns the draft backend) is closed.
func (o specOptions) config(cmd *cobra.Command, target *load.Model, device string, threads, maxSeqs int, kv gpuOptions) (cfg runtime.SpecConfig, release func(), err error) {
	release = func() {}
	cfg = runtime.SpecConfig{Mode: o.mode, MaxDraft: o.maxDraft, MaxBatch: o.maxBatch}
	if o.draft == "" {
		if o.mode == "draft" {
			return cfg, release, fmt.Errorf("--spec draft needs --draft MODEL")
		}
		return cfg, release, cfg.Check()
	}
	if o.mode != "off" && o.mode != "draft" {
		return cfg, release, fmt.Errorf("--draft %s drafts with a model: not with --spec %s", o.draft, o.mode)
	}
	cfg.Mode = "draft"
	dm, err := openModel(cmd, o.draft)
	if err != nil {
		return cfg, release, fmt.Errorf("--draft: %w", err)
	}
	if err := sameVocabulary(target, dm); err != nil {
		dm.Close()
		return cfg, release, fmt.Errorf("--draft %s: %w", o.draft, err)
	}
	kv.context = 0    // the draft model's own context
	kv.artifact = nil // a --compiled artifact holds the target's kernels: the draft model compiles its own
	b, err := newBackend(dm, device, threads, maxSeqs, kv)
	if err != nil {
		dm.Close()
		return cfg, release, fmt.Errorf("--draft: %w", err)
	}
	cfg.Draft = b
	if err := cfg.Check(); err != nil {
		b.Close()
		dm.Close()
		return cfg, release, err
	}
	return cfg, func() { dm.Close() }, nil
}

// sameVocabulary checks that draft tokenizes as target does: the same
// token bytes at every id.
func sameVocabulary(target, draft *load.Model) error {
	a, b := target.Tokenizer, draft.Tokenizer
	if a == nil || b == nil {
		return fmt.Errorf("both models need a tokenizer")
	}
	if a.VocabSize() != b.VocabSize() {
		return fmt.Errorf("vocabulary of %d tokens, the target's has %d", b.VocabSize(), a.VocabSize())
	}
	for id := range int32(a.VocabSize()) {
		if a.TokenText(id) != b.TokenText(id) || !bytes.Equal(a.TokenBytes(id), b.TokenBytes(id)) {
			return fmt.Errorf("token %d is %q, the target's %q: not the same vocabulary", id, b.TokenText(id), a.TokenText(id))
		}
	}
	return nil
}
