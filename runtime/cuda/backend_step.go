package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/memra-ai/memra/codegen"
	"github.com/memra-ai/memra/runtime"
)

// piece is one sequence's share of one launch sequence: a whole SeqStep, or
// a chunk of a long one.
type piece struct {
	entry  int     // index in the Step's batch
	pages  []int32 // the sequence's page table
	pos    int
	tokens []int32
	logits bool
}

// check validates batch without changing state.
func (b *Backend) check(batch []runtime.SeqStep) error {
	if b.closed {
		return ErrClosed
	}
	if len(batch) == 0 {
		return fmt.Errorf("%w: empty batch", ErrBatch)
	}
	seen := make(map[runtime.SeqID]bool, len(batch))
	size := b.pool.PageSize()
	for _, e := range batch {
		if len(e.Tokens) == 0 {
			return fmt.Errorf("%w: sequence %d has no tokens", ErrBatch, e.Seq)
		}
		if seen[e.Seq] {
			return fmt.Errorf("%w: sequence %d appears twice", ErrBatch, e.Seq)
		}
		seen[e.Seq] = true
		end := e.Pos + len(e.Tokens)
		if e.Pages == nil {
			if have := b.own.Len(uint64(e.Seq)); e.Pos < 0 || e.Pos > have {
				return fmt.Errorf("%w: sequence %d starts at %d but %d positions are cached", ErrBatch, e.Seq, e.Pos, have)
			}
		} else {
			if e.Pos < 0 || len(e.Pages)*size < end {
				return fmt.Errorf("%w: sequence %d: %d pages of %d positions for positions %d..%d", ErrBatch, e.Seq, len(e.Pages), size, e.Pos, end)
			}
			for _, id := range e.Pages[:b.pool.PagesFor(end)] {
				if id < 0 || int(id) >= b.pool.Pages() {
					return fmt.Errorf("%w: sequence %d: page %d is not in the pool of %d", ErrBatch, e.Seq, id, b.pool.Pages())
				}
			}
		}
		if end > b.info.ContextLength {
			return fmt.Errorf("%w: sequence %d reaches %d positions, context is %d", ErrContext, e.Seq, end, b.info.ContextLength)
		}
		for _, id := range e.Tokens {
			if id < 0 || int(id) >= b.info.VocabSize {
				return fmt.Errorf("%w: sequence %d has id %d, vocabulary %d", ErrToken, e.Seq, id, b.info.VocabSize)
			}
		}
	}
	return nil
}

// step runs batch in as few launch sequences as its size allows.
func (b *Backend) step(ctx context.Context, batch []runtime.SeqStep, mode stepMode) error {
	if err := b.check(batch); err != nil {
		return err
	}
	if b.pipe.count > 0 {
		return fmt.Errorf("%w: a step while %d launched steps wait for Collect", ErrBatch, b.pipe.count)
	}
	b.pipe.prevN = -1 // its outputs take the place of a launched step's: nothing may be fed them
	V := b.info.VocabSize
	if len(b.logits) < len(batch)*V {
		b.logits = make([]float32, b.opts.MaxSeqs*V)
	}
	b.result, b.greedy, b.sampled = b.result[:0], b.greedy[:0], b.sampled[:0]
	b.rowBase = 0
	tables := make([][]int32, len(batch))
	for i, e := range batch {
		tables[i] = e.Pages
		if tables[i] == nil {
			pt, err := b.own.Grow(uint64(e.Seq), e.Pos+len(e.Tokens))
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBatch, err)
			}
			tables[i] = pt
		}
		b.result = append(b.result, nil)
		b.greedy = append(b.greedy, -1)
		b.sampled = append(b.sampled, runtime.Sampled{})
	}
	var cur []piece
	curT := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := b.run(cur, mode)
		b.rowBase += curT
		cur, curT = cur[:0], 0
		return err
	}
	order, split := b.stepOrder(batch)
	for k, i := range order {
		if k == split {
			if err := flush(); err != nil { // the decodes' launch sequence ends before the prompts'
				return err
			}
		}
		e := batch[i]
		toks, pos := e.Tokens, e.Pos
		for len(toks) > 0 {
			if curT == b.opts.PrefillTokens || len(cur) == b.opts.MaxSeqs {
				if err := flush(); err != nil {
					return err
				}
			}
			n := min(len(toks), b.opts.PrefillTokens-curT)
			cur = append(cur, piece{entry: i, pages: tables[i], pos: pos, tokens: toks[:n], logits: e.Logits && n == len(toks)})
			pos, toks, curT = pos+n, toks[n:], curT+n
		}
	}
	if err := flush(); err != nil {
		return err
	}
	for _, e := range batch {
		if e.Pages == nil {
			b.own.Commit(uint64(e.Seq), e.Pos+len(e.Tokens))
		}
	}
	return nil
}

