package tunedb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The CPU executor's arms. A CPU file holds, per product class, the
// blocking that ran fastest on one kind of CPU; its key names the CPU's
// model, the instruction set of its int8 kernels and its core count, and
// its file name starts with "cpu-" so that GPU and CPU files share the
// folders. A CPU without an entry borrows the nearest CPU (core count) with
// the same instruction set, as a card borrows the nearest card of its
// architecture; else the family's default arm applies.

// CPUFamily is the family of the CPU executor's int8 and float products.
const CPUFamily = "cpu_product"

// CPUKnobs are cpu_product's knobs and their searched values: token_block,
// the tokens of one kernel call (0: the kernel's most); token_tile, the
// tokens the weight tiles sweep at a time (0: all of a step's).
var CPUKnobs = map[string][]int{
	"token_block": {0, 1, 2, 3, 4, 5, 6, 7, 8},
	"token_tile":  {0, 16, 32, 64, 128, 256},
}

// CPUDefault is cpu_product's arm where no CPU has an entry.
var CPUDefault = map[string]int{"token_block": 0, "token_tile": 0}

// CPUArmName is an arm's short name: "b4_t64" (b0: the kernel's most, t0:
// all tokens).
func CPUArmName(arm map[string]int) string {
	return fmt.Sprintf("b%d_t%d", arm["token_block"], arm["token_tile"])
}

// validCPUArm checks that arm sets exactly cpu_product's knobs to values
// they take.
func validCPUArm(arm map[string]int) error {
	if len(arm) != len(CPUKnobs) {
		return fmt.Errorf("%w: %s arm %v: want knobs token_block, token_tile", ErrFormat, CPUFamily, arm)
	}
	for k, v := range arm {
		vals, ok := CPUKnobs[k]
		if !ok || !slices.Contains(vals, v) {
			return fmt.Errorf("%w: %s arm %v: %s=%d is not a value it takes", ErrFormat, CPUFamily, arm, k, v)
		}
	}
	return nil
}

// CPUKey identifies a kind of CPU.
type CPUKey struct {
	Model string // the model name (/proc/cpuinfo), e.g. "Intel(R) Xeon(R) Processor"
	ISA   string // the int8 kernels' instruction set (dtype.Q8Kernels): avx512vnni, avx2, go
	Cores int    // the cores the executor runs on
}

// String is the key's stable form and file name: "cpu-<model slug>.<isa>.<cores>c".
func (k CPUKey) String() string {
	return fmt.Sprintf("cpu-%s.%s.%dc", slug(k.Model), slug(k.ISA), k.Cores)
}

// CPUEntry is the tuning result of one product class on one kind of CPU.
type CPUEntry struct {
	Family       string         `json:"family"`   // CPUFamily
	Class        string         `json:"class"`    // product class, e.g. "q4_k_n8192_k2048_m256"
	Arm          map[string]int `json:"arm"`      // the chosen arm
	ArmName      string         `json:"arm_name"` // CPUArmName(Arm)
	TimeUS       float64        `json:"time_us"`  // its median µs of thread CPU time for one product
	RunnerUp     *CPUTimed      `json:"runner_up,omitempty"`
	Default      *CPUTimed      `json:"default,omitempty"`
	Tried        int            `json:"tried"`
	Date         string         `json:"date"`
	MemraVersion string         `json:"memra_version"`
}

// CPUTimed is an arm with its measured time.
type CPUTimed struct {
	Arm     map[string]int `json:"arm"`
	ArmName string         `json:"arm_name"`
	TimeUS  float64        `json:"time_us"`
}

func (e CPUEntry) id() string { return e.Family + "/" + e.Class }

// CPUFile is the tunedb file of one kind of CPU: <key>.json.
type CPUFile struct {
	Format  int        `json:"format"`
	Key     string     `json:"key"`
	Device  CPUKey     `json:"cpu"`
	Entries []CPUEntry `json:"entries"`
}

// Validate checks the key and every entry.
func (f *CPUFile) Validate() error {
	if f.Format != FormatVersion {
		return fmt.Errorf("%w: format %d (this memra reads %d)", ErrFormat, f.Format, FormatVersion)
	}
	if f.Key != f.Device.String() {
		return fmt.Errorf("%w: key %q does not match CPU %q", ErrFormat, f.Key, f.Device.String())
	}
	seen := map[string]bool{}
	for i, e := range f.Entries {
		if e.Family != CPUFamily || e.Class == "" {
			return fmt.Errorf("%w: entry %d: family %q class %q", ErrFormat, i, e.Family, e.Class)
		}
		if err := validCPUArm(e.Arm); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i, e.id(), err)
		}
		if !(e.TimeUS > 0) {
			return fmt.Errorf("%w: entry %d (%s): time %v", ErrFormat, i, e.id(), e.TimeUS)
		}
		if seen[e.id()] {
			return fmt.Errorf("%w: entry %d: duplicate %s", ErrFormat, i, e.id())
		}
		seen[e.id()] = true
	}
	return nil
}

