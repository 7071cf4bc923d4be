package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/memra-ai/memra/codegen"
)

// A compiled artifact is what `memra compile -o DIR` writes for a model:
// the CUDA C, the launch plan, the kernels compiled ahead of time (a cubin
// per target architecture and PTX as the fallback the driver compiles
// for any newer card) and manifest.json, which records how they were made.
// A backend given one (BackendOptions.Artifact) loads its kernels with the
// CUDA driver alone: NVRTC is never opened. It still lowers the model
// itself, with the tunedb picks the manifest recorded, and takes a
// kernel's image only when the kernel's source and compile options are
// the ones the artifact was built from, so an artifact can never run code
// of another configuration.

// ArtifactFormat is the manifest format this build reads and writes.
const ArtifactFormat = 2

// ErrArtifact is an artifact that does not fit: a malformed manifest, a
// missing or altered image, or a card, driver, model or configuration
// other than the one it was compiled for.
var ErrArtifact = errors.New("cuda: compiled artifact does not fit")

// Manifest is manifest.json.
type Manifest struct {
	Format      int         `json:"format"`
	Model       string      `json:"model"`                // the path compiled
	ModelSpec   string      `json:"model_spec,omitempty"` // the hf: spec it came from
	ModelSHA256 string      `json:"model_sha256"`         // of the files' bytes in name order
	ModelFiles  []ModelFile `json:"model_files"`
	ModelArch   string      `json:"model_arch"`
	// Target lists the cubin targets, comma-separated (Targets joined).
	Target  string   `json:"target_arch"`
	Targets []string `json:"targets"`
	// PTX is the virtual architecture of the PTX images (compute_90).
	PTX   string            `json:"ptx"`
	Arms  map[string]string `json:"arms"`
	NVRTC string            `json:"nvrtc"` // the NVRTC version that compiled the images
	Memra string            `json:"memra_version"`
	// The lowering's configuration.
	MaxSeqs         int    `json:"max_seqs"`
	Context         int    `json:"context"`
	PrefillTokens   int    `json:"prefill_tokens"`
	Cache           string `json:"kv_cache"`
	Multiprocessors int    `json:"multiprocessors"`
	// Numerics is the decode products' numerical class (Numerics.String);
	// empty in artifacts compiled before it was recorded, which are "off".
	Numerics string `json:"numerics,omitempty"`
	// Card is the tunedb key whose entries chose the arms ("" when the
	// family defaults did); Picks are the arms it chose.
	Card  string            `json:"card,omitempty"`
	Picks []Pick            `json:"picks"`
	Env   map[string]string `json:"env,omitempty"` // LoweringEnv's variables set at compile time
	// PlanSHA256 hashes plan.txt (both programs).
	PlanSHA256 string         `json:"plan_sha256"`
	Kernels    []string       `json:"kernels"`
	Images     []KernelImages `json:"images"`
}