// stepOrder returns the order step runs batch's entries in, and where a
// launch sequence must end (len(batch) for nowhere). A launch sequence
// with a prompt chunk runs the prefill program, so a decode entry riding
// in it would take the prefill products (cuBLASLt's bf16, the tensor-core
// attention) and get other logits than in a step of decodes alone. In an
// invariant numerical class the one-token entries (decodes, speculative
// drafts) run first as a launch sequence of their own, on the decode
// program, and the prompt chunks after them; a sequence appears once a
// step (drafts are sequences of their own), so no entry reads what
// another of the same step writes. Otherwise, and in a pipeline stage
// (whose hidden rows follow the batch's order), the batch's order.
func (b *Backend) stepOrder(batch []runtime.SeqStep) (order []int, split int) {
	order = b.order[:0] // reused: no allocation a step
	defer func() { b.order = order }()
	if !b.opts.Numerics.Invariant() || b.stage != nil {
		for i := range batch {
			order = append(order, i)
		}
		return order, len(batch)
	}
	for i, e := range batch {
		if len(e.Tokens) == 1 {
			order = append(order, i)
		}
	}
	split = len(order)
	for i, e := range batch {
		if len(e.Tokens) != 1 {
			order = append(order, i)
		}
	}
	if split == 0 || split == len(batch) {
		split = len(batch) // one kind only: nothing to end early
	}
	return order, split
}

// bucket returns the padded batch size of a decode step of s sequences
// replayed from a graph, or 0 for plain launches.
func (b *Backend) bucket(s int) int {
	if b.opts.NoGraphs {
		return 0
	}
	for _, n := range graphBuckets {
		if n >= s {
			return min(n, b.opts.MaxSeqs)
		}
	}
	return 0
}

// run executes one launch sequence over pieces and copies the wanted
// logits (or argmaxes, or sampled tokens and the logits of the entries
// left to the host) to the host.
func (b *Backend) run(pieces []piece, mode stepMode) error {
	cls := codegen.Decode
	T := 0
	for _, p := range pieces {
		T += len(p.tokens)
		if len(p.tokens) != 1 {
			cls = codegen.Prefill
		}
	}
	S := len(pieces)
	ps := b.progs[cls]
	if cls == codegen.Decode {
		ps = b.decodeState(S)
	}
	rowsT, rowsS, bucket := T, S, 0
	if cls == codegen.Decode {
		if bucket = b.bucket(S); bucket > 0 {
			rowsT, rowsS = bucket, bucket
		}
	}
	b.fillInputs(pieces, rowsT, rowsS, ps.p.FlashRows)
	if ps.p.SampleOut >= 0 {
		b.pack(pieces, rowsS, mode)
	}
	V := b.info.VocabSize
	return b.dev.Do(func(c *Ctx) error {
		if err := b.uploadInputs(c, ps, nil); err != nil {
			return err
		}
		if b.stage != nil && ps.p.HiddenIn >= 0 {
			dst := b.arena + DevicePtr(ps.p.Buffers.Buffers[ps.p.HiddenIn].Offset)
			if err := b.stage.fill(c, b.stream, dst, b.rowBase, T); err != nil {
				return err
			}
		}
		if b.prof != nil {
			if err := b.profileLaunches(c, ps, rowsT, rowsS); err != nil {
				return err
			}
		} else if err := b.launchStep(c, ps, bucket, rowsT, rowsS); err != nil {
			return err
		}
		if err := c.StreamSync(b.stream); err != nil {
			return err
		}
		if b.stage != nil && ps.p.HiddenOut >= 0 {
			src := b.arena + DevicePtr(ps.p.Buffers.Buffers[ps.p.HiddenOut].Offset)
			return b.stage.send(c, b.stream, src, b.rowBase, T)
		}
		logitsBuf := ps.p.Buffers.Buffers[ps.p.Logits]
		sampled := mode == stepSample && ps.p.SampleOut >= 0
		if sampled && b.recLive > 0 {
			so := ps.p.Buffers.Buffers[ps.p.SampleOut]
			out := make([]uint32, S*codegen.SampleOutWords)
			if err := c.CopyDtoH(u32AsBytes(out), b.arena+DevicePtr(so.Offset)); err != nil {
				return err
			}
			b.unpackSampled(pieces, out, V)
		}
		if mode == stepGreedy {
			am := ps.p.Buffers.Buffers[ps.p.Argmax]
			ids := make([]int32, S)
			if err := c.CopyDtoH(i32AsBytes(ids), b.arena+DevicePtr(am.Offset)); err != nil {
				return err
			}
			for s, p := range pieces {
				if p.logits {
					b.greedy[p.entry] = b.tokenOf(ids[s], V)
				}
			}
			return nil
		}
		for s, p := range pieces {
			if !p.logits || (sampled && b.spack.active[s]) {
				continue
			}
			row := b.logits[p.entry*V : (p.entry+1)*V : (p.entry+1)*V]
			src := b.arena + DevicePtr(logitsBuf.Offset) + DevicePtr(s*V*4)
			if err := c.CopyDtoH(f32AsBytes(row), src); err != nil {
				return err
			}
			b.result[p.entry] = row
			b.sampled[p.entry].Logits = row
		}
		return nil
	})
}

