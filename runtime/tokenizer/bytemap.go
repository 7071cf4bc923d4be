package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is the GPT-2 byte map: printable bytes stand for themselves and
// the 68 others, in ascending order, for U+0100, U+0101, …
var byteToRune [256]rune

// runeToByte inverts byteToRune; -1 marks a rune outside the map.
var runeToByte [0x144]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(0x100)
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteMap encodes raw bytes as a GPT-2 byte-mapped string.
func byteMap(raw string) string {
	var sb strings.Builder
	sb.Grow(len(raw) * 2)
	for i := 0; i < len(raw); i++ {
		sb.WriteRune(byteToRune[raw[i]])
	}
	return sb.String()
}

// byteUnmap decodes a byte-mapped string to raw bytes; ok is false when a
// character lies outside the map.
func byteUnmap(s string) (raw string, ok bool) {
	buf := make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return "", false
		}
		buf = append(buf, byte(runeToByte[r]))
	}
	return string(buf), true
}

// validString turns b into a string, replacing every byte that does not
// start a valid UTF-8 sequence with U+FFFD (one replacement per byte).
func validString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			sb.WriteRune(utf8.RuneError)
			b = b[1:]
			continue
		}
		sb.Write(b[:n])
		b = b[n:]
	}
	return sb.String()
}
