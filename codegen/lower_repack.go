package codegen

// splitLayouts gives each matrix the device layout its readers need: a
// weight read only by layout-1 GEMVs is marked repacked; one read by both
// layout-1 GEMVs and other kernels (a tied embedding, a layout-0 product)
// gets a repacked twin that the layout-1 launches read instead.
func (l *lowerer) splitLayouts() {
	if len(l.repacked) == 0 {
		return
	}
	plain := map[int]bool{}  // weights some other launch reads
	packed := map[int]bool{} // weights a layout-1 launch reads
	// a layout-1 product reads its matrices as W (and a MoE gate/up pair's
	// up rows as Wu); any other weight it takes (a fused norm's vector) is
	// plain
	for _, ln := range l.p.Launches {
		for j, a := range ln.Args {
			if a.Kind == ArgWeight {
				if l.repacked[ln.Kernel] && packedParam(l.p.Kernels[ln.Kernel].Params[j].Name) {
					packed[a.Index] = true
				} else {
					plain[a.Index] = true
				}
			}
		}
	}
	twin := map[int]int{}
	for w := range len(l.p.Weights) { // in order: the twins' indices are stable
		if !packed[w] {
			continue
		}
		if l.p.Weights[w].Kind != WeightMatrix {
			panic("BUG: layout-1 GEMV of a non-matrix weight " + l.p.Weights[w].Name)
		}
		if !plain[w] {
			l.p.Weights[w].Layout = 1
			continue
		}
		rw := l.p.Weights[w]
		rw.Parts = append([]WeightPart(nil), rw.Parts...)
		rw.Layout = 1
		l.p.Weights = append(l.p.Weights, rw)
		twin[w] = len(l.p.Weights) - 1
	}
	for i := range l.p.Launches {
		ln := &l.p.Launches[i]
		if !l.repacked[ln.Kernel] {
			continue
		}
		for j, a := range ln.Args {
			if a.Kind == ArgWeight && packedParam(l.p.Kernels[ln.Kernel].Params[j].Name) {
				if t, ok := twin[a.Index]; ok {
					ln.Args[j].Index = t
				}
			}
		}
	}
}

// packedParam reports whether a layout-1 kernel's parameter of this name
// is a matrix it reads repacked.
func packedParam(name string) bool { return name == "W" || name == "Wu" }

// pruneKernels drops the kernels no launch runs (those a launch had before
// ropeInProducts gave it the RoPE epilogue), renumbering the launches'.
func (l *lowerer) pruneKernels() {
	used := make([]bool, len(l.p.Kernels))
	for _, ln := range l.p.Launches {
		used[ln.Kernel] = true
		if ln.One > 0 {
			used[ln.One-1] = true
		}
		if ln.Large > 0 {
			used[ln.Large-1] = true
		}
		if ln.Wide > 0 {
			used[ln.Wide-1] = true
		}
	}
	index := make([]int, len(l.p.Kernels))
	var kept []*Kernel
	for i, k := range l.p.Kernels {
		index[i] = len(kept)
		if used[i] {
			kept = append(kept, k)
		}
	}
	if len(kept) == len(l.p.Kernels) {
		return
	}
	for i := range l.p.Launches {
		ln := &l.p.Launches[i]
		ln.Kernel = index[ln.Kernel]
		if ln.One > 0 {
			ln.One = index[ln.One-1] + 1
		}
		if ln.Large > 0 {
			ln.Large = index[ln.Large-1] + 1
		}
		if ln.Wide > 0 {
			ln.Wide = index[ln.Wide-1] + 1
		}
	}
	l.p.Kernels = kept
	l.kernels = nil // names → indices no longer hold
}