// Merge puts entries into f, replacing those of the same class.
func (f *CPUFile) Merge(entries []CPUEntry) {
	for _, e := range entries {
		i := slices.IndexFunc(f.Entries, func(o CPUEntry) bool { return o.id() == e.id() })
		if i >= 0 {
			f.Entries[i] = e
		} else {
			f.Entries = append(f.Entries, e)
		}
	}
	sort.Slice(f.Entries, func(i, j int) bool { return f.Entries[i].id() < f.Entries[j].id() })
}

// ParseCPU decodes and validates a CPU tunedb file; name is used in errors.
func ParseCPU(data []byte, name string) (*CPUFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	f := &CPUFile{}
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, name, err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// isCPUFile tells the CPU files of a folder from the GPU ones.
func isCPUFile(name string) bool { return strings.HasPrefix(name, "cpu-") }

// CPULookup returns the arm of class on CPU key: the CPU's own entry, user
// before shipped; else that of the nearest CPU (core count) with the same
// instruction set; else CPUDefault.
func (db *DB) CPULookup(key CPUKey, class string) (map[string]int, Source) {
	type cand struct {
		f      *CPUFile
		origin Origin
		kind   Kind
		dist   int
	}
	var cands []cand
	for _, set := range []struct {
		files  map[string]*CPUFile
		origin Origin
	}{{db.cpuUser, OriginUser}, {db.cpuShipped, OriginShipped}} {
		for _, f := range set.files {
			switch {
			case f.Key == key.String():
				cands = append(cands, cand{f, set.origin, KindExact, 0})
			case f.Device.ISA == key.ISA:
				cands = append(cands, cand{f, set.origin, KindSameArch, abs(f.Device.Cores - key.Cores)})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].kind != cands[j].kind {
			return cands[i].kind < cands[j].kind
		}
		return cands[i].dist < cands[j].dist
	})
	for _, c := range cands {
		for _, e := range c.f.Entries {
			if e.Class == class && validCPUArm(e.Arm) == nil {
				e := e
				return e.Arm, Source{Kind: c.kind, Origin: c.origin, Device: c.f.Key}
			}
		}
	}
	return CPUDefault, Source{Kind: KindDefault}
}

// PutCPU merges entries for CPU k into the user folder and into db, and
// returns the file's path.
func (db *DB) PutCPU(k CPUKey, entries []CPUEntry) (string, error) {
	if db.UserDir == "" {
		return "", fmt.Errorf("tunedb: no user folder")
	}
	return db.putCPU(db.UserDir, db.cpuUser, k, entries)
}

// WriteCPU merges entries for CPU k into the file of folder dir (a
// shipped-defaults folder) and returns its path.
func WriteCPU(dir string, k CPUKey, entries []CPUEntry) (string, error) {
	files := map[string]*CPUFile{}
	if b, err := os.ReadFile(filepath.Join(dir, k.String()+".json")); err == nil {
		f, err := ParseCPU(b, k.String())
		if err != nil {
			return "", err
		}
		files[f.Key] = f
	}
	return (&DB{}).putCPU(dir, files, k, entries)
}

func (db *DB) putCPU(dir string, files map[string]*CPUFile, k CPUKey, entries []CPUEntry) (string, error) {
	f := files[k.String()]
	if f == nil {
		f = &CPUFile{Format: FormatVersion, Key: k.String(), Device: k}
	}
	next := &CPUFile{Format: f.Format, Key: f.Key, Device: f.Device, Entries: slices.Clone(f.Entries)}
	next.Merge(entries)
	if err := next.Validate(); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return "", fmt.Errorf("tunedb: encode %s: %w", next.Key, err)
	}
	path, err := writeAtomic(dir, next.Key, append(b, '\n'))
	if err != nil {
		return "", err
	}
	files[next.Key] = next
	return path, nil
}

// CPULookup is DB.CPULookup on the default DB (the shipped files only, when
// the user folder cannot be read).
func CPULookup(key CPUKey, class string) (map[string]int, Source) {
	db, err := Default()
	if err != nil {
		if db, err = OpenFS(ShippedFS(), ""); err != nil {
			panic("BUG: embedded tunedb defaults do not parse: " + err.Error())
		}
	}
	return db.CPULookup(key, class)
}
