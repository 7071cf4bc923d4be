//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func fmaLoopAVX512(n int)

//go:noescape
func fmaLoopAVX2(n int)

//go:noescape
func dpbusdLoop(n int)

//go:noescape
func maddubsLoop(n int)

// fmaUnit names the register of the FMA peak loop.
var fmaUnit = func() string {
	switch {
	case cpu.X86.HasAVX512F:
		return "zmm"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "ymm"
	}
	return "none"
}()

// fmaLoop runs n iterations of the FMA peak loop and returns its FLOPs.
func fmaLoop(n int) float64 {
	switch fmaUnit {
	case "zmm":
		fmaLoopAVX512(n)
		return float64(n) * 12 * 16 * 2
	case "ymm":
		fmaLoopAVX2(n)
		return float64(n) * 12 * 8 * 2
	}
	return 0
}

// int8Loop runs n iterations of the int8 products' multiply-add loop and
// returns its operations (2 a multiply-add).
func int8Loop(n int) float64 {
	switch {
	case cpu.X86.HasAVX512VNNI:
		dpbusdLoop(n)
		return float64(n) * 12 * 64 * 2
	case cpu.X86.HasAVX2:
		maddubsLoop(n)
		return float64(n) * 4 * 32 * 2
	}
	return 0
}
