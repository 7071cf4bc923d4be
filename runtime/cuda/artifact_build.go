package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/load"
)

// ArtifactKernels lowers m as NewBackend would with opts (the environment
// switches applied) and returns both programs, every kernel a backend of
// that configuration may load (the programs', the one-sequence decode
// program's (one.go), the embedding program's with opts.Embedding, and the
// cuBLASLt prefill arm's helpers, each once, in first-use order). Kernels compile with no NVRTC options: a kernel
// that triggers the next one early says so in its own source.
func ArtifactKernels(m *load.Model, opts BackendOptions) (dec, pre *codegen.Program, ks []*codegen.Kernel, err error) {
	if err := envOptions(&opts); err != nil {
		return nil, nil, nil, err
	}
	progs, err := lowerPrograms(m, opts, 0, m.HParams.Layers)
	if err != nil {
		return nil, nil, nil, err
	}
	dec, pre = progs.decode, progs.prefill
	var oneKs []*codegen.Kernel
	if progs.one != nil {
		oneKs = progs.one.Kernels
	}
	plan, err := planPrefill(pre, opts.PrefillTokens)
	if err != nil {
		return nil, nil, nil, err
	}
	helpers := plan.kernels()
	slices.SortFunc(helpers, func(a, b *codegen.Kernel) int { return strings.Compare(a.Name, b.Name) })
	var emb []*codegen.Kernel
	if opts.Embedding { // the embedding program (embed.go): mostly the prefill program's kernels
		p, _, err := lowerHidden(m, opts)
		if err != nil {
			return nil, nil, nil, err
		}
		emb = p.Kernels
	}
	seen := map[string]bool{}
	for _, k := range slices.Concat(dec.Kernels, oneKs, pre.Kernels, emb, helpers) {
		if !seen[k.Name] {
			seen[k.Name] = true
			ks = append(ks, k)
		}
	}
	return dec, pre, ks, nil
}

// SplitTargets reads memra compile's --arch list: sm_XY[a] entries are
// cubin targets, a compute_XY entry names the PTX target, which is
// otherwise the lowest compute capability of the cubin targets (the
// fallback the driver compiles for any card from there on).
func SplitTargets(list []string) (cubins []string, ptx string, err error) {
	low := -1
	for _, t := range list {
		virtual, major, minor, _, err := parseArch(t)
		if err != nil {
			return nil, "", err
		}
		cc := major*10 + minor
		switch {
		case virtual && ptx != "" && ptx != t:
			return nil, "", fmt.Errorf("%w: two PTX targets, %s and %s", ErrArg, ptx, t)
		case virtual:
			ptx = t
		case !slices.Contains(cubins, t):
			cubins = append(cubins, t)
			if low < 0 || cc < low {
				low = cc
			}
		}
	}
	if ptx == "" && low >= 0 {
		ptx = fmt.Sprintf("compute_%d", low)
	}
	if ptx == "" {
		return nil, "", fmt.Errorf("%w: no target architecture", ErrArg)
	}
	return cubins, ptx, nil
}

// CompileImages compiles every kernel for each cubin target and for the
// PTX target, through the disk cache, and returns kernel → target →
// image (cubins as NVRTC writes them, PTX without its NUL). progress, when
// set, is told of each image done.
func CompileImages(cache *Cache, ks []*codegen.Kernel, cubins []string, ptx string, progress func(done, total int)) (map[string]map[string][]byte, error) {
	type job struct {
		k      *codegen.Kernel
		target string
	}
	var jobs []job
	for _, k := range ks {
		for _, t := range append(slices.Clone(cubins), ptx) {
			jobs = append(jobs, job{k, t})
		}
	}
	out := map[string]map[string][]byte{}
	for _, k := range ks {
		out[k.Name] = map[string][]byte{}
	}
	var (
		mu    sync.Mutex
		first error
		done  int
	)
	workers := 1
	if cache.NV.Concurrent() {
		workers = runtime.NumCPU()
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				img, err := compileImage(cache, j.k, j.target)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				out[j.k.Name][j.target] = img
				done++
				if progress != nil {
					progress(done, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	return out, first
}

// compileImage compiles one kernel for one target, refusing a cubin
// target for which NVRTC made no cubin.
func compileImage(cache *Cache, k *codegen.Kernel, target string) ([]byte, error) {
	major, minor := cache.NV.Version()
	img, _, err := cache.Compile(k.Source, k.Name+".cu", target, nil)
	if err != nil {
		return nil, fmt.Errorf("kernel %s for %s with NVRTC %d.%d: %w (arch-specific targets such as sm_90a need NVRTC 12.0 or later; --arch compute_90 writes PTX alone)",
			k.Name, target, major, minor, err)
	}
	if virtual, _, _, _, _ := parseArch(target); virtual {
		return bytes.TrimRight(img, "\x00"), nil
	}
	if !bytes.HasPrefix(img, []byte("\x7fELF")) {
		return nil, fmt.Errorf("%w: kernel %s: NVRTC %d.%d made no cubin for %s", ErrNVRTC, k.Name, major, minor, target)
	}
	return img, nil
}

// WriteArtifact writes the images under dir/kernels/TARGET/NAME.cubin (or
// .ptx), fills man's image list, kernels, targets and format, and writes
// manifest.json last, so an interrupted compile leaves no artifact that
// opens.
func WriteArtifact(dir string, man *Manifest, ks []*codegen.Kernel, cubins []string, ptx string, images map[string]map[string][]byte) error {
	man.Format = ArtifactFormat
	man.Targets, man.PTX = slices.Clone(cubins), ptx
	man.Target = strings.Join(cubins, ",")
	man.Kernels, man.Images = nil, nil
	_ = os.Remove(filepath.Join(dir, "manifest.json"))
	for _, k := range ks {
		sum := sha256.Sum256([]byte(k.Source))
		ki := KernelImages{Kernel: k.Name, SourceSHA256: hex.EncodeToString(sum[:]), Files: map[string]ImageFile{}}
		for _, t := range append(slices.Clone(cubins), ptx) {
			img, ok := images[k.Name][t]
			if !ok {
				return fmt.Errorf("BUG: kernel %s has no image for %s", k.Name, t)
			}
			ext := ".cubin"
			if t == ptx {
				ext = ".ptx"
			}
			rel := filepath.Join("kernels", t, k.Name+ext)
			if err := os.MkdirAll(filepath.Join(dir, "kernels", t), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, rel), img, 0o644); err != nil {
				return err
			}
			isum := sha256.Sum256(img)
			ki.Files[t] = ImageFile{File: filepath.ToSlash(rel), Size: int64(len(img)), SHA256: hex.EncodeToString(isum[:])}
		}
		man.Kernels = append(man.Kernels, k.Name)
		man.Images = append(man.Images, ki)
	}
	js, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), append(js, '\n'), 0o644)
}
