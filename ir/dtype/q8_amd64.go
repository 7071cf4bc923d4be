//go:build amd64 && !purego

package dtype

import "golang.org/x/sys/cpu"

// CPU features of the int8 kernels. The AVX-512 kernels use zmm registers,
// vpdpbusd (VNNI) and byte operations (BW); the AVX2 kernels vpmaddubsw,
// FMA and F16C's conversions. Every kernel ends with VZEROUPPER.
var (
	hasQ8VNNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
	hasQ8AVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
)

// q8KernelSets are the assembly kernel sets this CPU runs, best first.
func q8KernelSets() []q8KernelSet {
	var sets []q8KernelSet
	if hasQ8VNNI {
		sets = append(sets, q8KernelSet{"avx512vnni", q8KernelsVNNI, quantizeActsAVX512, floatKernelsVNNI})
	}
	if hasQ8AVX2 {
		sets = append(sets, q8KernelSet{"avx2", q8KernelsAVX2, quantizeActsAVX2, floatKernelsAVX2})
	}
	return sets
}

// quantizeActsAVX512 and quantizeActsAVX2 quantise n groups of 32 as
// quantizeGroup does, to the bit (q8act_amd64.s).
//
//go:noescape
func quantizeActsAVX512(x *float32, q *int8, groups *ActGroup, n int)

//go:noescape
func quantizeActsAVX2(x *float32, q *int8, groups *ActGroup, n int)
