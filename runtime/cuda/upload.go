package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/memra-ai/memra/codegen"
)

// A step's inputs, page tables and sampling records go to the device from
// page-locked memory. From pageable memory the driver stages each copy and
// may first wait for the stream to reach it: a pipelined step's copies
// would then hold the host until the step before it had run, and the
// device would wait for the host to launch the next one (about 0.1 ms a
// step at batch 1). Two slots, used in turn, each with an event recorded
// after its copies: a slot is written again only once the copies from it
// are done.

// upSlot is one slot of page-locked upload memory.
type upSlot struct {
	host   unsafe.Pointer
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
		s.host, s.size = p, size
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

// uploadInputs queues the copies of a step's inputs (the rows fillInputs
// wrote of each), page tables and (where ps samples) sampling records,
// through an upload slot.
func (b *Backend) uploadInputs(c *Ctx, ps *progState) error {
	pitch := 4 * b.inCap
	width := 4 * b.inRows
	tab := i32AsBytes(b.hostTab)
	var sampling [codegen.NumSampleInputs][]byte
	n := int(codegen.NumInputs)*pitch + len(tab)
	if ps.p.SampleOut >= 0 {
		sampling = b.samplingBytes()
		for _, d := range sampling {
			n += len(d)
		}
	}
	s, err := b.up.take(c, n)
	if err != nil {
		return err
	}
	buf := s.bytes()
	for i := range int(codegen.NumInputs) {
		copy(buf[i*pitch:i*pitch+width], b.host[i*pitch:i*pitch+width])
	}
	// queued is set before the first copy: a failure after it waits for what was queued
	s.queued = true
	if width > 0 {
		err = c.CopyHtoD2DAsync(b.inputs, pitch, s.host, pitch, width, int(codegen.NumInputs), b.stream)
	}
	off := int(codegen.NumInputs) * pitch
	put := func(dst DevicePtr, data []byte) {
		if err != nil || len(data) == 0 {
			return
		}
		copy(buf[off:], data)
		err = c.CopyHtoDAsync(dst, buf[off:off+len(data)], b.stream)
		off += len(data)
	}
	put(b.pageTab, tab)
	for i, d := range sampling {
		put(b.sampleIn[i], d)
	}
	if err != nil {
		return err
	}
	return c.Record(s.ev, b.stream)
}
