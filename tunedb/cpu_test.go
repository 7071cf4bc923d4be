package tunedb

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// TestCPUFiles: CPU entries written to the user folder come back by exact
// key; a CPU with the same instruction set borrows the nearest one's; one
// with another instruction set gets the default arm; shipped and user
// files load side by side with the GPU files, and bad files are refused.
func TestCPUFiles(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenFS(fstest.MapFS{}, dir)
	require.NoError(t, err)
	k := CPUKey{Model: "Intel(R) Xeon(R) Processor", ISA: "avx512vnni", Cores: 2}
	require.Equal(t, "cpu-intel-r-xeon-r-processor.avx512vnni.2c", k.String())
	e := CPUEntry{Family: CPUFamily, Class: "q4_k_n2048_k2048_m64", Arm: map[string]int{"token_block": 4, "token_tile": 64},
		ArmName: "b4_t64", TimeUS: 100, Tried: 54, Date: "2026-12-06", MemraVersion: "dev"}
	path, err := db.PutCPU(k, []CPUEntry{e})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, k.String()+".json"), path)

	arm, src := db.CPULookup(k, e.Class)
	require.Equal(t, e.Arm, arm)
	require.Equal(t, KindExact, src.Kind)
	require.Equal(t, OriginUser, src.Origin)

	// reopened from disk, as a neighbour of the same instruction set
	db2, err := OpenFS(fstest.MapFS{}, dir)
	require.NoError(t, err)
	arm, src = db2.CPULookup(CPUKey{Model: "Other", ISA: "avx512vnni", Cores: 8}, e.Class)
	require.Equal(t, e.Arm, arm)
	require.Equal(t, KindSameArch, src.Kind)
	arm, src = db2.CPULookup(CPUKey{Model: "Other", ISA: "avx2", Cores: 2}, e.Class)
	require.Equal(t, CPUDefault, arm)
	require.Equal(t, KindDefault, src.Kind)
	arm, _ = db2.CPULookup(k, "q8_0_n1_k32_m64")
	require.Equal(t, CPUDefault, arm)

	// the shipped folder holds GPU and CPU files side by side
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	shipped := fstest.MapFS{k.String() + ".json": {Data: b}}
	sdb, err := OpenFS(shipped, "")
	require.NoError(t, err)
	_, src = sdb.CPULookup(k, e.Class)
	require.Equal(t, OriginShipped, src.Origin)

	for name, bad := range map[string]CPUEntry{
		"knob":  {Family: CPUFamily, Class: "c", Arm: map[string]int{"token_block": 4}, TimeUS: 1},
		"value": {Family: CPUFamily, Class: "c", Arm: map[string]int{"token_block": 9, "token_tile": 0}, TimeUS: 1},
		"time":  {Family: CPUFamily, Class: "c", Arm: map[string]int{"token_block": 4, "token_tile": 0}},
		"fam":   {Family: "gemv", Class: "c", Arm: map[string]int{"token_block": 4, "token_tile": 0}, TimeUS: 1},
	} {
		_, err := db.PutCPU(k, []CPUEntry{bad})
		require.ErrorIs(t, err, ErrFormat, name)
	}
	_, err = OpenFS(fstest.MapFS{"cpu-x.avx2.2c.json": {Data: b}}, "")
	require.ErrorIs(t, err, ErrFormat, "file name and key differ")
}
