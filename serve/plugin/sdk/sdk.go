// Package sdk is what a memra plugin author imports to write a chat-template
// or grammar plugin in Go. It implements the guest side of the plugin ABI
// (docs/PLUGINS.md): memory handoff through memra_alloc/memra_free, the
// exports the host calls (through //go:wasmexport, in the wasip1 build only),
// result packing, and for grammars the vocabulary, per-sequence handles and
// token masks cached per automaton state. An author registers one function
// in an init func and builds a reactor module:
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o my.wasm ./myplugin
//
// Registration must happen in init: a reactor module never runs main.
// On other platforms the package compiles without the exports, so plugin
// code can be unit-tested natively.
package sdk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ABIVersion is the plugin ABI this SDK speaks (memra_abi_version).
const ABIVersion = 1

// Render statuses: byte 0 of memra_render's result.
const (
	statusOK    = 0
	statusError = 1
)

// Step flags: the high 32 bits of memra_grammar_step's result.
const (
	flagMayEnd = 1 << 0
	flagError  = 1 << 1
)

// Limits of the grammar side, so a host cannot make the guest grow without
// bound through the ABI.
const (
	maxGrammars     = 64   // compiled grammars cached by source text
	maxMasksPerGram = 4096 // masks cached per compiled grammar
)

// Grammar is a compiled grammar as a deterministic automaton over output
// bytes. States are small non-negative integers chosen by the Grammar;
// a negative state is dead (no continuation). The SDK computes each state's
// token mask once and caches it, so Next may be slow-ish but must be
// deterministic.
type Grammar interface {
	// Start is the state before any output.
	Start() int32
	// Next is the state after byte b from state s, or a negative number
	// when b is not allowed there.
	Next(s int32, b byte) int32
	// CanEnd reports whether the output may end in state s.
	CanEnd(s int32) bool
}

var (
	renderFn  func(ctx []byte) (string, error)
	compileFn func(source string) (Grammar, error)
)

// RegisterTemplate makes the module a template plugin: render receives the
// JSON object a chat template sees (messages, add_generation_prompt,
// bos_token, eos_token, tools…) and returns the prompt text. A returned
// error reaches the client as the request's error.
func RegisterTemplate(render func(ctx []byte) (string, error)) { renderFn = render }

// RegisterGrammar makes the module a grammar plugin: compile turns the
// request's grammar source into a Grammar. Compiled grammars are cached by
// source text, so sequences using the same source share their masks.
func RegisterGrammar(compile func(source string) (Grammar, error)) { compileFn = compile }

// lastError holds the message memra_last_error returns.
var lastError []byte

func setError(err error) { lastError = []byte(err.Error()) }

// render runs the registered template and returns status byte + text.
func render(in []byte) []byte {
	if renderFn == nil {
		return append([]byte{statusError}, "plugin registers no template"...)
	}
	s, err := renderFn(bytes.Clone(in))
	if err != nil {
		return append([]byte{statusError}, err.Error()...)
	}
	out := make([]byte, 1+len(s))
	out[0] = statusOK
	copy(out[1:], s)
	return out
}

// vocabulary is the host's token list, sorted by bytes for mask walks.
type vocabulary struct {
	tokens [][]byte // by id; empty = never allowed by the guest
	sorted []int32  // ids with bytes, in byte order
	maxLen int
}

// errVocab reports a malformed memra_grammar_set_vocab payload.
var errVocab = errors.New("malformed vocabulary")

// parseVocab decodes u32 count, then count × (u32 length, bytes), all
// little-endian.
func parseVocab(b []byte) (*vocabulary, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no count", errVocab, len(b))
	}
	b = bytes.Clone(b) // the host frees its buffer after the call
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*4 > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d tokens do not fit %d bytes", errVocab, n, len(b))
	}
	v := &vocabulary{tokens: make([][]byte, n)}
	for i := range v.tokens {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: token %d: no length", errVocab, i)
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: token %d: length %d past the end", errVocab, i, l)
		}
		v.tokens[i] = b[:l:l]
		b = b[l:]
		if l > 0 {
			v.sorted = append(v.sorted, int32(i))
			v.maxLen = max(v.maxLen, int(l))
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errVocab, len(b))
	}
	slices.SortFunc(v.sorted, func(x, y int32) int {
		if c := bytes.Compare(v.tokens[x], v.tokens[y]); c != 0 {
			return c
		}
		return int(x - y)
	})
	return v, nil
}

func (v *vocabulary) words() int { return (len(v.tokens) + 63) / 64 }

// compiled is one grammar over the current vocabulary with its masks.
type compiled struct {
	g     Grammar
	masks map[int32][]uint64
}

