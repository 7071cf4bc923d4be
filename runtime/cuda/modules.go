package cuda

import (
	"fmt"

	"github.com/memra-ai/memra/codegen"
)

// compile compiles every distinct kernel of both programs, and the extra
// kernels (the cuBLASLt arm's helpers), through the disk cache, one module
// per kernel (each kernel's source is self-contained, with its own helpers
// and constants); with an artifact it takes their images from it instead.
func (b *Backend) compile(target string, extra []*codegen.Kernel) (map[string][]byte, error) {
	var ks []*codegen.Kernel
	for _, p := range b.programs() {
		ks = append(ks, p.Kernels...)
	}
	ks = append(ks, extra...)
	if a := b.opts.Artifact; a != nil {
		return a.images(ks, b.dev.Info())
	}
	nv, err := LoadNVRTC()
	if err != nil {
		return nil, err
	}
	cache, err := NewCache(b.opts.CacheDir, nv)
	if err != nil {
		return nil, err
	}
	images := map[string][]byte{}
	for _, k := range ks {
		if _, ok := images[k.Name]; ok {
			continue
		}
		img, _, err := cache.Compile(k.Source, k.Name+".cu", target, nil)
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
		images[k.Name] = img
	}
	return images, nil
}

// function loads k's module from images (once per name, through fns) and
// resolves its entry point; the backend owns the module.
func (b *Backend) function(c *Ctx, images map[string][]byte, k *codegen.Kernel, fns map[string]Function) (Function, error) {
	if f, ok := fns[k.Name]; ok {
		return f, nil
	}
	mod, err := c.LoadModule(images[k.Name])
	if err != nil {
		return 0, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	b.modules = append(b.modules, mod)
	f, err := c.Function(mod, k.Name)
	if err != nil {
		return 0, err
	}
	fns[k.Name] = f
	return f, nil
}

// loadModules loads each image and resolves every program's functions.
func (b *Backend) loadModules(c *Ctx, images map[string][]byte) error {
	fns := map[string]Function{}
	for _, ps := range b.states() {
		for _, k := range ps.p.Kernels {
			_, seen := fns[k.Name]
			f, err := b.function(c, images, k, fns)
			if err != nil {
				return err
			}
			if !seen {
				// the most shared memory any launch asks for: some kernels size it by rows
				g := k.Launch(codegen.Dims{Tokens: 1, Seqs: 1, KVLen: ps.p.Context})
				for _, t := range []int{b.opts.MaxSeqs, b.opts.PrefillTokens} {
					if gt := k.Launch(codegen.Dims{Tokens: t, Seqs: min(t, b.opts.MaxSeqs), KVLen: ps.p.Context}); gt.Shared > g.Shared {
						g = gt
					}
				}
				if g.SharedOverDefault() {
					if err := c.SetMaxDynamicShared(f, int(g.Shared)); err != nil {
						return fmt.Errorf("kernel %s: %d bytes of shared memory: %w", k.Name, g.Shared, err)
					}
				}
			}
			ps.fns = append(ps.fns, f)
		}
	}
	return nil
}

// useArtifact sets opts up for an artifact on the card info describes:
// the card and driver must fit it, and the lowering takes its picks and
// multiprocessor count. Only a whole model (layers [0, layers)) can use one.
func useArtifact(a *Artifact, opts *BackendOptions, info DeviceInfo, first, last, layers int) error {
	if first != 0 || last != layers {
		return fmt.Errorf("%w: pipeline stage of layers [%d, %d): a compiled artifact holds the whole model's kernels only", ErrArtifact, first, last)
	}
	if err := a.CheckDevice(info); err != nil {
		return err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if t, _ := a.Target(info); t == a.Manifest.PTX {
		logf("the artifact in %s has no cubin for %s: the driver compiles its PTX (%s) at load", a.Dir, info.Arch(), t)
	}
	if key := DeviceKey(info).String(); a.Manifest.Card != "" && a.Manifest.Card != key {
		logf("the artifact in %s was tuned for %s, not this %s: its arms run as compiled", a.Dir, a.Manifest.Card, key)
	}
	opts.Untuned, opts.Pick, opts.Multiprocessors = false, a.Picker(), a.Manifest.Multiprocessors
	return nil
}
