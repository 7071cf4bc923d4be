package tunedb

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

var (
	h200  = DeviceKey{Name: "NVIDIA H200", SMMajor: 9, SMMinor: 0, SMs: 132, MemGiB: 140}
	h100  = DeviceKey{Name: "NVIDIA H100 80GB HBM3", SMMajor: 9, SMMinor: 0, SMs: 132, MemGiB: 79}
	h100p = DeviceKey{Name: "NVIDIA H100 PCIe", SMMajor: 9, SMMinor: 0, SMs: 114, MemGiB: 79}
	gh    = DeviceKey{Name: "NVIDIA GH200 480GB", SMMajor: 9, SMMinor: 0, SMs: 132, MemGiB: 95}
	b200  = DeviceKey{Name: "NVIDIA B200", SMMajor: 10, SMMinor: 0, SMs: 148, MemGiB: 179}
	rtx   = DeviceKey{Name: "NVIDIA GeForce RTX 5090", SMMajor: 12, SMMinor: 0, SMs: 170, MemGiB: 32}
	sm91  = DeviceKey{Name: "Future Card", SMMajor: 9, SMMinor: 1, SMs: 100, MemGiB: 64}
)

func gemvArm(threads, rows int) codegen.Point {
	return codegen.GEMVArm{Threads: threads, RowsPerBlock: rows, Unroll: 4, SharedX: 1}.Point()
}

func entry(family, class string, arm codegen.Point, us float64) Entry {
	sp, err := codegen.SpaceByName(family)
	if err != nil {
		panic(err)
	}
	return Entry{Family: family, Class: class, Arm: arm, ArmName: sp.ArmName(arm), TimeUS: us, Tried: 10,
		Date: "2026-12-02", MemraVersion: "test", Driver: 13000}
}

func fileOf(k DeviceKey, es ...Entry) *File {
	f := NewFile(k)
	f.Merge(es)
	return f
}

func mapFS(t *testing.T, files ...*File) fstest.MapFS {
	m := fstest.MapFS{}
	for _, f := range files {
		b, err := f.Marshal()
		require.NoError(t, err)
		m[f.Key+".json"] = &fstest.MapFile{Data: b}
	}
	return m
}

func TestDeviceKey(t *testing.T) {
	tests := []struct {
		key  DeviceKey
		want string
	}{
		{h200, "nvidia-h200.sm90.132sm.140gib"},
		{h100, "nvidia-h100-80gb-hbm3.sm90.132sm.79gib"},
		{rtx, "nvidia-geforce-rtx-5090.sm120.170sm.32gib"},
		{DeviceKey{Name: "  Weird (name) ", SMMajor: 8, SMMinor: 6, SMs: 84, MemGiB: 24}, "weird-name.sm86.84sm.24gib"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			require.Equal(t, tc.want, tc.key.String())
			back, err := ParseKey(tc.want)
			require.NoError(t, err)
			require.Equal(t, tc.want, back.String(), "stable through a parse")
			require.Equal(t, tc.key.SMMajor, back.SMMajor)
			require.Equal(t, tc.key.SMMinor, back.SMMinor)
			require.Equal(t, tc.key.SMs, back.SMs)
		})
	}
	// 143771 MiB, what an H200 reports, rounds to 140 GiB
	require.Equal(t, h200, NewDeviceKey("NVIDIA H200", 9, 0, 132, 143771<<20))
	for _, bad := range []string{"", "nvidia-h200", "nvidia-h200.sm9x.132sm.140gib", "Nvidia.sm90.1sm.1gib", "a.sm90.1sm.1gb", "a.sm9.1sm.1gib"} {
		_, err := ParseKey(bad)
		require.ErrorIs(t, err, ErrKey, bad)
	}
}

