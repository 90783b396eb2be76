package nbd

// The transmission phase: requests read, run by a fixed set of workers,
// and their replies written out.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// transmit serves requests until the client disconnects. A fixed set of
// workers runs the requests (no goroutine, and no stack growth, per
// request), and one flusher writes out the replies they queue, so replies
// finishing together share a system call.
func (c *conn) transmit(ctx context.Context) error {
	max := c.s.MaxInFlight
	if max <= 0 {
		max = 64
	}
	type job struct {
		req  request
		data []byte
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c.do(ctx, j.req, j.data)
			}
		}()
	}
	c.flushReq = make(chan struct{}, 1)
	flusherDone := make(chan struct{})
	go c.flusher(flusherDone)
	defer func() {
		close(jobs)
		wg.Wait()
		close(c.flushReq)
		<-flusherDone
	}()
	var h [requestLen]byte
	for {
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return err
		}
		req, err := decodeRequest(h[:])
		if err != nil {
			return err
		}
		var data []byte
		if req.typ == cmdWrite {
			if req.length > MaxPayload {
				// The payload cannot be skipped safely: give up on this client.
				return fmt.Errorf("%w: write of %d bytes (limit %d)", errMalformed, req.length, MaxPayload)
			}
			data = bufpool.Get(int(req.length)) // handed back by do
			if _, err := io.ReadFull(c.r, data); err != nil {
				return err
			}
		}
		if req.typ == cmdDisc {
			return nil // the deferred close waits for the requests in flight
		}
		c.busy.Add(1)
		if c.s.Load != nil {
			c.s.Load.Begin()
		}
		jobs <- job{req, data}
	}
}

// queue adds a reply, in parts written in order under one lock, to the
// write buffer and sends it: at once if it answers the only request in
// flight (handing it to the flusher would cost a wake-up of an idle thread,
// tens of µs of a QD1 request), else through the flusher, which sends the
// replies of requests finishing together in one write.
func (c *conn) queue(parts ...[]byte) {
	c.wmu.Lock()
	var err error
	for _, b := range parts {
		if _, err = c.w.Write(b); err != nil {
			break
		}
	}
	if c.s.Load != nil {
		c.s.Load.End()
	}
	if c.busy.Add(-1) == 0 && err == nil {
		if err := c.w.Flush(); err != nil {
			c.c.Close()
		}
		c.wmu.Unlock()
		return
	}
	c.wmu.Unlock()
	if err != nil {
		return // the connection is gone; the reader sees it too
	}
	select {
	case c.flushReq <- struct{}{}:
	default: // a flush is already due and will carry this reply
	}
}

// flusher writes queued replies out until flushReq is closed.
func (c *conn) flusher(done chan<- struct{}) {
	defer close(done)
	for range c.flushReq {
		// Let the workers that are finishing queue their replies too: one
		// write then carries several (a system call per reply was a large
		// part of the gateway's CPU on 4 KiB reads).
		runtime.Gosched()
		c.wmu.Lock()
		err := c.w.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.c.Close()
		}
	}
}

// do runs one request and sends its reply. data, a write's payload, goes
// back to bufpool when it returns: Device.Write must not keep it.
func (c *conn) do(ctx context.Context, req request, data []byte) {
	defer bufpool.Put(data)
	var err error
	switch req.typ {
	case cmdRead:
		c.read(ctx, req)
		return
	case cmdWrite, cmdTrim, cmdWriteZeroes:
		if errno, msg := c.refuseWrite(req); msg != "" {
			c.fail(req, errno, msg)
			return
		}
		err = c.write(ctx, req, data)
	case cmdFlush:
		err = c.dev.Flush(ctx)
	case cmdBlockStatus:
		c.blockStatus(ctx, req)
		return
	default:
		c.fail(req, errInval, fmt.Sprintf("command %d is not supported", req.typ))
		return
	}
	if err != nil {
		c.s.logf("nbd: %s: %s: command %d at %d+%d: %v", c.c.RemoteAddr(), c.name, req.typ, req.offset, req.length, err)
		c.fail(req, errnoOf(err), err.Error())
		return
	}
	c.queue(appendSimpleReply(nil, 0, req.handle))
}

// inRange says whether req's range lies within the device, whose size it
// returns too.
func (c *conn) inRange(req request) (bool, uint64) {
	size := c.dev.Size()
	end := req.offset + uint64(req.length)
	return end >= req.offset && end <= size, size
}

// fail answers req with an error: a structured error chunk, with msg, for
// a read when structured replies were negotiated, else a simple reply.
func (c *conn) fail(req request, errno uint32, msg string) {
	if c.structured && req.typ == cmdRead {
		p := binary.BigEndian.AppendUint32(nil, errno)
		p = binary.BigEndian.AppendUint16(p, uint16(len(msg)))
		p = append(p, msg...)
		c.queue(append(appendChunkHeader(nil, replyFlagDone, replyError, req.handle, uint32(len(p))), p...))
		return
	}
	c.queue(appendSimpleReply(nil, errno, req.handle))
}

// read runs NBD_CMD_READ and sends its reply.
func (c *conn) read(ctx context.Context, req request) {
	if req.length > MaxPayload {
		c.fail(req, errOverflow, fmt.Sprintf("read of %d bytes exceeds the %d-byte limit", req.length, MaxPayload))
		return
	}
	if ok, size := c.inRange(req); !ok {
		c.fail(req, errInval, fmt.Sprintf("read of %d bytes at %d goes past the end (%d)", req.length, req.offset, size))
		return
	}
	chunks, err := c.dev.Read(ctx, req.offset, req.length)
	if err != nil {
		c.fail(req, errnoOf(err), err.Error())
		return
	}
	c.sendRead(req, chunks)
}

