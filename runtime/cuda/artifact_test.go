package cuda

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/tunedb"
)

// fakeArtifact writes an artifact of stories260K's kernels whose images
// are made-up bytes (no NVRTC needed): a cubin per target and PTX.
func fakeArtifact(t *testing.T, cubins []string, ptx, nvrtc string) (string, []*codegen.Kernel) {
	t.Helper()
	m, err := builtin.Open()
	require.NoError(t, err)
	_, _, ks, err := ArtifactKernels(m, BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	images := map[string]map[string][]byte{}
	for _, k := range ks {
		images[k.Name] = map[string][]byte{ptx: []byte("// ptx of " + k.Name + "\n.version 8.0\n.target sm_90\n.entry " + k.Name + "()\n")}
		for _, c := range cubins {
			images[k.Name][c] = []byte("\x7fELF cubin of " + k.Name + " for " + c)
		}
	}
	dir := t.TempDir()
	man := &Manifest{Model: "stories260K", NVRTC: nvrtc, MaxSeqs: 4, Context: 512, PrefillTokens: 512, Cache: "f16", Multiprocessors: 132,
		ModelFiles: []ModelFile{{Name: "stories260K.gguf", Size: 100, SHA256: strings.Repeat("a", 64)}}}
	require.NoError(t, WriteArtifact(dir, man, ks, cubins, ptx, images))
	return dir, ks
}

func TestArtifactOpenAndImages(t *testing.T) {
	dir, ks := fakeArtifact(t, []string{"sm_90a"}, "compute_90", "13.0")
	a, err := OpenArtifact(dir)
	require.NoError(t, err)
	require.Len(t, a.Manifest.Kernels, len(ks))
	require.Equal(t, "sm_90a", a.Manifest.Target)

	h100 := DeviceInfo{Name: "NVIDIA H100 80GB HBM3", Major: 9, Minor: 0, SMs: 132, DriverVersion: 13000}
	imgs, err := a.images(ks, h100)
	require.NoError(t, err)
	for _, k := range ks {
		require.Equal(t, "\x7fELF cubin of "+k.Name+" for sm_90a", string(imgs[k.Name]), "the cubin on its own card")
	}
	b200 := DeviceInfo{Name: "NVIDIA B200", Major: 10, Minor: 0, DriverVersion: 13000}
	imgs, err = a.images(ks, b200)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(imgs[ks[0].Name], []byte("()\n\x00")), "PTX elsewhere, NUL-terminated for the driver")

	// a kernel of another configuration, an edited source, other options
	other := *ks[0]
	other.Name += "_other"
	_, err = a.images([]*codegen.Kernel{&other}, h100)
	require.ErrorIs(t, err, ErrArtifact)
	require.ErrorContains(t, err, "max_seqs 4")
	edited := *ks[0]
	edited.Source += "\n// edited\n"
	_, err = a.images([]*codegen.Kernel{&edited}, h100)
	require.ErrorIs(t, err, ErrArtifact)
	require.ErrorContains(t, err, "source")
	a.byName[ks[0].Name].Options = []string{"-DMEMRA_PDL_EARLY"} // compiled with options this build never passes
	_, err = a.images(ks, h100)
	require.ErrorIs(t, err, ErrArtifact)
	require.ErrorContains(t, err, "options")
}

func TestArtifactOpenRefuses(t *testing.T) {
	edit := func(t *testing.T, change func(dir string, man map[string]any)) error {
		dir, _ := fakeArtifact(t, []string{"sm_90a"}, "compute_90", "13.0")
		raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		require.NoError(t, err)
		var man map[string]any
		require.NoError(t, json.Unmarshal(raw, &man))
		change(dir, man)
		raw, err = json.Marshal(man)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), raw, 0o644))
		_, err = OpenArtifact(dir)
		return err
	}
	image := func(man map[string]any, target string) map[string]any {
		return man["images"].([]any)[0].(map[string]any)["files"].(map[string]any)[target].(map[string]any)
	}
	cases := map[string]func(dir string, man map[string]any){
		"nothing changed": func(string, map[string]any) {},
		"old format":      func(_ string, m map[string]any) { m["format"] = 1 },
		"unknown field":   func(_ string, m map[string]any) { m["extra"] = true },
		"bad nvrtc":       func(_ string, m map[string]any) { m["nvrtc"] = "thirteen" },
		"bad numerics":    func(_ string, m map[string]any) { m["numerics"] = "bf16" },
		"tampered image": func(dir string, m map[string]any) {
			p := filepath.Join(dir, image(m, "sm_90a")["file"].(string))
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			os.WriteFile(p, b, 0o644)
		},
		"missing image": func(dir string, m map[string]any) {
			os.Remove(filepath.Join(dir, image(m, "compute_90")["file"].(string)))
		},
		"escaping path":   func(_ string, m map[string]any) { image(m, "sm_90a")["file"] = "../../etc/passwd" },
		"target not held": func(_ string, m map[string]any) { m["targets"] = []string{"sm_90a", "sm_120a"} },
		"virtual target":  func(_ string, m map[string]any) { m["targets"] = []string{"compute_90"} },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			err := edit(t, change)
			if name == "nothing changed" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrArtifact)
		})
	}
	_, err := OpenArtifact(t.TempDir())
	require.ErrorIs(t, err, ErrArtifact, "no manifest: an interrupted compile")
}