// fillInputs writes the step inputs of pieces, padded to rowsT tokens and
// rowsS sequences, into b.host, and their page tables one after another
// into b.hostTab: entry 0 is the trash page, which padding rows write to
// and padding sequences read. flash is the running program's
// codegen.Program.FlashRows: where it runs the tensor-core prefill
// attention, InTiles holds the step's tiles of that many tokens.
func (b *Backend) fillInputs(pieces []piece, rowsT, rowsS, flash int) {
	size := int(codegen.NumInputs) * b.inCap
	if len(b.host) != 4*size {
		b.host = make([]byte, 4*size)
	}
	in := unsafe.Slice((*int32)(unsafe.Pointer(&b.host[0])), size)
	arr := func(i codegen.Input) []int32 { return in[int(i)*b.inCap : (int(i)+1)*b.inCap] }
	tok, pos, slot, tbase := arr(codegen.InTokens), arr(codegen.InPositions), arr(codegen.InSlots), arr(codegen.InTokBase)
	kbase, klen, last := arr(codegen.InKVBase), arr(codegen.InKVLen), arr(codegen.InLast)
	ps := int32(b.pool.PageSize())
	tab := append(b.hostTab[:0], b.trash)
	t := 0
	for s, p := range pieces {
		end := p.pos + len(p.tokens)
		base := int32(len(tab))
		tab = append(tab, p.pages[:b.pool.PagesFor(end)]...)
		for j, id := range p.tokens {
			at := int32(p.pos + j)
			tok[t], pos[t], slot[t], tbase[t] = id, at, p.pages[at/ps]*ps+at%ps, base
			t++
		}
		kbase[s], klen[s], last[s] = base, int32(end), int32(t-1)
	}
	trash := b.trash * ps
	for ; t < rowsT; t++ {
		tok[t], pos[t], slot[t], tbase[t] = 0, 0, trash, 0
	}
	for s := len(pieces); s < rowsS; s++ {
		kbase[s], klen[s], last[s] = 0, 1, int32(s)
	}
	b.inRows = max(rowsT, rowsS)
	if flash > 0 {
		codegen.FlashTiles(arr(codegen.InTiles)[:rowsT], tbase[:rowsT], flash)
	}
	b.hostTab = tab
}

// tokenOf is the token of an id the device chose (argmax or sample): under MEMRA_DROP (a timing
// diagnostic that leaves the logits undefined) an id outside the
// vocabulary becomes 0.
func (b *Backend) tokenOf(id int32, vocab int) int32 {
	if b.drop != nil && (id < 0 || int(id) >= vocab) {
		return 0
	}
	return id
}

// launchStep queues ps's launches for a step of rowsT tokens over rowsS
// sequences: bucket's graph where the step has one (bucket > 0), else
// one launch after another.
func (b *Backend) launchStep(c *Ctx, ps *progState, bucket, rowsT, rowsS int) error {
	if bucket > 0 {
		g, err := b.graph(c, ps, bucket)
		if err != nil {
			return err
		}
		return c.LaunchGraph(g, b.stream)
	}
	for i := range ps.p.Launches {
		if b.dropped(ps, i) {
			continue
		}
		if err := b.launch(c, ps, &ps.p.Launches[i], rowsT, rowsS); err != nil {
			return err
		}
	}
	return nil
}

