package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/hub"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// compiledHelp is the help of every --compiled flag.
const compiledHelp = "load the kernels of a memra compile artifact (folder) with the CUDA driver alone, no NVRTC; " +
	"MODEL defaults to the one it was compiled from, and must be that model"

// addCompiledFlag registers --compiled.
func addCompiledFlag(f *pflag.FlagSet, dir *string) {
	f.StringVar(dir, "compiled", "", compiledHelp)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// modelFiles lists a model's files in name order, with their SHA-256
// when hash is set, and the SHA-256 of all their bytes in that order: the
// embedded model, a GGUF file (every shard of a split one) or the files of
// a checkpoint folder a model is made of (hub.IsCheckpointFile; links
// followed).
func modelFiles(arg string, hash bool) ([]cuda.ModelFile, string, error) {
	all := sha256.New()
	if modelIsBuiltin(arg) {
		b := builtin.Bytes()
		all.Write(b)
		return []cuda.ModelFile{{Name: builtin.Name + ".gguf", Size: int64(len(b)), SHA256: sha256Hex(b)}}, hex.EncodeToString(all.Sum(nil)), nil
	}
	var paths []string
	st, err := os.Stat(arg)
	if err != nil {
		return nil, "", err
	}
	switch dir, base := filepath.Split(arg); {
	case st.IsDir():
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, "", err
		}
		for _, e := range entries {
			p := filepath.Join(arg, e.Name())
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && hub.IsCheckpointFile(e.Name()) {
				paths = append(paths, p)
			}
		}
	default:
		if prefix, _, n, ok := gguf.ParseSplitName(base); ok && n > 1 {
			for i := range n {
				paths = append(paths, filepath.Join(dir, gguf.SplitName(prefix, i, n)))
			}
		} else {
			paths = []string{arg}
		}
	}
	slices.Sort(paths)
	var files []cuda.ModelFile
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, "", err
		}
		mf := cuda.ModelFile{Name: filepath.Base(p)}
		if hash {
			one := sha256.New()
			mf.Size, err = io.Copy(io.MultiWriter(one, all), f)
			mf.SHA256 = hex.EncodeToString(one.Sum(nil))
		} else {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				mf.Size = fi.Size()
			}
		}
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", p, err)
		}
		files = append(files, mf)
	}
	sum := ""
	if hash {
		sum = hex.EncodeToString(all.Sum(nil))
	}
	return files, sum, nil
}

// openCompiled opens --compiled DIR and the model it is for: modelArg, or
// without one the hf: spec or path the manifest names. The model's files
// must be the compiled model's (sizes first, then SHA-256). It returns
// the artifact and the argument to open the model with.
func openCompiled(cmd *cobra.Command, dir, modelArg string) (*cuda.Artifact, string, error) {
	a, err := cuda.OpenArtifact(dir)
	if err != nil {
		return nil, "", err
	}
	if modelArg == "" {
		modelArg = a.Manifest.ModelSpec
		if modelArg == "" {
			modelArg = a.Manifest.Model
		}
	}
	path := modelArg
	if !modelIsBuiltin(modelArg) {
		if path, err = modelPath(cmd, modelArg); err != nil {
			return nil, "", err
		}
	}
	sizes, _, err := modelFiles(path, false)
	if err != nil {
		return nil, "", fmt.Errorf("--compiled %s: model %s: %w", dir, modelArg, err)
	}
	if err := a.CheckModel(sizes); err != nil {
		return nil, "", err
	}
	hashed, _, err := modelFiles(path, true)
	if err != nil {
		return nil, "", err
	}
	if err := a.CheckModel(hashed); err != nil {
		return nil, "", err
	}
	return a, path, nil
}

// useArtifact makes g's backends load a's kernels, in the configuration
// it was compiled for. A flag of cmd that names another one (--context,
// --kv-cache, --batch-invariant and, where given, the sequences flag) is
// refused.
func (g *gpuOptions) useArtifact(cmd *cobra.Command, a *cuda.Artifact, seqFlag string, seqs int) error {
	m := &a.Manifest
	f := cmd.Flags()
	changed := func(name string) bool { fl := f.Lookup(name); return fl != nil && fl.Changed }
	if changed("context") && g.context != m.Context {
		return fmt.Errorf("--context %d: the artifact in %s was compiled for %d positions (memra compile --context)", g.context, a.Dir, m.Context)
	}
	if changed("kv-cache") && !strings.EqualFold(g.kvCache, m.Cache) {
		return fmt.Errorf("--kv-cache %s: the artifact in %s was compiled for %s (memra compile --cache)", g.kvCache, a.Dir, m.Cache)
	}
	if seqFlag != "" && changed(seqFlag) && seqs != m.MaxSeqs {
		return fmt.Errorf("--%s %d: the artifact in %s was compiled for %d sequences (memra compile --max-seqs)", seqFlag, seqs, a.Dir, m.MaxSeqs)
	}
	if changed("batch-invariant") {
		if err := artifactNumerics(a, g.batchInvariant); err != nil {
			return err
		}
	}
	g.artifact = a
	return nil
}

// artifactNumerics refuses --batch-invariant v where it names another
// numerical class than the artifact a was compiled in.
func artifactNumerics(a *cuda.Artifact, v string) error {
	want, err := a.Manifest.NumericsClass()
	if err != nil {
		return err
	}
	n, err := invariance(v)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("--batch-invariant %s: the artifact in %s was compiled for %s (memra compile --batch-invariant)", n, a.Dir, want)
	}
	return nil
}

// artifactOptions pins o to the artifact's configuration.
func (g gpuOptions) artifactOptions(o cuda.BackendOptions) cuda.BackendOptions {
	if a := g.artifact; a != nil {
		o.Artifact = a
		o.MaxSeqs, o.Context, o.PrefillTokens, o.Cache = a.Manifest.MaxSeqs, a.Manifest.Context, a.Manifest.PrefillTokens, a.Manifest.Cache
		o.Numerics, _ = a.Manifest.NumericsClass() // OpenArtifact checked it
	}
	return o
}