// refuseWrite says why a write, trim or write-zeroes cannot run, with the
// errno to answer (msg empty: it can). Past the end, a trim is invalid
// and a write has no space.
func (c *conn) refuseWrite(req request) (errno uint32, msg string) {
	ok, _ := c.inRange(req)
	switch {
	case c.dev.ReadOnly():
		return errPerm, "read-only export"
	case !ok && req.typ == cmdTrim:
		return errInval, "trim past the end"
	case !ok:
		return errNoSpace, "write past the end"
	}
	return 0, ""
}

// write runs a write, trim or write-zeroes, and with FUA a flush after it.
func (c *conn) write(ctx context.Context, req request, data []byte) error {
	var err error
	switch req.typ {
	case cmdWrite:
		err = c.dev.Write(ctx, req.offset, data)
	case cmdTrim:
		err = c.dev.Trim(ctx, req.offset, req.length)
	default:
		err = c.dev.Zero(ctx, req.offset, req.length, req.flags&cmdFlagNoHole == 0)
	}
	if err == nil && req.flags&cmdFlagFUA != 0 {
		err = c.dev.Flush(ctx)
	}
	return err
}

// blockStatus runs NBD_CMD_BLOCK_STATUS, which needs base:allocation
// negotiated and a device that maps its allocation.
func (c *conn) blockStatus(ctx context.Context, req request) {
	m, mapper := c.dev.(Mapper)
	ok, _ := c.inRange(req)
	switch {
	case !c.allocation || !mapper:
		c.fail(req, errInval, "no meta context was negotiated")
		return
	case !ok || req.length == 0:
		c.fail(req, errInval, "block status past the end")
		return
	}
	ext, err := m.Extents(ctx, req.offset, req.length)
	if err != nil {
		c.fail(req, errnoOf(err), err.Error())
		return
	}
	c.sendBlockStatus(req, ext)
}

// sendRead answers a successful read: structured (holes cost nothing) when
// negotiated, else one simple reply with the data.
func (c *conn) sendRead(req request, chunks []Chunk) {
	// Once queue has copied or sent the data. The deletion of empty chunks
	// below only moves the others to the front of this same slice.
	defer releaseChunks(chunks)
	// Headers and data go to the connection's buffer as separate parts:
	// large data is written through without being copied into one reply.
	var parts [][]byte
	if !c.structured {
		parts = append(parts, appendSimpleReply(make([]byte, 0, 16), 0, req.handle))
		for _, ch := range chunks {
			if ch.Data != nil {
				parts = append(parts, ch.Data)
			} else {
				parts = append(parts, make([]byte, ch.Hole))
			}
		}
		c.queue(parts...)
		return
	}
	chunks = slices.DeleteFunc(chunks, func(ch Chunk) bool { return ch.len() == 0 })
	if len(chunks) == 0 {
		c.queue(appendChunkHeader(nil, replyFlagDone, replyNone, req.handle, 0))
		return
	}
	off := req.offset
	for i, ch := range chunks {
		flags := uint16(0)
		if i == len(chunks)-1 {
			flags = replyFlagDone
		}
		var h []byte
		if ch.Data != nil {
			h = appendChunkHeader(make([]byte, 0, 28), flags, replyOffsetData, req.handle, 8+uint32(len(ch.Data)))
			h = binary.BigEndian.AppendUint64(h, off)
			parts = append(parts, h, ch.Data)
		} else {
			h = appendChunkHeader(make([]byte, 0, 32), flags, replyOffsetHole, req.handle, 12)
			h = binary.BigEndian.AppendUint64(h, off)
			parts = append(parts, binary.BigEndian.AppendUint32(h, ch.Hole))
		}
		off += uint64(ch.len())
	}
	c.queue(parts...)
}

func releaseChunks(chunks []Chunk) {
	for _, ch := range chunks {
		if ch.Release != nil {
			ch.Release()
		}
	}
}

// sendBlockStatus answers NBD_CMD_BLOCK_STATUS with one chunk of
// descriptors, never past the requested length.
func (c *conn) sendBlockStatus(req request, ext []Extent) {
	p := binary.BigEndian.AppendUint32(nil, metaContextID)
	left := req.length
	for _, e := range ext {
		if left == 0 || e.Length == 0 {
			continue
		}
		n := min(e.Length, left)
		flags := uint32(0)
		if e.Hole {
			flags = stateHole | stateZero
		}
		p = binary.BigEndian.AppendUint32(p, n)
		p = binary.BigEndian.AppendUint32(p, flags)
		left -= n
		if req.flags&cmdFlagReqOne != 0 {
			break
		}
	}
	if len(p) == 4 { // the device described nothing: call it data
		p = binary.BigEndian.AppendUint32(p, req.length)
		p = binary.BigEndian.AppendUint32(p, 0)
	}
	c.queue(append(appendChunkHeader(nil, replyFlagDone, replyBlockStatus, req.handle, uint32(len(p))), p...))
}

func errnoOf(err error) uint32 {
	if errors.Is(err, ErrNoSpace) {
		return errNoSpace
	}
	return errIO
}
