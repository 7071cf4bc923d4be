package dtype

// Lookup tables for the dot-product loops: a table load is cheaper than an
// integer-to-float conversion, and one load yields both nibbles of a byte.

// i8f maps a byte read as int8 to float32.
var i8f = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(int8(uint8(i)))
	}
	return t
}()

// nibS8 maps a byte to its (low, high) nibbles less 8 (Q4_0).
var nibS8 = func() (t [256][2]float32) {
	for i := range t {
		t[i] = [2]float32{float32(i&15) - 8, float32(i>>4) - 8}
	}
	return t
}()

// nibU maps a byte to its (low, high) nibbles (Q4_K).
var nibU = func() (t [256][2]float32) {
	for i := range t {
		t[i] = [2]float32{float32(i & 15), float32(i >> 4)}
	}
	return t
}()

// nibH maps hb<<8 | byte, hb being two high bits, to (low + 16·(hb&1),
// high + 16·(hb>>1)) (Q5_K).
var nibH = func() (t [1024][2]float32) {
	for i := range t {
		b, hb := i&255, i>>8
		t[i] = [2]float32{float32(b&15 + 16*(hb&1)), float32(b>>4 + 16*(hb>>1))}
	}
	return t
}()

// q6f maps a 6-bit Q6_K code to its value less 32.
var q6f = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(i - 32)
	}
	return t
}()
