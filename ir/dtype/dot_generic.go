//go:build !amd64 || (purego && !goexperiment.simd)

package dtype

// simdDot reports whether Dot uses vector kernels: never in this build.
const simdDot = false

func dotQ8_0Fast(row []byte, x []float32) float32 { return dotQ8_0(row, x) }

func dotQ4KFast(row []byte, x []float32) float32 { return dotQ4K(row, x) }

func dotQ6KFast(row []byte, x []float32) float32 { return dotQ6K(row, x) }

func dotQ5_0Fast(row []byte, x []float32) float32 { return dotQ5_0(row, x) }