func TestArtifactCheckDevice(t *testing.T) {
	dir, _ := fakeArtifact(t, []string{"sm_90a", "sm_120a"}, "compute_90", "13.1")
	a, err := OpenArtifact(dir)
	require.NoError(t, err)
	cases := []struct {
		name   string
		info   DeviceInfo
		target string
		err    string
	}{
		{"H100, cubin", DeviceInfo{Name: "H100", Major: 9, Minor: 0, DriverVersion: 13000}, "sm_90a", ""},
		{"RTX 5090, cubin", DeviceInfo{Name: "RTX 5090", Major: 12, Minor: 0, DriverVersion: 13010}, "sm_120a", ""},
		{"B200, PTX", DeviceInfo{Name: "B200", Major: 10, Minor: 0, DriverVersion: 13010}, "compute_90", ""},
		{"B200, PTX needs 13.1", DeviceInfo{Name: "B200", Major: 10, Minor: 0, DriverVersion: 13000}, "compute_90", "need CUDA 13.1"},
		{"H100, driver 12.8", DeviceInfo{Name: "H100", Major: 9, Minor: 0, DriverVersion: 12080}, "sm_90a", "need CUDA 13.0"},
		{"A100", DeviceInfo{Name: "A100", Major: 8, Minor: 0, DriverVersion: 13000}, "", "--arch sm_80"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target, terr := a.Target(c.info)
			err := a.CheckDevice(c.info)
			if c.target != "" {
				require.NoError(t, terr)
				require.Equal(t, c.target, target)
			}
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrArtifact)
			require.ErrorContains(t, err, c.err)
		})
	}
	// a plain sm_90 cubin runs on a later minor of its major, an sm_90a one does not
	plain := &Artifact{Manifest: Manifest{Targets: []string{"sm_80"}, NVRTC: "12.4"}}
	target, err := plain.Target(DeviceInfo{Major: 8, Minor: 6})
	require.NoError(t, err)
	require.Equal(t, "sm_80", target)
	specific := &Artifact{Manifest: Manifest{Targets: []string{"sm_90a"}}}
	_, err = specific.Target(DeviceInfo{Major: 9, Minor: 1})
	require.ErrorIs(t, err, ErrArtifact)
}

func TestArtifactCheckModel(t *testing.T) {
	a := &Artifact{Dir: "d", Manifest: Manifest{Model: "m", ModelFiles: []ModelFile{
		{Name: "m-00001-of-00002.gguf", Size: 10, SHA256: "aa"}, {Name: "m-00002-of-00002.gguf", Size: 20, SHA256: "bb"}}}}
	ok := []ModelFile{{Name: "x2", Size: 20, SHA256: "bb"}, {Name: "x1", Size: 10, SHA256: "aa"}}
	require.NoError(t, a.CheckModel(ok), "names and order do not matter")
	require.NoError(t, a.CheckModel([]ModelFile{{Size: 20}, {Size: 10}}), "sizes alone")
	require.ErrorIs(t, a.CheckModel([]ModelFile{{Size: 20}, {Size: 11}}), ErrArtifact)
	require.ErrorIs(t, a.CheckModel([]ModelFile{{Size: 10, SHA256: "aa"}, {Size: 20, SHA256: "cc"}}), ErrArtifact)
	require.ErrorIs(t, a.CheckModel(ok[:1]), ErrArtifact)
}

