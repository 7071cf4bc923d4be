package cuda

import (
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

// tunedPicker is TunedPicker on db (tunedb.Default() when nil; the shipped
// defaults alone when the user folder does not read), after logging the
// tunedb's notice about card key.
func tunedPicker(db *tunedb.DB, key tunedb.DeviceKey, logf func(string, ...any)) codegen.ArmPicker {
	if logf == nil {
		logf = func(string, ...any) {}
	}
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
	return TunedPicker(db, key)
}