func TestLookupFallback(t *testing.T) {
	const cls = "q4_k_n6144_k4096"
	shipped := mapFS(t,
		fileOf(h200, entry("gemv", cls, gemvArm(128, 4), 10)),
		fileOf(h100p, entry("gemv", cls, gemvArm(512, 16), 12)),
		fileOf(b200, entry("gemv", cls, gemvArm(64, 2), 8)),
	)
	db, err := OpenFS(shipped, "")
	require.NoError(t, err)
	tests := []struct {
		name   string
		key    DeviceKey
		family string
		want   codegen.Point
		kind   Kind
		device string
		notice string
	}{
		{"exact", h200, "gemv", gemvArm(128, 4), KindExact, h200.String(), ""},
		{"same arch, nearest SM count", h100, "gemv", gemvArm(128, 4), KindSameArch, h200.String(), "nearest sm_90 card"},
		{"same arch, nearest memory", gh, "gemv", gemvArm(128, 4), KindSameArch, h200.String(), "nearest sm_90 card"},
		{"same major", sm91, "gemv", gemvArm(512, 16), KindSameMajor, h100p.String(), "nearest sm_9 card"},
		{"nothing close", rtx, "gemv", codegen.DefaultGEMVArm.Point(), KindDefault, "", "default arms"},
		{"no entry for the family", h200, "mma", codegen.DefaultMMAArm.Point(), KindDefault, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arm, src := db.Lookup(tc.key, tc.family, cls)
			require.Equal(t, tc.want, arm)
			require.Equal(t, tc.kind, src.Kind, src.String())
			require.Equal(t, tc.device, src.Device)
			if tc.kind != KindDefault {
				require.Equal(t, OriginShipped, src.Origin)
				require.NotNil(t, src.Entry)
			}
			n := db.Notice(tc.key)
			if tc.notice == "" {
				require.Empty(t, n)
			} else {
				require.Contains(t, n, tc.notice)
				require.Contains(t, n, tc.key.String())
			}
		})
	}
	// a nearer card with no entry for the class does not hide a farther one that has it
	arm, src := db.Lookup(h100, "gemv", "other")
	require.Equal(t, KindDefault, src.Kind)
	require.Equal(t, codegen.DefaultGEMVArm.Point(), arm)
	// unknown family
	arm, src = db.Lookup(h200, "nope", cls)
	require.Nil(t, arm)
	require.Equal(t, KindDefault, src.Kind)
}

func TestUserOverridesShipped(t *testing.T) {
	const cls = "q4_k_n6144_k4096"
	shipped := mapFS(t, fileOf(h200, entry("gemv", cls, gemvArm(128, 4), 10), entry("gemv", "other", gemvArm(64, 1), 5)))
	dir := t.TempDir()
	db, err := OpenFS(shipped, dir)
	require.NoError(t, err)
	_, err = db.Put(h200, []Entry{entry("gemv", cls, gemvArm(256, 8), 9)})
	require.NoError(t, err)

	// reopen from disk: the user file is read back and wins for its entry only
	db, err = OpenFS(shipped, dir)
	require.NoError(t, err)
	arm, src := db.Lookup(h200, "gemv", cls)
	require.Equal(t, gemvArm(256, 8), arm)
	require.Equal(t, OriginUser, src.Origin)
	arm, src = db.Lookup(h200, "gemv", "other")
	require.Equal(t, gemvArm(64, 1), arm)
	require.Equal(t, OriginShipped, src.Origin)
	require.Equal(t, []DeviceInfo{{Key: h200.String(), Device: h200, Shipped: 2, User: 1}}, db.Devices())
	f, origins, ok := db.File(h200.String())
	require.True(t, ok)
	require.Len(t, f.Entries, 2)
	require.Equal(t, OriginUser, origins["gemv/"+cls])

	// a broken user file is an error naming it
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.json"), []byte("{"), 0o644))
	_, err = OpenFS(shipped, dir)
	require.ErrorIs(t, err, ErrFormat)
	require.ErrorContains(t, err, "x.json")
}

func TestImportExportRoundTrip(t *testing.T) {
	e := entry("mma", "q8_0_n4096_k4096", codegen.MMAArm{BM: 128, BN: 64, WarpsM: 4, WarpsN: 2}.Point(), 55.5)
	e.RunnerUp = &Timed{Arm: codegen.DefaultMMAArm.Point(), ArmName: codegen.DefaultMMAArm.String(), TimeUS: 60}
	e.Default = e.RunnerUp
	e.Failed = []Failure{{ArmName: "m16_n32_w1x1", Reason: "rel. error above tolerance", RelErr: 0.5}}
	src := fileOf(h200, e, entry("attn_decode", "h32_8_d128_f16", codegen.DecodeArm{Threads: 256, Chunk: 512}.Point(), 20))
	b, err := src.Marshal()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "export.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))

	back, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, src, back)
	db, err := OpenFS(fstest.MapFS{}, t.TempDir())
	require.NoError(t, err)
	_, err = db.Import(back)
	require.NoError(t, err)
	merged, _, ok := db.File(h200.String())
	require.True(t, ok)
	again, err := merged.Marshal()
	require.NoError(t, err)
	require.Equal(t, string(b), string(again))
}

