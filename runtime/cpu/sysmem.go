package cpu

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// systemMemory returns the machine's memory in bytes (MemTotal of
// /proc/meminfo), or 8 GiB where it cannot be read.
func systemMemory() int64 {
	const fallback = 8 << 30
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallback
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil || kb <= 0 {
			return fallback
		}
		return kb << 10
	}
	return fallback
}
