package tunedb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/memra-ai/memra/codegen"
)

// ErrFormat is returned for a tunedb file that does not parse or holds an
// inconsistent entry.
var ErrFormat = errors.New("tunedb: bad file")

// FormatVersion is the version of the file format written by this package.
const FormatVersion = 1

// Timed is an arm with its measured time.
type Timed struct {
	Arm     codegen.Point `json:"arm"`
	ArmName string        `json:"arm_name"`
	TimeUS  float64       `json:"time_us"` // median µs per launch
}

// Failure is an arm that did not pass: a compile or launch error, or an
// output outside the family's tolerance.
type Failure struct {
	ArmName string  `json:"arm_name"`
	Reason  string  `json:"reason"`
	RelErr  float64 `json:"rel_err,omitempty"`
}

// Entry is the tuning result of one kernel family at one shape class on one
// kind of card.
type Entry struct {
	Family       string        `json:"family"`   // codegen family, e.g. "gemv"
	Class        string        `json:"class"`    // shape class, e.g. "q4_k_n6144_k4096"
	Arm          codegen.Point `json:"arm"`      // the chosen arm
	ArmName      string        `json:"arm_name"` // its short name
	TimeUS       float64       `json:"time_us"`  // its median µs per launch
	RunnerUp     *Timed        `json:"runner_up,omitempty"`
	Default      *Timed        `json:"default,omitempty"` // the family's default arm, for comparison
	Tried        int           `json:"tried"`             // arms measured
	Failed       []Failure     `json:"failed,omitempty"`  // arms that failed the gate, never chosen
	Date         string        `json:"date"`              // YYYY-MM-DD of the run
	MemraVersion string        `json:"memra_version"`
	Driver       int           `json:"driver"` // CUDA driver version, e.g. 13000
}

// id is the entry's identity within a device's file.
func (e Entry) id() string { return e.Family + "/" + e.Class }

// File is the tunedb file of one device: <key>.json.
type File struct {
	Format  int       `json:"format"`
	Key     string    `json:"key"` // Device.String()
	Device  DeviceKey `json:"device"`
	Entries []Entry   `json:"entries"` // sorted by family, then class
}

// Validate checks the file's key and every entry: a known family, a valid
// arm, a positive time, no duplicate (family, class).
func (f *File) Validate() error {
	if f.Format != FormatVersion {
		return fmt.Errorf("%w: format %d (this memra reads %d)", ErrFormat, f.Format, FormatVersion)
	}
	if f.Key != f.Device.String() {
		return fmt.Errorf("%w: key %q does not match device %q", ErrFormat, f.Key, f.Device.String())
	}
	seen := map[string]bool{}
	for i, e := range f.Entries {
		sp, err := codegen.SpaceByName(e.Family)
		if err != nil {
			return fmt.Errorf("%w: entry %d: %w", ErrFormat, i, err)
		}
		if e.Class == "" {
			return fmt.Errorf("%w: entry %d (%s): empty shape class", ErrFormat, i, e.Family)
		}
		if err := sp.Valid(e.Arm); err != nil {
			return fmt.Errorf("%w: entry %d (%s): %w", ErrFormat, i, e.id(), err)
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

// Sort orders the entries by family, then class.
func (f *File) Sort() {
	sort.Slice(f.Entries, func(i, j int) bool { return f.Entries[i].id() < f.Entries[j].id() })
}

// Lookup returns the entry for (family, class).
func (f *File) Lookup(family, class string) (Entry, bool) {
	for _, e := range f.Entries {
		if e.Family == family && e.Class == class {
			return e, true
		}
	}
	return Entry{}, false
}

// Merge puts entries into f, replacing those with the same (family, class).
func (f *File) Merge(entries []Entry) {
	idx := map[string]int{}
	for i, e := range f.Entries {
		idx[e.id()] = i
	}
	for _, e := range entries {
		if i, ok := idx[e.id()]; ok {
			f.Entries[i] = e
		} else {
			idx[e.id()] = len(f.Entries)
			f.Entries = append(f.Entries, e)
		}
	}
	f.Sort()
}

// NewFile returns an empty file for device k.
func NewFile(k DeviceKey) *File { return &File{Format: FormatVersion, Key: k.String(), Device: k} }

// Parse decodes and validates a tunedb file; name is used in errors.
func Parse(data []byte, name string) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	f := &File{}
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, name, err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// ReadFile reads and validates the tunedb file at path.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tunedb: %w", err)
	}
	return Parse(b, path)
}

// Marshal returns f as indented JSON with a trailing newline.
func (f *File) Marshal() ([]byte, error) {
	f.Sort()
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("tunedb: encode %s: %w", f.Key, err)
	}
	return append(b, '\n'), nil
}

// WriteDir validates f and writes it to dir/<key>.json (atomically).
func WriteDir(dir string, f *File) (string, error) {
	if err := f.Validate(); err != nil {
		return "", err
	}
	b, err := f.Marshal()
	if err != nil {
		return "", err
	}
	return writeAtomic(dir, f.Key, b)
}

// writeAtomic writes b as dir/key.json through a temporary file renamed
// over it, so a reader never sees half a file; it returns the path.
func writeAtomic(dir, key string, b []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("tunedb: %w", err)
	}
	path := filepath.Join(dir, key+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", fmt.Errorf("tunedb: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("tunedb: %w", err)
	}
	return path, nil
}
