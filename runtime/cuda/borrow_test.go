package cuda

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/tunedb"
)

// TestBorrowingPicker: a card whose own file lacks some of a model's
// classes takes them from the nearest card, and the log says which and how
// many (the start notice is empty: the card has entries); a card with no
// entries at all gets the start notice and no log; its own classes are not
// counted.
func TestBorrowingPicker(t *testing.T) {
	h100 := tunedb.DeviceKey{Name: "nvidia-h100-80gb-hbm3", SMMajor: 9, SMs: 132, MemGiB: 79}
	h200 := tunedb.DeviceKey{Name: "nvidia-h200", SMMajor: 9, SMs: 132, MemGiB: 140}
	db, err := tunedb.OpenFS(fstest.MapFS{}, t.TempDir())
	require.NoError(t, err)
	norm := codegen.BlockArm{Threads: 64}
	entry := func(class string) tunedb.Entry {
		return tunedb.Entry{Family: "rmsnorm", Class: class, Arm: norm.Point(), ArmName: norm.String(), TimeUS: 1}
	}
	_, err = db.Put(h200, []tunedb.Entry{entry("d4096"), entry("d2048"), entry("d1024")})
	require.NoError(t, err)
	_, err = db.Put(h100, []tunedb.Entry{entry("d4096")})
	require.NoError(t, err)

	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, f) }
	pick, bl := borrowingPicker(db, h100, logf)
	require.NotNil(t, bl)
	require.Empty(t, logged, "the card has entries: no start notice")
	for _, c := range []string{"d4096", "d2048", "d1024", "d2048", "d512"} {
		p, ok := pick("rmsnorm", c)
		require.Equal(t, c != "d512", ok, c)
		if ok {
			require.Equal(t, norm.Point(), p)
		}
	}
	require.Equal(t, "tunedb: 2 kernel classes of this model have no entry for "+h100.String()+
		"; they use the nearest card's ("+h200.String()+": 2). Run `memra autotune` to tune them.", bl.String())

	other := tunedb.DeviceKey{Name: "nvidia-gh200", SMMajor: 9, SMs: 132, MemGiB: 96}
	pick, bl = borrowingPicker(db, other, logf)
	require.Nil(t, bl, "no entries of its own: the start notice says it all")
	require.Len(t, logged, 1)
	_, ok := pick("rmsnorm", "d2048")
	require.True(t, ok)
	require.Empty(t, bl.String())
}
