// Command nvrtcgate prints one line when NVRTC cannot be loaded, so that
// `make test` says the NVRTC compile gate skipped and how to run it (see
// cuda.CompileGateNotice); it prints nothing when NVRTC loads.
package main

import (
	"fmt"

	"github.com/memra-ai/memra/runtime/cuda"
)

func main() {
	if n := cuda.CompileGateNotice(); n != "" {
		fmt.Println(n)
	}
}