// ModelFile is one file of the compiled model.
type ModelFile struct {
	Name   string `json:"name"` // the file's base name
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Pick is one tunedb choice of the lowering.
type Pick struct {
	Family string        `json:"family"`
	Class  string        `json:"class"`
	Arm    codegen.Point `json:"arm"`
}

// KernelImages are one kernel's compiled images.
type KernelImages struct {
	Kernel       string               `json:"kernel"`
	SourceSHA256 string               `json:"source_sha256"`
	Options      []string             `json:"options,omitempty"` // NVRTC options besides the target
	Files        map[string]ImageFile `json:"files"`             // by target (sm_90a, compute_90)
}

// ImageFile is one image on disk, relative to the artifact.
type ImageFile struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Artifact is an opened artifact: its manifest and every image, checked
// against the manifest's sizes and hashes.
type Artifact struct {
	Dir      string
	Manifest Manifest
	byName   map[string]*KernelImages
	data     map[string]map[string][]byte // kernel → target → image
}

// archRE reads sm_90a, sm_120a, sm_86 and compute_90.
var archRE = regexp.MustCompile(`^(sm|compute)_(\d{2,3})(a?)$`)

// parseArch splits an architecture name into its kind, compute capability
// and whether it is arch-specific (the "a" variants).
func parseArch(s string) (virtual bool, major, minor int, specific bool, err error) {
	m := archRE.FindStringSubmatch(s)
	if m == nil {
		return false, 0, 0, false, fmt.Errorf("%w: architecture %q (want sm_90a, sm_120a, compute_90, …)", ErrArg, s)
	}
	n, _ := strconv.Atoi(m[2])
	return m[1] == "compute", n / 10, n % 10, m[3] == "a", nil
}

// OpenArtifact reads DIR/manifest.json and every image it lists, each
// checked against its recorded size and SHA-256.
func OpenArtifact(dir string) (*Artifact, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	a := &Artifact{Dir: dir, byName: map[string]*KernelImages{}, data: map[string]map[string][]byte{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a.Manifest); err != nil {
		return nil, fmt.Errorf("%w: %s/manifest.json: %v", ErrArtifact, dir, err)
	}
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrArtifact, dir, err)
	}
	return a, nil
}

// check validates the manifest and loads the images.
func (a *Artifact) check() error {
	m := &a.Manifest
	if m.Format != ArtifactFormat {
		return fmt.Errorf("manifest format %d; this memra reads format %d (compile the model again)", m.Format, ArtifactFormat)
	}
	if _, err := nvrtcVersion(m.NVRTC); err != nil {
		return err
	}
	if _, err := m.NumericsClass(); err != nil {
		return err
	}
	if m.PTX == "" && len(m.Targets) == 0 {
		return errors.New("the manifest names no target and no PTX")
	}
	for _, t := range m.Targets {
		if virtual, _, _, _, err := parseArch(t); err != nil || virtual {
			return fmt.Errorf("target %q is not a cubin architecture (sm_XY)", t)
		}
	}
	if m.PTX != "" {
		if virtual, _, _, _, err := parseArch(m.PTX); err != nil || !virtual {
			return fmt.Errorf("ptx %q is not a virtual architecture (compute_XY)", m.PTX)
		}
	}
	want := slices.Clone(m.Targets)
	if m.PTX != "" {
		want = append(want, m.PTX)
	}
	for i := range m.Images {
		ki := &m.Images[i]
		if _, dup := a.byName[ki.Kernel]; dup || ki.Kernel == "" {
			return fmt.Errorf("kernel %q listed twice or unnamed", ki.Kernel)
		}
		a.byName[ki.Kernel] = ki
		a.data[ki.Kernel] = map[string][]byte{}
		for _, t := range want {
			f, ok := ki.Files[t]
			if !ok {
				return fmt.Errorf("kernel %s has no image for %s", ki.Kernel, t)
			}
			if !filepath.IsLocal(f.File) {
				return fmt.Errorf("kernel %s: image path %q leaves the artifact", ki.Kernel, f.File)
			}
			b, err := os.ReadFile(filepath.Join(a.Dir, f.File))
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if int64(len(b)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
				return fmt.Errorf("image %s has %d bytes and SHA-256 %x; the manifest says %d and %s", f.File, len(b), sum, f.Size, f.SHA256)
			}
			if t == m.PTX {
				b = append(b, 0) // cuModuleLoadData takes NUL-terminated PTX
			}
			a.data[ki.Kernel][t] = b
		}
	}
	for _, k := range m.Kernels {
		if a.byName[k] == nil {
			return fmt.Errorf("kernel %s is listed but has no images", k)
		}
	}
	return nil
}

