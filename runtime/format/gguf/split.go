package gguf

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// Split files. A model too large for one file (or for one upload) is cut
// into shards named PREFIX-00001-of-00003.gguf, …: each shard is a GGUF
// file of its own whose tensors' data lie in that shard; the first holds
// every metadata entry, the others only the split keys. Every shard
// carries the three keys below.
const (
	KeySplitNo      = "split.no"            // uint16: the shard's index, from 0
	KeySplitCount   = "split.count"         // uint16: the shards in all
	KeySplitTensors = "split.tensors.count" // int32: the tensors of all shards together
)

// splitName matches a shard's file name and captures its prefix, index
// and count.
var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// SplitName returns the file name of shard i (from 0) of n: "PREFIX-00001-of-00003.gguf".
func SplitName(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

// ParseSplitName reports the prefix, index (from 0) and count a shard's
// file name carries; ok is false for a name that is not a shard's.
func ParseSplitName(name string) (prefix string, i, n int, ok bool) {
	m := splitName.FindStringSubmatch(name)
	if m == nil {
		return "", 0, 0, false
	}
	i, _ = strconv.Atoi(m[2])
	n, _ = strconv.Atoi(m[3])
	if i < 1 || n < 1 || i > n {
		return "", 0, 0, false
	}
	return m[1], i - 1, n, true
}

// SplitInfo reads a shard's split keys: its index, the shard count and the
// tensors of all shards. ok is false for a file without split.count (or
// with a count of 1); a file with inconsistent keys is ErrCorrupt.
func (f *File) SplitInfo() (no, count, tensors int, ok bool, err error) {
	c, has := f.Uint(KeySplitCount)
	if !has || c <= 1 {
		return 0, 1, len(f.Tensors), false, nil
	}
	n, hasNo := f.Uint(KeySplitNo)
	tv, hasT := f.Lookup(KeySplitTensors)
	t, okT := tv.Int()
	if !hasNo || !hasT || !okT || n >= c || c > 1<<16 || t < 0 || t > math32 {
		return 0, 0, 0, false, fmt.Errorf("%w: split keys %s=%v %s=%v %s=%v", ErrCorrupt, KeySplitNo, n, KeySplitCount, c, KeySplitTensors, tv)
	}
	return int(n), int(c), int(t), true, nil
}

const math32 = 1<<31 - 1

// WriteSplit writes f as n shards (n ≥ 2), in the layout described above:
// the tensors in f's order, cut into runs of about equal bytes (each shard
// holds at least one tensor), shard 0 with all of f's metadata. open
// returns the writer of shard i; WriteSplit does not close it.
func WriteSplit(f *File, n int, open func(i int) (io.Writer, error)) error {
	if n < 2 || n > len(f.Tensors) {
		return fmt.Errorf("%w: %d shards of %d tensors", ErrWriter, n, len(f.Tensors))
	}
	var total uint64
	for i := range f.Tensors {
		total += f.Tensors[i].Bytes()
	}
	// cut after the tensor that passes each shard's share of the bytes,
	// leaving at least one tensor for every later shard
	bounds := make([]int, 0, n+1)
	bounds = append(bounds, 0)
	var acc uint64
	for i := range f.Tensors {
		acc += f.Tensors[i].Bytes()
		k := len(bounds)
		if k < n && (acc*uint64(n) >= total*uint64(k) || len(f.Tensors)-(i+1) == n-k) {
			bounds = append(bounds, i+1)
		}
	}
	bounds = append(bounds, len(f.Tensors))
	for s := 0; s < n; s++ {
		w, err := open(s)
		if err != nil {
			return err
		}
		gw := NewWriter(w)
		if s == 0 {
			for _, kv := range f.KVs {
				if kv.Key != KeySplitNo && kv.Key != KeySplitCount && kv.Key != KeySplitTensors {
					gw.AddKV(kv.Key, kv.Value)
				}
			}
		} else if a, ok := f.Lookup(KeyAlignment); ok {
			gw.AddKV(KeyAlignment, a)
		}
		gw.AddKV(KeySplitNo, uint16(s))
		gw.AddKV(KeySplitCount, uint16(n))
		gw.AddKV(KeySplitTensors, int32(len(f.Tensors)))
		part := f.Tensors[bounds[s]:bounds[s+1]]
		for i := range part {
			gw.AddTensor(part[i].Name, part[i].Type, part[i].Dims, int64(part[i].Bytes()))
		}
		if err := gw.WriteHeader(); err != nil {
			return err
		}
		for i := range part {
			data, err := f.TensorData(&part[i])
			if err != nil {
				return err
			}
			if err := gw.WriteTensorData(part[i].Name, data); err != nil {
				return err
			}
		}
		if err := gw.Close(); err != nil {
			return err
		}
	}
	return nil
}