// mask returns the cached mask of state s, computing it on a miss.
func (c *compiled) mask(v *vocabulary, s int32) []uint64 {
	if m, ok := c.masks[s]; ok {
		return m
	}
	if len(c.masks) >= maxMasksPerGram {
		clear(c.masks) // a handle only needs its mask until the next call
	}
	m := make([]uint64, v.words())
	walk(c.g, v, s, m)
	c.masks[s] = m
	return m
}

// walk sets in m the bit of every token whose bytes g accepts from s. The
// tokens are visited in byte order, so a shared prefix is stepped once and
// a dead prefix skips every token under it.
func walk(g Grammar, v *vocabulary, s int32, m []uint64) {
	stack := make([]int32, v.maxLen+1)
	stack[0] = s
	var prev []byte
	valid, dead := 0, -1 // stack[0..valid] hold prev's prefix states; stack[dead] < 0
	for _, id := range v.sorted {
		b := v.tokens[id]
		l := 0
		for l < len(prev) && l < len(b) && prev[l] == b[l] {
			l++
		}
		valid = min(valid, l)
		prev = b
		if dead >= 0 && dead <= l {
			continue
		}
		dead = -1
		st := stack[valid]
		for d := valid; d < len(b); d++ {
			st = g.Next(st, b[d])
			stack[d+1] = st
			valid = d + 1
			if st < 0 {
				dead = d + 1
				break
			}
		}
		if dead < 0 {
			m[id>>6] |= 1 << (id & 63)
		}
	}
}

// sequence is one handle: a grammar and where the output is in it.
type sequence struct {
	c     *compiled
	state int32
}

// grammarState is everything the grammar exports share.
type grammarState struct {
	vocab  *vocabulary
	cache  map[string]*compiled
	seqs   map[int32]*sequence
	nextID int32
}

var gs = grammarState{cache: map[string]*compiled{}, seqs: map[int32]*sequence{}}

// setVocab installs the vocabulary; it drops every compiled grammar and
// handle (their masks were over the old one). It returns 0 or 1 (error).
func setVocab(b []byte) int32 {
	v, err := parseVocab(b)
	if err != nil {
		setError(err)
		return 1
	}
	gs.vocab = v
	clear(gs.cache)
	clear(gs.seqs)
	return 0
}

// newSequence compiles (or finds) the grammar of source and returns a new
// handle at its start, or 0 with the message in lastError.
func newSequence(source []byte) int32 {
	switch {
	case compileFn == nil:
		setError(errors.New("plugin registers no grammar"))
		return 0
	case gs.vocab == nil:
		setError(errors.New("no vocabulary set"))
		return 0
	}
	c := gs.cache[string(source)]
	if c == nil {
		g, err := compileGuarded(string(source))
		if err != nil {
			setError(err)
			return 0
		}
		if len(gs.cache) >= maxGrammars {
			clear(gs.cache)
		}
		c = &compiled{g: g, masks: map[int32][]uint64{}}
		gs.cache[string(source)] = c
	}
	gs.nextID++
	if gs.nextID <= 0 {
		gs.nextID = 1
	}
	h := gs.nextID
	gs.seqs[h] = &sequence{c: c, state: c.g.Start()}
	return h
}

func compileGuarded(src string) (g Grammar, err error) {
	g, err = compileFn(src)
	if err == nil && g == nil {
		err = errors.New("grammar compiler returned nothing")
	}
	return g, err
}

// step advances handle h by token (token < 0: no advance) and returns the
// flags and the mask of the state it is in (nil with flagError).
func step(h, token int32) (uint32, []uint64) {
	sq := gs.seqs[h]
	if sq == nil {
		setError(fmt.Errorf("unknown handle %d", h))
		return flagError, nil
	}
	if token >= 0 {
		if int(token) >= len(gs.vocab.tokens) || len(gs.vocab.tokens[token]) == 0 {
			setError(fmt.Errorf("token %d is not a text token", token))
			return flagError, nil
		}
		s := sq.state
		for _, b := range gs.vocab.tokens[token] {
			if s = sq.c.g.Next(s, b); s < 0 {
				setError(fmt.Errorf("token %d (%q) is not allowed", token, gs.vocab.tokens[token]))
				return flagError, nil
			}
		}
		sq.state = s
	}
	var flags uint32
	if sq.c.g.CanEnd(sq.state) {
		flags |= flagMayEnd
	}
	return flags, sq.c.mask(gs.vocab, sq.state)
}

// freeSequence drops handle h (unknown handles are ignored).
func freeSequence(h int32) { delete(gs.seqs, h) }