func TestParseRejects(t *testing.T) {
	good := fileOf(h200, entry("gemv", "c", gemvArm(128, 4), 10))
	tests := []struct {
		name string
		edit func(f *File)
	}{
		{"format", func(f *File) { f.Format = 99 }},
		{"key mismatch", func(f *File) { f.Key = "x.sm90.1sm.1gib" }},
		{"unknown family", func(f *File) { f.Entries[0].Family = "nope" }},
		{"invalid arm", func(f *File) { f.Entries[0].Arm = gemvArm(64, 4) }},
		{"zero time", func(f *File) { f.Entries[0].TimeUS = 0 }},
		{"empty class", func(f *File) { f.Entries[0].Class = "" }},
		{"duplicate", func(f *File) { f.Entries = append(f.Entries, f.Entries[0]) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fileOf(h200, good.Entries...)
			f.Entries = append([]Entry(nil), f.Entries...)
			tc.edit(f)
			b, err := f.Marshal()
			require.NoError(t, err)
			_, err = Parse(b, "t.json")
			require.ErrorIs(t, err, ErrFormat)
		})
	}
	_, err := Parse([]byte(`{"format":1,"bogus":true}`), "t.json")
	require.ErrorIs(t, err, ErrFormat)
}

func TestDiffGolden(t *testing.T) {
	a := fileOf(h200,
		entry("gemv", "q4_k_n6144_k4096", gemvArm(128, 4), 10),
		entry("gemv", "q4_k_n4096_k14336", gemvArm(256, 8), 30),
		entry("rmsnorm", "d4096_add", codegen.BlockArm{Threads: 256}.Point(), 3),
	)
	b := fileOf(h100,
		entry("gemv", "q4_k_n6144_k4096", gemvArm(128, 4), 11),
		entry("gemv", "q4_k_n4096_k14336", gemvArm(512, 16), 27),
		entry("swiglu", "f14336", codegen.BlockArm{Threads: 512}.Point(), 2.5),
	)
	var buf bytes.Buffer
	n, err := WriteDiff(&buf, a, b)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	path := filepath.Join("testdata", "diff.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./tunedb -run Diff -update")
	require.Equal(t, string(want), buf.String())
}

func TestShippedDefaultsParse(t *testing.T) {
	// every shipped file parses and is named after its key
	db, err := OpenFS(ShippedFS(), "")
	require.NoError(t, err)
	for _, d := range db.Devices() {
		require.Zero(t, d.User)
	}
}

func FuzzParse(f *testing.F) {
	b, _ := fileOf(h200, entry("gemv", "c", gemvArm(128, 4), 10)).Marshal()
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":1,"key":"a.sm90.1sm.1gib","device":{"Name":"a","SMMajor":9,"SMMinor":0,"SMs":1,"MemGiB":1},"entries":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		out, err := file.Marshal()
		require.NoError(t, err)
		_, err = Parse(out, "again")
		require.NoError(t, err)
	})
}
