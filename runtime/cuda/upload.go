package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/memra-ai/memra/codegen"
)

// A step's inputs, page tables and sampling records go to the device
// from page-locked memory. From pageable memory the driver stages each
// copy and may first wait for the stream to reach it: a pipelined step's
// copies would then hold the host until the step before it had run, and
// the device would wait for the host to launch the next one (about 0.1 ms
// a step at batch 1). Two slots, used in turn, each with an event recorded
// after the work that reads it: a slot is written again only once that
// work is done.
//
// A single launch of the program's step inputs kernel
// (codegen.Program.StepInputs) does what were up to four copies a step (the
// rows of the inputs, the page tables, the records and a fed step's
// tokens, 18.9 µs of device time a step on the H100): it reads the slot in
// place through its device address (page-locked memory is mapped under
// unified addressing), packed as codegen.PackStepInputs lays it out, and
// takes a fed step's tokens from the step before's output on the device.
// Bias, penalties and masks, rare, keep their copies after it, from the
// slot past the packed words.

// upSlot is one slot of page-locked upload memory.
type upSlot struct {
	host   unsafe.Pointer
	dev    DevicePtr // host's device address
	size   int
	ev     Event
	queued bool // copies from it were queued since ev was last waited for
}

// upState is the backend's upload slots.
type upState struct {
	slots [2]upSlot
	next  int
}

// take returns the next slot with at least n bytes, once the copies
// queued from it are done.
func (u *upState) take(c *Ctx, n int) (*upSlot, error) {
	s := &u.slots[u.next]
	u.next = (u.next + 1) % len(u.slots)
	if s.queued {
		if err := c.EventSync(s.ev); err != nil {
			return nil, err
		}
		s.queued = false
	}
	if s.ev == 0 {
		ev, err := c.NewSyncEvent()
		if err != nil {
			return nil, err
		}
		s.ev = ev
	}
	if s.size < n {
		if s.host != nil {
			if err := c.FreeHost(s.host); err != nil {
				return nil, err
			}
			s.host, s.size = nil, 0
		}
		size := max(n, 64<<10)
		p, err := c.AllocHost(size)
		if err != nil {
			return nil, fmt.Errorf("%w: %d bytes of page-locked memory: %w", ErrMemory, size, err)
		}
		dev, err := c.HostDevicePtr(p)
		if err != nil {
			return nil, errors.Join(err, c.FreeHost(p))
		}
		s.host, s.dev, s.size = p, dev, size
	}
	return s, nil
}

// bytes is the slot's memory.
func (s *upSlot) bytes() []byte { return unsafe.Slice((*byte)(s.host), s.size) }

// close releases the slots (the stream was synchronised).
func (u *upState) close(c *Ctx) error {
	var errs []error
	for i := range u.slots {
		s := &u.slots[i]
		if s.host != nil {
			errs = append(errs, c.FreeHost(s.host))
		}
		if s.ev != 0 {
			errs = append(errs, c.DestroyEvent(s.ev))
		}
		*s = upSlot{}
	}
	return errors.Join(errs...)
}

// upFeed is where a fed pipelined step takes its tokens: n words on the
// device, one every stride words from src.
type upFeed struct {
	src       DevicePtr
	stride, n int
}

// uploadInputs queues the upload of a step's inputs (the rows fillInputs
// wrote of each), page tables and (where ps samples) sampling records,
// through an upload slot and one launch of ps's step inputs kernel. With
// feed, the first feed.n tokens come from the device instead.
func (b *Backend) uploadInputs(c *Ctx, ps *progState, feed *upFeed) error {
	if ps.p.StepInputs < 0 { // every lowered program has one (codegen.Lower)
		return errors.New("cuda: BUG: a program without its step inputs kernel")
	}
	var sampling [codegen.NumSampleInputs][]byte
	if ps.p.SampleOut >= 0 {
		sampling = b.samplingBytes()
	}
	width := b.inRows
	tab := bytesAsU32(i32AsBytes(b.hostTab))
	rec := bytesAsU32(sampling[codegen.SampleRecords])
	words := codegen.StepInputsWords(width, len(tab), len(rec))
	n := 4 * words
	for _, d := range sampling[codegen.SampleRecords+1:] {
		n += len(d)
	}
	s, err := b.up.take(c, n)
	if err != nil {
		return err
	}
	buf := s.bytes()
	codegen.PackStepInputs(bytesAsU32(buf[:4*words]), bytesAsU32(b.host), b.inCap, width, tab, rec)
	args := []any{s.dev, b.inputs, int32(b.inCap), int32(width), b.pageTab, int32(len(tab)),
		DevicePtr(0), int32(len(rec)), DevicePtr(0), int32(0), int32(0)}
	if len(rec) > 0 {
		args[6] = b.sampleIn[codegen.SampleRecords]
	}
	if feed != nil {
		args[8], args[9], args[10] = feed.src, int32(feed.stride), int32(feed.n)
	}
	k := ps.p.Kernels[ps.p.StepInputs]
	g := k.Launch(codegen.Dims{Tokens: words})
	// queued is set before the launch: a failure after it waits for what was queued
	s.queued = true
	// no programmatic dependent launch: it overwrites what the step before reads
	cfg := LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: b.stream}
	if err := c.Launch(ps.fns[ps.p.StepInputs], cfg, args...); err != nil {
		return fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	off := 4 * words
	for i := codegen.SampleRecords + 1; i < codegen.NumSampleInputs; i++ {
		d := sampling[i]
		if len(d) == 0 {
			continue
		}
		copy(buf[off:], d)
		if err := c.CopyHtoDAsync(b.sampleIn[i], buf[off:off+len(d)], b.stream); err != nil {
			return err
		}
		off += len(d)
	}
	return c.Record(s.ev, b.stream)
}

// bytesAsU32 is b's words (len(b) a multiple of 4, b 4-byte aligned).
func bytesAsU32(b []byte) []uint32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}