func TestArtifactPicksReplay(t *testing.T) {
	m, err := builtin.Open()
	require.NoError(t, err)
	db, err := tunedb.OpenFS(tunedb.ShippedFS(), "")
	require.NoError(t, err)
	f, _, ok := db.File("nvidia-h200.sm90.132sm.140gib")
	require.True(t, ok)
	// stories260K's shapes have no entries of their own: each family takes
	// the H200's first tuned arm of that family, whatever the class
	arm := map[string]codegen.Point{}
	for _, e := range f.Entries {
		if arm[e.Family] == nil {
			arm[e.Family] = e.Arm
		}
	}
	rec, picks := RecordPicks(func(family, class string) (codegen.Point, bool) {
		p, ok := arm[family]
		return p, ok
	})
	_, _, tuned, err := ArtifactKernels(m, BackendOptions{MaxSeqs: 4, Pick: rec})
	require.NoError(t, err)
	require.NotEmpty(t, picks(), "the test needs picks to replay")
	a := &Artifact{Manifest: Manifest{Picks: picks()}}
	_, _, replayed, err := ArtifactKernels(m, BackendOptions{MaxSeqs: 4, Pick: a.Picker()})
	require.NoError(t, err)
	require.Equal(t, len(tuned), len(replayed))
	for i := range tuned {
		require.Equal(t, tuned[i].Name, replayed[i].Name)
		require.Equal(t, tuned[i].Source, replayed[i].Source)
	}
	// and the picks matter: without them the kernels are others
	_, _, plain, err := ArtifactKernels(m, BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	names := func(ks []*codegen.Kernel) (s []string) {
		for _, k := range ks {
			s = append(s, k.Name)
		}
		return s
	}
	require.NotEqual(t, names(plain), names(tuned))
	none, _ := RecordPicks(nil)
	_, ok = none("gemv", "x")
	require.False(t, ok)
}

func TestUseArtifact(t *testing.T) {
	dir, _ := fakeArtifact(t, []string{"sm_90a"}, "compute_90", "13.0")
	a, err := OpenArtifact(dir)
	require.NoError(t, err)
	info := DeviceInfo{Name: "NVIDIA H100", Major: 9, Minor: 0, SMs: 114, DriverVersion: 13000}
	var notes []string
	o := BackendOptions{Untuned: true, Logf: func(f string, a ...any) { notes = append(notes, f) }}
	require.NoError(t, useArtifact(a, &o, info, 0, 5, 5))
	require.False(t, o.Untuned)
	require.NotNil(t, o.Pick)
	require.Equal(t, 132, o.Multiprocessors, "the artifact's count, not the card's")
	require.Empty(t, notes)
	require.ErrorIs(t, useArtifact(a, &o, info, 0, 3, 5), ErrArtifact, "a pipeline stage")
	info.Major = 12
	require.NoError(t, useArtifact(a, &o, info, 0, 5, 5))
	require.Len(t, notes, 1, "a card without a cubin takes the PTX, and is told so")
	info.Major = 8
	require.ErrorIs(t, useArtifact(a, &o, info, 0, 5, 5), ErrArtifact, "nothing runs below the PTX's compute capability")
}

// TestLoweringEnvListed keeps LoweringEnv in step with envOptions: every
// MEMRA_* variable env.go reads is listed.
func TestLoweringEnvListed(t *testing.T) {
	src, err := os.ReadFile("env.go")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`Getenv\("(MEMRA_[A-Z0-9_]+)"\)|name: +"(MEMRA_[A-Z0-9_]+)"|\{"(MEMRA_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		name := m[1] + m[2] + m[3]
		require.Contains(t, LoweringEnv, name)
	}
	t.Setenv("MEMRA_PDL", "off")
	require.Equal(t, "off", LoweringEnvSet()["MEMRA_PDL"])
}

func TestSplitTargets(t *testing.T) {
	c, p, err := SplitTargets([]string{"sm_90a", "sm_120a", "sm_90a"})
	require.NoError(t, err)
	require.Equal(t, []string{"sm_90a", "sm_120a"}, c)
	require.Equal(t, "compute_90", p)
	c, p, err = SplitTargets([]string{"compute_90"})
	require.NoError(t, err)
	require.Empty(t, c)
	require.Equal(t, "compute_90", p)
	c, p, err = SplitTargets([]string{"sm_120a", "compute_100"})
	require.NoError(t, err)
	require.Equal(t, []string{"sm_120a"}, c)
	require.Equal(t, "compute_100", p)
	for _, bad := range [][]string{nil, {"sm90"}, {"compute_90", "compute_80"}, {"gfx90a"}} {
		_, _, err := SplitTargets(bad)
		require.Error(t, err, bad)
	}
}

// TestArtifactPTXCompiles builds stories260K's artifact with NVRTC as CI
// has it: PTX for compute_90 (a cubin for sm_90a where the NVRTC is 12 or
// later), and checks the PTX is each kernel's.
func TestArtifactPTXCompiles(t *testing.T) {
	nv := nvrtcOrSkip(t)
	m, err := builtin.Open()
	require.NoError(t, err)
	_, _, ks, err := ArtifactKernels(m, BackendOptions{MaxSeqs: 4})
	require.NoError(t, err)
	cache, err := NewCache(filepath.Join(t.TempDir(), "cubin"), nv)
	require.NoError(t, err)
	var cubins []string
	if major, _ := nv.Version(); major >= 12 {
		cubins = []string{"sm_90a"}
	} else {
		_, err := CompileImages(cache, ks[:1], []string{"sm_90a"}, "compute_90", nil)
		require.ErrorContains(t, err, "NVRTC 12.0 or later", "NVRTC 11 cannot make sm_90a cubins, and says what would")
	}
	images, err := CompileImages(cache, ks, cubins, "compute_90", nil)
	require.NoError(t, err)
	dir := t.TempDir()
	major, minor := nv.Version()
	man := &Manifest{NVRTC: fmt.Sprintf("%d.%d", major, minor), Multiprocessors: 132}
	require.NoError(t, WriteArtifact(dir, man, ks, cubins, "compute_90", images))
	a, err := OpenArtifact(dir)
	require.NoError(t, err)
	for _, k := range ks {
		ptx, err := os.ReadFile(filepath.Join(dir, a.byName[k.Name].Files["compute_90"].File))
		require.NoError(t, err)
		require.Regexp(t, `(?m)^\.version \d+\.\d+$`, string(ptx))
		require.Regexp(t, `(?m)^\.target sm_90$`, string(ptx))
		require.Contains(t, string(ptx), ".entry "+k.Name+"(", "the kernel's entry point")
		require.NotContains(t, string(ptx), "\x00")
	}
}
