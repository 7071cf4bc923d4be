package tunedb

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/memra-ai/memra/codegen"
)

//go:embed defaults
var shippedFS embed.FS

// ShippedFS returns the embedded defaults folder (its *.json files).
func ShippedFS() fs.FS {
	sub, err := fs.Sub(shippedFS, "defaults")
	if err != nil {
		panic("BUG: embedded tunedb defaults: " + err.Error())
	}
	return sub
}

// DefaultUserDir is os.UserConfigDir()/memra/tunedb.
func DefaultUserDir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("tunedb: user config dir: %w", err)
	}
	return filepath.Join(d, "memra", "tunedb"), nil
}

// Origin says where a device's file came from.
type Origin string

// The origins of a file.
const (
	OriginShipped Origin = "shipped" // embedded in the binary
	OriginUser    Origin = "user"    // the user's tunedb folder
)

// DB is the shipped defaults plus the user's entries. User entries override
// shipped ones entry by entry.
type DB struct {
	UserDir    string
	shipped    map[string]*File
	user       map[string]*File
	cpuShipped map[string]*CPUFile // the CPU files (cpu.go)
	cpuUser    map[string]*CPUFile
}

// Open loads the embedded defaults and the user folder (DefaultUserDir when
// userDir is empty). A missing user folder is not an error.
func Open(userDir string) (*DB, error) {
	if userDir == "" {
		var err error
		if userDir, err = DefaultUserDir(); err != nil {
			return nil, err
		}
	}
	return OpenFS(ShippedFS(), userDir)
}

// OpenFS is Open with the shipped files read from shipped (tests use it).
// An empty userDir means no user entries.
func OpenFS(shipped fs.FS, userDir string) (*DB, error) {
	db := &DB{UserDir: userDir}
	var err error
	if db.shipped, db.cpuShipped, err = readAll(shipped, "shipped"); err != nil {
		return nil, err
	}
	db.user, db.cpuUser = map[string]*File{}, map[string]*CPUFile{}
	if userDir != "" {
		if _, serr := os.Stat(userDir); serr == nil {
			if db.user, db.cpuUser, err = readAll(os.DirFS(userDir), userDir); err != nil {
				return nil, err
			}
		}
	}
	return db, nil
}

// readAll reads the GPU and the CPU files of a folder.
func readAll(fsys fs.FS, where string) (map[string]*File, map[string]*CPUFile, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, nil, fmt.Errorf("tunedb: %s: %w", where, err)
	}
	out, cpus := map[string]*File{}, map[string]*CPUFile{}
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, fmt.Errorf("tunedb: %s: %w", where, err)
		}
		key := ""
		if isCPUFile(n) {
			f, err := ParseCPU(b, path.Join(where, n))
			if err != nil {
				return nil, nil, err
			}
			key, cpus[f.Key] = f.Key, f
		} else {
			f, err := Parse(b, path.Join(where, n))
			if err != nil {
				return nil, nil, err
			}
			key, out[f.Key] = f.Key, f
		}
		if n != key+".json" {
			return nil, nil, fmt.Errorf("%w: %s: file name does not match key %s", ErrFormat, path.Join(where, n), key)
		}
	}
	return out, cpus, nil
}

// DeviceInfo summarises one device's entries.
type DeviceInfo struct {
	Key     string
	Device  DeviceKey
	Shipped int // entries shipped
	User    int // entries of the user's
}

