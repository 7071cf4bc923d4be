// Package tunedb stores the autotuner's results: per (device, kernel family,
// shape class) the arm that won on that card, with its time, the runner-up's
// and the arms that failed the exactness gate. Defaults measured on real
// cards ship inside the binary (defaults/*.json, embedded); a user's own
// `memra autotune` runs are stored in os.UserConfigDir()/memra/tunedb and
// override them. A card with no entry borrows the nearest card of the same
// architecture, and says so; with nothing at all the families' default arms
// apply.
package tunedb

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrKey is returned for a device key string that does not parse.
var ErrKey = errors.New("tunedb: bad device key")

// DeviceKey identifies a kind of card: what detection reports.
type DeviceKey struct {
	Name    string // marketing name as the driver reports it, e.g. "NVIDIA H200"
	SMMajor int    // compute capability major
	SMMinor int    // compute capability minor
	SMs     int    // multiprocessor count
	MemGiB  int    // total memory, GiB rounded to nearest
}

// NewDeviceKey builds a key from detected values; totalMem is in bytes.
func NewDeviceKey(name string, major, minor, sms int, totalMem int64) DeviceKey {
	return DeviceKey{Name: name, SMMajor: major, SMMinor: minor, SMs: sms,
		MemGiB: int(math.Round(float64(totalMem) / (1 << 30)))}
}

// slug lower-cases s and turns every run of characters other than a–z and
// 0–9 into one '-'.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// String is the key's stable form, also the file name of its entries:
// "<name slug>.sm<major><minor>.<SMs>sm.<GiB>gib", e.g.
// "nvidia-h200.sm90.132sm.140gib".
func (k DeviceKey) String() string {
	return fmt.Sprintf("%s.sm%d%d.%dsm.%dgib", slug(k.Name), k.SMMajor, k.SMMinor, k.SMs, k.MemGiB)
}

// Arch is the key's "sm_90" style architecture name.
func (k DeviceKey) Arch() string { return fmt.Sprintf("sm_%d%d", k.SMMajor, k.SMMinor) }

// ParseKey parses the String form. The name comes back as its slug.
func ParseKey(s string) (DeviceKey, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] == "" {
		return DeviceKey{}, fmt.Errorf("%w: %q (want name.smXY.Nsm.Ggib)", ErrKey, s)
	}
	num := func(p, prefix, suffix string) (int, bool) {
		if !strings.HasPrefix(p, prefix) || !strings.HasSuffix(p, suffix) {
			return 0, false
		}
		v, err := strconv.Atoi(p[len(prefix) : len(p)-len(suffix)])
		return v, err == nil && v >= 0
	}
	sm, ok1 := num(parts[1], "sm", "")
	sms, ok2 := num(parts[2], "", "sm")
	gib, ok3 := num(parts[3], "", "gib")
	if !ok1 || !ok2 || !ok3 || sm < 10 || slug(parts[0]) != parts[0] {
		return DeviceKey{}, fmt.Errorf("%w: %q (want name.smXY.Nsm.Ggib)", ErrKey, s)
	}
	// compute capability minors are one digit: sm90 → 9.0, sm120 → 12.0
	return DeviceKey{Name: parts[0], SMMajor: sm / 10, SMMinor: sm % 10, SMs: sms, MemGiB: gib}, nil
}
