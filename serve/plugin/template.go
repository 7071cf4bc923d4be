package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// Stats counts a plugin's instances, for metrics and leak checks.
type Stats struct {
	Live      int // instances open now
	Created   int // instances started so far
	Discarded int // instances thrown away after a trap, a timeout or a bad output
	Handles   int // grammar sequences open now (grammar plugins)
}

// TemplatePlugin is a chat template implemented by a wasm module. It
// satisfies the server's Template interface and is safe for concurrent use:
// each Render borrows an instance from the plugin's pool.
type TemplatePlugin struct {
	m     *module
	slots chan struct{} // one per instance that may exist

	mu     sync.Mutex
	idle   []*instance
	stats  Stats
	closed bool
}

// LoadTemplateFile reads and loads a template plugin from path.
func (h *Host) LoadTemplateFile(ctx context.Context, name, path string) (*TemplatePlugin, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: template plugin %q: %v", ErrConfig, name, err)
	}
	return h.LoadTemplate(ctx, name, wasm)
}

// LoadTemplate compiles wasm, checks its exports and ABI version, and keeps
// the instance that answered the version check as the pool's first.
func (h *Host) LoadTemplate(ctx context.Context, name string, wasm []byte) (*TemplatePlugin, error) {
	m, err := h.compile(ctx, name, kindTemplate, wasm)
	if err != nil {
		return nil, err
	}
	in, err := m.checkVersion(ctx)
	if err != nil {
		m.close()
		return nil, err
	}
	p := &TemplatePlugin{m: m, slots: make(chan struct{}, h.lim.MaxInstances), idle: []*instance{in}}
	p.stats.Live, p.stats.Created = 1, 1
	if err := h.track(p); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Name returns the name the plugin was loaded under.
func (p *TemplatePlugin) Name() string { return p.m.name }

// Stats returns the pool's counters.
func (p *TemplatePlugin) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Render implements the server's Template: ctx (the JSON object a chat
// template sees) goes in, the prompt text comes out. The whole call,
// waiting for an instance included, runs under Limits.RenderTimeout.
func (p *TemplatePlugin) Render(ctx json.RawMessage) (string, error) {
	cctx, cancel := context.WithTimeout(context.Background(), p.m.host.lim.RenderTimeout)
	defer cancel()
	in, err := p.get(cctx)
	if err != nil {
		return "", err
	}
	defer p.put(in)
	return p.render(cctx, in, ctx)
}

func (p *TemplatePlugin) render(ctx context.Context, in *instance, input []byte) (string, error) {
	ptr, err := in.write(ctx, input)
	if err != nil {
		return "", err
	}
	res, err := in.call(ctx, expRender, uint64(ptr), uint64(len(input)))
	if err != nil {
		return "", err
	}
	if _, err := in.call(ctx, expFree, uint64(ptr)); err != nil {
		return "", err
	}
	optr, n := unpack(res)
	max := p.m.host.lim.MaxOutput
	if n == 0 || uint64(n) > uint64(max)+1 {
		// Well-formed but too large (or empty, so no status): give the
		// buffer back and keep the instance, unless the range is bogus.
		if _, err := in.read("memra_render result", optr, n); err != nil {
			return "", err
		}
		if _, err := in.call(ctx, expFree, uint64(optr)); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%w: template plugin %q returned %d bytes; the cap is %d", ErrPluginOutput, p.m.name, n, max)
	}
	view, err := in.read("memra_render result", optr, n)
	if err != nil {
		return "", err
	}
	status, text := view[0], string(view[1:])
	if _, err := in.call(ctx, expFree, uint64(optr)); err != nil {
		return "", err
	}
	switch status {
	case statusOK:
		return text, nil
	case statusError:
		return "", fmt.Errorf("%w: template plugin %q: %s", ErrPluginError, p.m.name, text)
	}
	return "", fmt.Errorf("%w: template plugin %q: status byte %d", ErrPluginOutput, p.m.name, status)
}

// get borrows an idle instance or starts one, waiting for a free slot
// until ctx ends.
func (p *TemplatePlugin) get(ctx context.Context) (*instance, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: template plugin %q: all %d instances busy", ErrPluginBusy, p.m.name, cap(p.slots))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, fmt.Errorf("%w: template plugin %q", ErrClosed, p.m.name)
	}
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return in, nil
	}
	p.mu.Unlock()
	in, err := p.m.instantiate(context.Background())
	if err != nil {
		<-p.slots
		return nil, err
	}
	p.mu.Lock()
	p.stats.Live++
	p.stats.Created++
	p.mu.Unlock()
	return in, nil
}

// put returns in to the pool, or discards it when it died or the plugin
// was closed meanwhile.
func (p *TemplatePlugin) put(in *instance) {
	p.mu.Lock()
	if in.dead.Load() || p.closed {
		if in.dead.Load() {
			p.stats.Discarded++
		}
		in.kill()
		p.stats.Live--
	} else {
		p.idle = append(p.idle, in)
	}
	p.mu.Unlock()
	<-p.slots
}

// Close closes the idle instances (busy ones close when returned) and the
// compiled module. It is idempotent.
func (p *TemplatePlugin) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for _, in := range p.idle {
		in.kill()
		p.stats.Live--
	}
	p.idle = nil
	p.mu.Unlock()
	p.m.close()
	return nil
}