// dropped reports whether launch i of ps is left out under MEMRA_DROP
// (decode launches only; the kernel of a one-row step names it).
func (b *Backend) dropped(ps *progState, i int) bool {
	if b.drop == nil || !b.isDecode(ps) {
		return false
	}
	l := &ps.p.Launches[i]
	return b.drop.MatchString(ps.p.Kernels[l.KernelFor(1)].Name)
}

// ticketCount is the launch counters (codegen.ArgTickets) the backend's
// programs need: the most any one takes (each launch its own, Arg.Offset),
// as they run one at a time on one stream and each launch leaves its
// counters zero.
func (b *Backend) ticketCount() int {
	n := 0
	for _, ps := range append(b.progs[:], b.one) {
		if ps != nil {
			n = max(n, ps.p.Tickets)
		}
	}
	return n
}

// launch queues one launch of ps for a step of T tokens over S sequences.
func (b *Backend) launch(c *Ctx, ps *progState, l *codegen.Launch, T, S int) error {
	d := ps.p.Dims(l, T, S)
	ki := l.KernelFor(d.Tokens)
	k := ps.p.Kernels[ki]
	g := k.Launch(d)
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		switch a.Kind {
		case codegen.ArgBuffer:
			args[i] = b.arena + DevicePtr(ps.p.Buffers.Buffers[a.Index].Offset) + DevicePtr(a.Offset)
		case codegen.ArgWeight:
			args[i] = ps.weights[a.Index]
		case codegen.ArgInput:
			args[i] = b.inputs + DevicePtr(a.Index*b.inCap*4)
		case codegen.ArgKCache:
			args[i] = b.kc[a.Index]
		case codegen.ArgVCache:
			args[i] = b.vc[a.Index]
		case codegen.ArgRows:
			args[i] = int32(d.Tokens)
		case codegen.ArgConst:
			args[i] = int32(a.Value)
		case codegen.ArgNull:
			args[i] = DevicePtr(0)
		case codegen.ArgPages:
			args[i] = b.pageTab
		case codegen.ArgSample:
			args[i] = b.sampleIn[a.Index]
		case codegen.ArgTickets:
			args[i] = b.tickets + DevicePtr(a.Offset)
		default:
			panic(fmt.Sprintf("BUG: launch argument kind %d", a.Kind))
		}
	}
	if bp := b.blasProduct(ps, ki); bp != nil {
		w, x, y := args[0].(DevicePtr), args[1].(DevicePtr), args[2].(DevicePtr)
		return b.bpf.run(c, bp, w, x, y, d.Tokens, b.stream)
	}
	cfg := LaunchConfig{Grid: g.Grid, Block: g.Block, Shared: g.Shared, Stream: b.stream, PDL: b.pdl}
	if err := c.Launch(ps.fns[ki], cfg, args...); err != nil {
		return fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	return nil
}

// graphKey names a captured decode graph: its program and bucket.
type graphKey struct {
	ps     *progState
	bucket int
}

// graph returns the decode graph of ps and a bucket, capturing it on first
// use.
func (b *Backend) graph(c *Ctx, ps *progState, bucket int) (GraphExec, error) {
	key := graphKey{ps, bucket}
	if g, ok := b.graphs[key]; ok {
		return g, nil
	}
	if err := c.BeginCapture(b.stream); err != nil {
		return 0, err
	}
	for i := range ps.p.Launches {
		if b.dropped(ps, i) {
			continue
		}
		if err := b.launch(c, ps, &ps.p.Launches[i], bucket, bucket); err != nil {
			if g, err2 := c.EndCapture(b.stream); err2 == nil {
				_ = c.DestroyGraph(g)
			}
			return 0, fmt.Errorf("capturing the decode graph of %d: %w", bucket, err)
		}
	}
	g, err := c.EndCapture(b.stream)
	if err != nil {
		return 0, err
	}
	exec, err := c.Instantiate(g)
	_ = c.DestroyGraph(g)
	if err != nil {
		return 0, err
	}
	b.graphs[key] = exec
	return exec, nil
}

func f32AsBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func i32AsBytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}