// Devices lists every device with entries, sorted by key.
func (db *DB) Devices() []DeviceInfo {
	m := map[string]*DeviceInfo{}
	get := func(f *File) *DeviceInfo {
		if m[f.Key] == nil {
			m[f.Key] = &DeviceInfo{Key: f.Key, Device: f.Device}
		}
		return m[f.Key]
	}
	for _, f := range db.shipped {
		get(f).Shipped = len(f.Entries)
	}
	for _, f := range db.user {
		get(f).User = len(f.Entries)
	}
	var out []DeviceInfo
	for _, d := range m {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// File returns the merged file of device key (user entries over shipped),
// with each entry's origin, or false when the device has none.
func (db *DB) File(key string) (*File, map[string]Origin, bool) {
	s, u := db.shipped[key], db.user[key]
	if s == nil && u == nil {
		return nil, nil, false
	}
	var f *File
	origins := map[string]Origin{}
	if s != nil {
		f = &File{Format: FormatVersion, Key: s.Key, Device: s.Device, Entries: append([]Entry(nil), s.Entries...)}
		for _, e := range s.Entries {
			origins[e.id()] = OriginShipped
		}
	} else {
		f = &File{Format: FormatVersion, Key: u.Key, Device: u.Device}
	}
	if u != nil {
		f.Merge(u.Entries)
		for _, e := range u.Entries {
			origins[e.id()] = OriginUser
		}
	}
	f.Sort()
	return f, origins, true
}

// Put merges entries for device k into the user folder and into db.
func (db *DB) Put(k DeviceKey, entries []Entry) (string, error) {
	if db.UserDir == "" {
		return "", fmt.Errorf("tunedb: no user folder")
	}
	f := db.user[k.String()]
	if f == nil {
		f = NewFile(k)
	}
	next := &File{Format: f.Format, Key: f.Key, Device: f.Device, Entries: append([]Entry(nil), f.Entries...)}
	next.Merge(entries)
	p, err := WriteDir(db.UserDir, next)
	if err != nil {
		return "", err
	}
	db.user[k.String()] = next
	return p, nil
}

// Import validates f and merges its entries into the user folder.
func (db *DB) Import(f *File) (string, error) {
	if err := f.Validate(); err != nil {
		return "", err
	}
	return db.Put(f.Device, f.Entries)
}

// Kind says how a Lookup found its arm.
type Kind int

// The kinds of lookup result, best first.
const (
	KindExact     Kind = iota // an entry for this very card
	KindSameArch              // the nearest card with the same SM major.minor
	KindSameMajor             // the nearest card with the same SM major
	KindDefault               // no entry: the family's default arm
)

func (k Kind) String() string {
	return [...]string{"exact", "same-arch", "same-major", "default"}[k]
}

// Source says where a looked-up arm came from.
type Source struct {
	Kind   Kind
	Origin Origin // shipped or user; empty for KindDefault
	Device string // key of the device whose entry was used; empty for KindDefault
	Entry  *Entry // the entry used; nil for KindDefault (and for a CPU lookup)
}

// String is a one-line description, e.g. "user entry of nvidia-h200.sm90.132sm.140gib".
func (s Source) String() string {
	switch s.Kind {
	case KindExact:
		return fmt.Sprintf("%s entry of %s", s.Origin, s.Device)
	case KindDefault:
		return "family default"
	}
	return fmt.Sprintf("%s entry of %s (%s fallback)", s.Origin, s.Device, s.Kind)
}

// Lookup returns the arm for (family, class) on card key: the card's own
// entry; else that of the nearest card (SM count, then memory) with the same
// SM major.minor; else the same major; else the family's default arm. An
// entry whose arm the family no longer accepts is skipped. An unknown family
// gives a nil arm and KindDefault.
func (db *DB) Lookup(key DeviceKey, family, class string) (codegen.Point, Source) {
	sp, err := codegen.SpaceByName(family)
	if err != nil {
		return nil, Source{Kind: KindDefault}
	}
	type cand struct {
		dev  DeviceKey
		kind Kind
	}
	var cands []cand
	for _, d := range db.Devices() {
		switch {
		case d.Key == key.String():
			cands = append(cands, cand{d.Device, KindExact})
		case d.Device.SMMajor == key.SMMajor && d.Device.SMMinor == key.SMMinor:
			cands = append(cands, cand{d.Device, KindSameArch})
		case d.Device.SMMajor == key.SMMajor:
			cands = append(cands, cand{d.Device, KindSameMajor})
		}
	}
	dist := func(d DeviceKey) int { return abs(d.SMs-key.SMs)*1000 + abs(d.MemGiB-key.MemGiB) }
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].kind != cands[j].kind {
			return cands[i].kind < cands[j].kind
		}
		return dist(cands[i].dev) < dist(cands[j].dev)
	})
	for _, c := range cands {
		f, origins, _ := db.File(c.dev.String())
		e, ok := f.Lookup(family, class)
		if !ok || sp.Valid(e.Arm) != nil {
			continue
		}
		return e.Arm, Source{Kind: c.kind, Origin: origins[e.id()], Device: f.Key, Entry: &e}
	}
	return sp.Default, Source{Kind: KindDefault}
}

// Notice returns the message a caller prints at start about how card key's
// arms will be chosen: empty when the card has its own entries.
func (db *DB) Notice(key DeviceKey) string {
	var arch, major []string
	for _, d := range db.Devices() {
		switch {
		case d.Key == key.String():
			return ""
		case d.Device.SMMajor == key.SMMajor && d.Device.SMMinor == key.SMMinor:
			arch = append(arch, d.Key)
		case d.Device.SMMajor == key.SMMajor:
			major = append(major, d.Key)
		}
	}
	switch {
	case len(arch) > 0:
		return fmt.Sprintf("tunedb: no entries for %s; using the nearest %s card (%s). Run `memra autotune` to tune this card.",
			key, key.Arch(), strings.Join(arch, ", "))
	case len(major) > 0:
		return fmt.Sprintf("tunedb: no entries for %s or any %s card; using the nearest sm_%d card (%s). Run `memra autotune` to tune this card.",
			key, key.Arch(), key.SMMajor, strings.Join(major, ", "))
	}
	return fmt.Sprintf("tunedb: no entries for %s or any sm_%d card; using the kernel families' default arms. Run `memra autotune` to tune this card.",
		key, key.SMMajor)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

var (
	defaultOnce sync.Once
	defaultDB   *DB
	defaultErr  error
)

// Default returns the DB of the embedded defaults and DefaultUserDir, opened
// once per process.
func Default() (*DB, error) {
	defaultOnce.Do(func() { defaultDB, defaultErr = Open("") })
	return defaultDB, defaultErr
}

// Lookup is DB.Lookup on the default DB. If the user folder cannot be read
// (a broken file), only the shipped defaults are used; callers that must
// report that error call Default themselves.
func Lookup(key DeviceKey, family, class string) (codegen.Point, Source) {
	db, err := Default()
	if err != nil {
		if db, err = OpenFS(ShippedFS(), ""); err != nil {
			panic("BUG: embedded tunedb defaults do not parse: " + err.Error())
		}
	}
	return db.Lookup(key, family, class)
}