// nvrtcVersion reads "13.0" as the CUDA version number the driver reports
// (13000).
func nvrtcVersion(s string) (int, error) {
	maj, min, ok := strings.Cut(s, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || a < 11 || b < 0 || b > 9 {
		return 0, fmt.Errorf("nvrtc version %q (want MAJOR.MINOR)", s)
	}
	return a*1000 + b*10, nil
}

// cudaVersion writes a driver's CUDA version number (12040) as 12.4.
func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Target returns the image the artifact has for a card: a cubin of its
// architecture (an sm_XY cubin also runs on a later minor of the same
// major; an sm_XYa one only on XY), else the PTX when the card is at least
// its compute capability, which the driver then compiles at load.
func (a *Artifact) Target(info DeviceInfo) (string, error) {
	for _, t := range a.Manifest.Targets {
		_, major, minor, specific, err := parseArch(t)
		if err != nil {
			continue
		}
		if major == info.Major && (minor == info.Minor || (!specific && minor < info.Minor)) {
			return t, nil
		}
	}
	if a.Manifest.PTX != "" {
		_, major, minor, _, err := parseArch(a.Manifest.PTX)
		if err == nil && (info.Major > major || (info.Major == major && info.Minor >= minor)) {
			return a.Manifest.PTX, nil
		}
	}
	have := "no PTX"
	if a.Manifest.PTX != "" {
		have = "PTX for " + a.Manifest.PTX
	}
	return "", fmt.Errorf("%w: the card is %s (%s, compute capability %d.%d); the artifact in %s has cubins for [%s] and %s: compile it with --arch %s",
		ErrArtifact, info.Name, info.Arch(), info.Major, info.Minor, a.Dir, strings.Join(a.Manifest.Targets, ", "), have, info.Arch())
}

// CheckDevice refuses a card the artifact has no image for, and a driver
// too old for its images: a cubin from NVRTC X.Y needs a driver of CUDA
// X.0 or later, PTX one of X.Y or later.
func (a *Artifact) CheckDevice(info DeviceInfo) error {
	t, err := a.Target(info)
	if err != nil {
		return err
	}
	need, err := nvrtcVersion(a.Manifest.NVRTC)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrArtifact, err)
	}
	kind := "PTX"
	if t != a.Manifest.PTX {
		need, kind = need/1000*1000, "cubins"
	}
	if info.DriverVersion < need {
		return fmt.Errorf("%w: the driver supports CUDA %s; the artifact's %s for %s (NVRTC %s) need CUDA %s or later: update the driver or compile with an older NVRTC",
			ErrArtifact, cudaVersion(info.DriverVersion), kind, t, a.Manifest.NVRTC, cudaVersion(need))
	}
	return nil
}

// CheckModel refuses a model whose files are not the compiled model's:
// the same sizes and SHA-256 digests, whatever their names. Files with an
// empty SHA256 compare by size alone (a quick look before hashing).
func (a *Artifact) CheckModel(files []ModelFile) error {
	want := a.Manifest.ModelFiles
	hashed := len(files) > 0 && files[0].SHA256 != ""
	key := func(f ModelFile) string {
		if hashed {
			return fmt.Sprintf("%d %s", f.Size, f.SHA256)
		}
		return strconv.FormatInt(f.Size, 10)
	}
	var got, exp []string
	for _, f := range files {
		got = append(got, key(f))
	}
	for _, f := range want {
		exp = append(exp, key(f))
	}
	sort.Strings(got)
	sort.Strings(exp)
	if !slices.Equal(got, exp) {
		names := make([]string, len(want))
		for i, f := range want {
			names[i] = fmt.Sprintf("%s (%d bytes)", f.Name, f.Size)
		}
		return fmt.Errorf("%w: the model is not the one the artifact in %s was compiled from (%s: %s)",
			ErrArtifact, a.Dir, a.Manifest.Model, strings.Join(names, ", "))
	}
	return nil
}

// Picker replays the recorded tunedb picks: the lowering chooses the arms
// it chose when compiled, on any card.
func (a *Artifact) Picker() codegen.ArmPicker {
	picks := map[[2]string]codegen.Point{}
	for _, p := range a.Manifest.Picks {
		picks[[2]string{p.Family, p.Class}] = p.Arm
	}
	return func(family, class string) (codegen.Point, bool) {
		p, ok := picks[[2]string{family, class}]
		return p, ok
	}
}

