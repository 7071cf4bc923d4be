//go:build wasip1

package sdk

import "unsafe"

// live keeps every buffer handed to the host reachable until memra_free.
var live = map[uint32][]byte{}

func pin(b []byte) uint32 {
	if len(b) == 0 {
		b = make([]byte, 1)
	}
	p := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	live[p] = b
	return p
}

func view(ptr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), n)
}

func pack(ptr uint32, n int) uint64 { return uint64(ptr)<<32 | uint64(uint32(n)) }

//go:wasmexport memra_abi_version
func memraABIVersion() int32 { return ABIVersion }

//go:wasmexport memra_alloc
func memraAlloc(n int32) uint32 {
	if n < 0 {
		return 0
	}
	return pin(make([]byte, n))
}

//go:wasmexport memra_free
func memraFree(ptr uint32) { delete(live, ptr) }

//go:wasmexport memra_last_error
func memraLastError() uint64 {
	if len(lastError) == 0 {
		return 0
	}
	return pack(uint32(uintptr(unsafe.Pointer(unsafe.SliceData(lastError)))), len(lastError))
}

//go:wasmexport memra_render
func memraRender(ptr, n uint32) uint64 {
	out := render(view(ptr, n))
	return pack(pin(out), len(out))
}

//go:wasmexport memra_grammar_set_vocab
func memraGrammarSetVocab(ptr, n uint32) int32 { return setVocab(view(ptr, n)) }

//go:wasmexport memra_grammar_new
func memraGrammarNew(ptr, n uint32) int32 { return newSequence(view(ptr, n)) }

//go:wasmexport memra_grammar_step
func memraGrammarStep(h, token int32) uint64 {
	flags, mask := step(h, token)
	if mask == nil {
		return uint64(flags) << 32
	}
	return uint64(flags)<<32 | uint64(uint32(uintptr(unsafe.Pointer(unsafe.SliceData(mask)))))
}

//go:wasmexport memra_grammar_free
func memraGrammarFree(h int32) { freeSequence(h) }
