package cuda

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/tunedb"
)

// DeviceKey is the tunedb key of the card info describes.
func DeviceKey(info DeviceInfo) tunedb.DeviceKey {
	return tunedb.NewDeviceKey(info.Name, info.Major, info.Minor, info.SMs, info.TotalMem)
}

// TunedPicker returns the arm picker that looks each kernel's (family,
// shape class) up in db for card key: the card's own entry, the nearest
// card's, or (ok false) the family default.
func TunedPicker(db *tunedb.DB, key tunedb.DeviceKey) codegen.ArmPicker {
	return func(family, class string) (codegen.Point, bool) {
		p, src := db.Lookup(key, family, class)
		return p, src.Kind != tunedb.KindDefault && p != nil
	}
}

// openTunedb is db, or tunedb.Default() when nil (the shipped defaults
// alone when the user folder does not read), after logging the tunedb's
// notice about card key.
func openTunedb(db *tunedb.DB, key tunedb.DeviceKey, logf func(string, ...any)) *tunedb.DB {
	if db == nil {
		var err error
		if db, err = tunedb.Default(); err != nil {
			logf("tunedb: %v; using the shipped entries only", err)
			if db, err = tunedb.OpenFS(tunedb.ShippedFS(), ""); err != nil {
				panic("BUG: embedded tunedb defaults do not parse: " + err.Error())
			}
		}
	}
	if n := db.Notice(key); n != "" {
		logf("%s", n)
	}
	return db
}

// borrowLog is a picker's record of the classes it answered from another
// card's entries while the card has entries of its own (a partial file:
// tunedb.Lookup falls back entry by entry, which the start notice cannot
// tell), so the backend can say so once its programs are lowered.
type borrowLog struct {
	mu   sync.Mutex
	key  tunedb.DeviceKey
	from map[string]map[string]bool // card → family/class
}

// borrowingPicker is TunedPicker on openTunedb's DB, recording in the
// returned log the classes it took from another card's entries when card
// key has entries of its own (else the start notice has said where all of
// them come from, and the log is nil).
func borrowingPicker(db *tunedb.DB, key tunedb.DeviceKey, logf func(string, ...any)) (codegen.ArmPicker, *borrowLog) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	db = openTunedb(db, key, logf)
	if db.Notice(key) != "" {
		return TunedPicker(db, key), nil
	}
	bl := &borrowLog{key: key, from: map[string]map[string]bool{}}
	return func(family, class string) (codegen.Point, bool) {
		p, src := db.Lookup(key, family, class)
		if src.Kind != tunedb.KindDefault && src.Kind != tunedb.KindExact && src.Device != "" {
			bl.mu.Lock()
			if bl.from[src.Device] == nil {
				bl.from[src.Device] = map[string]bool{}
			}
			bl.from[src.Device][family+"/"+class] = true
			bl.mu.Unlock()
		}
		return p, src.Kind != tunedb.KindDefault && p != nil
	}, bl
}

// String is the log's message: empty when nothing was borrowed.
func (bl *borrowLog) String() string {
	if bl == nil {
		return ""
	}
	bl.mu.Lock()
	defer bl.mu.Unlock()
	var parts []string
	n := 0
	for card, classes := range bl.from {
		parts = append(parts, fmt.Sprintf("%s: %d", card, len(classes)))
		n += len(classes)
	}
	if n == 0 {
		return ""
	}
	slices.Sort(parts)
	return fmt.Sprintf("tunedb: %d kernel classes of this model have no entry for %s; they use the nearest card's (%s). Run `memra autotune` to tune them.",
		n, bl.key, strings.Join(parts, ", "))
}