// RecordPicks wraps pick (nil: none) so that its choices can be written
// to a manifest: picks returns those it made, each once, in a stable order.
func RecordPicks(pick codegen.ArmPicker) (recording codegen.ArmPicker, picks func() []Pick) {
	seen := map[[2]string]codegen.Point{}
	recording = func(family, class string) (codegen.Point, bool) {
		if pick == nil {
			return nil, false
		}
		p, ok := pick(family, class)
		if ok {
			seen[[2]string{family, class}] = p
		}
		return p, ok
	}
	picks = func() []Pick {
		out := make([]Pick, 0, len(seen))
		for k, p := range seen {
			out = append(out, Pick{Family: k[0], Class: k[1], Arm: p})
		}
		slices.SortFunc(out, func(a, b Pick) int { return strings.Compare(a.Family+"\x00"+a.Class, b.Family+"\x00"+b.Class) })
		return out
	}
	return recording, picks
}

// images returns the artifact's image of every kernel of ks for the
// card: a kernel whose name, source or compile options are not the
// artifact's is refused, naming the configuration it was compiled for.
func (a *Artifact) images(ks []*codegen.Kernel, info DeviceInfo) (map[string][]byte, error) {
	t, err := a.Target(info)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, k := range ks {
		if _, done := out[k.Name]; done {
			continue
		}
		if err := a.has(k); err != nil {
			return nil, err
		}
		out[k.Name] = a.data[k.Name][t]
	}
	return out, nil
}

// has returns nil where the artifact holds k as images takes it (its
// name, its source, no compile options), else an error saying which.
func (a *Artifact) has(k *codegen.Kernel) error {
	rec := a.byName[k.Name]
	sum := sha256.Sum256([]byte(k.Source))
	switch {
	case rec == nil:
		return fmt.Errorf("%w: kernel %s of this configuration is not in %s; %s", ErrArtifact, k.Name, a.Dir, a.configuration())
	case rec.SourceSHA256 != hex.EncodeToString(sum[:]):
		return fmt.Errorf("%w: kernel %s's source is not the one compiled into %s (another memra version or configuration); %s", ErrArtifact, k.Name, a.Dir, a.configuration())
	case len(rec.Options) > 0:
		return fmt.Errorf("%w: kernel %s is compiled with options %q in %s, this run wants none; %s", ErrArtifact, k.Name, rec.Options, a.Dir, a.configuration())
	}
	return nil
}

// holds reports whether the artifact holds every kernel of ks (has).
func (a *Artifact) holds(ks []*codegen.Kernel) bool {
	for _, k := range ks {
		if a.has(k) != nil {
			return false
		}
	}
	return true
}

// configuration describes what the artifact was compiled for, for errors.
func (a *Artifact) configuration() string {
	m := &a.Manifest
	env := make([]string, 0, len(m.Env))
	for k, v := range m.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	s := fmt.Sprintf("it was compiled by memra %s for max_seqs %d, context %d, prefill_tokens %d, kv_cache %s, %d multiprocessors",
		m.Memra, m.MaxSeqs, m.Context, m.PrefillTokens, m.Cache, m.Multiprocessors)
	if len(env) > 0 {
		s += ", " + strings.Join(env, " ")
	}
	return s + ": run with that configuration, or compile again with this one"
}

// NumericsClass is the numerical class the artifact was compiled in: an
// artifact that records none was compiled in NumericsWidth, the only
// class memra compile had before the field.
func (m *Manifest) NumericsClass() (Numerics, error) {
	if m.Numerics == "" {
		return NumericsWidth, nil
	}
	n, err := ParseNumerics(m.Numerics)
	if err != nil {
		return NumericsDefault, fmt.Errorf("manifest numerics %q: want int8, f16 or off", m.Numerics)
	}
	return n.Resolve(), nil
}
