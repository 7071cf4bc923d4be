// Package plugin runs user-supplied chat templates and grammars as
// WebAssembly modules, sandboxed in wazero (the only package of memra that
// imports it). The ABI the modules speak is described in docs/PLUGINS.md;
// Go plugin authors use the sdk subpackage.
//
// Why WebAssembly: a plugin is code from a stranger running inside the
// server. A wasm module sees only its own linear memory: no files, no
// network, no real clock, no randomness beyond a fixed seed, and every call
// into it runs under a deadline (wazero closes a module whose context
// ends), a memory cap and an output cap. A module that traps or runs out
// of time is closed and thrown away; the request gets a clear error and the
// next one a fresh instance.
//
// Costs shape the design: a Go-built module takes about a second to
// compile, so modules are compiled at load with wazero's optimizing compiler
// and a disk compilation cache; an instance costs a few milliseconds and
// megabytes, so instances are long-lived and pooled, per template plugin and
// per (grammar plugin, vocabulary); and every grammar sequence is a handle
// inside a shared instance, not an instance of its own.
package plugin

import "errors"

// Errors. Load errors (ErrNotWasm, ErrInvalidModule, ErrABIVersion,
// ErrMissingExport) refuse a module at load; call errors (ErrPluginTimeout,
// ErrPluginTrap, ErrPluginMemory, ErrPluginOutput) fail one request and
// discard the instance that caused them (ErrPluginOutput keeps it when the
// result was well-formed but too large); ErrPluginError is the plugin's own
// in-band error (a template that refuses its input, a grammar that does not
// compile), which a server answers with 400.
var (
	ErrNotWasm       = errors.New("plugin: not a WebAssembly module")
	ErrInvalidModule = errors.New("plugin: invalid module")
	ErrABIVersion    = errors.New("plugin: unsupported ABI version")
	ErrMissingExport = errors.New("plugin: missing export")
	ErrPluginTimeout = errors.New("plugin: call ran past its deadline")
	ErrPluginTrap    = errors.New("plugin: trapped")
	ErrPluginMemory  = errors.New("plugin: out of memory")
	ErrPluginOutput  = errors.New("plugin: bad or oversized output")
	ErrPluginError   = errors.New("plugin: error")
	ErrPluginBusy    = errors.New("plugin: no instance free before the deadline")
	ErrClosed        = errors.New("plugin: closed")
	ErrConfig        = errors.New("plugin: bad configuration")
	ErrUnknown       = errors.New("plugin: unknown grammar plugin")
)
