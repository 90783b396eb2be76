package s3gw

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"sync"
)

// writeAhead is how many stripes a write has in flight to the cluster
// while it reads the next one from the client.
const writeAhead = 2

// writeData streams exactly size bytes of body into the stripes of data
// id in the bucket's data pool (loc), feeding every byte to hashes in
// order. The hashes run behind the reading, while the stripe is being
// stored: nothing needs them before the commit, and large bodies' MD5s
// wait there to be hashed together (md5Lanes). It returns when every
// stripe is durable, or with the first error (the caller then removes
// what was written: removeData). A body shorter than size is
// IncompleteBody; one longer, or whose own check fails at its end (a
// signature, a SHA-256), fails with that error.
func (g *Gateway) writeData(ctx context.Context, loc dataLoc, dataID string, body io.Reader, size uint64, hashes []hash.Hash) error {
	st, err := g.dataStore(loc.pool)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	sem := make(chan struct{}, writeAhead)
	var hashed <-chan struct{} = closedChan
	for n, off := uint64(0), uint64(0); off < size; n++ {
		bp := g.bufs.Get().(*[]byte)
		chunk := (*bp)[:min(uint64(stripeSize), size-off)]
		if _, err := io.ReadFull(body, chunk); err != nil {
			g.bufs.Put(bp)
			fail(bodyErr(err))
			break
		}
		off += uint64(len(chunk))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			g.bufs.Put(bp)
			fail(ctx.Err())
			break
		}
		stored := make(chan struct{})
		hashed = hashAfter(hashed, stored, chunk, hashes)
		wg.Add(1)
		go func(name string, hashed <-chan struct{}) {
			defer wg.Done()
			defer func() { <-hashed; <-sem; g.bufs.Put(bp) }()
			err := st.Put(ctx, name, chunk)
			close(stored)
			if err != nil {
				fail(fmt.Errorf("writing %s: %w", name, g.dataErr(loc.pool, err)))
			}
		}(dataObject(loc.bucketID, dataID, n), hashed)
	}
	wg.Wait() // each stripe's writer waits for its hashing too
	if firstErr != nil {
		return firstErr
	}
	return bodyEnd(body, size)
}

// hashAfter feeds chunk to hashes once after is closed, on a goroutine of
// its own, and closes the channel it returns when they are done: each
// stripe's hashing waits for the one before, as the hashes need the bytes
// in order. A large body's MD5 may wait for other bodies' to be hashed
// with them (md5Lanes.gather), at most until stored is closed.
func hashAfter(after, stored <-chan struct{}, chunk []byte, hashes []hash.Hash) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-after
		for _, h := range hashes {
			if g, ok := h.(gatherer); ok {
				g.gather(stored)
			}
			h.Write(chunk)
		}
	}()
	return done
}

// closedChan is a channel that is already closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// bodyEnd reads a body to its end once its size bytes are read: that
// makes it check what protects it (the payload's SHA-256, the final chunk
// signature, the trailers), and finds a body longer than declared.
func bodyEnd(body io.Reader, size uint64) error {
	var one [1]byte
	switch n, err := io.ReadFull(body, one[:]); {
	case n > 0:
		return ErrIncompleteBody.with("The body holds more than the %d bytes declared.", size)
	case err != io.EOF:
		return bodyErr(err)
	}
	return nil
}

// readSmall reads a body of size bytes (at most inlineMax) whole, through
// hashes.
func readSmall(body io.Reader, size uint64, hashes []hash.Hash) ([]byte, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(body, data); err != nil {
		return nil, bodyErr(err)
	}
	for _, h := range hashes {
		h.Write(data)
	}
	return data, bodyEnd(body, size)
}

// bodyErr names a failure reading the client's body.
func bodyErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrIncompleteBody
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return ErrEntityTooLarge
	}
	return err
}

// removeData deletes the stripes of data written for size bytes (absent
// stripes are fine: removal is idempotent, so it may run twice). A data
// pool that does not exist any more took its stripes with it.
func (g *Gateway) removeData(ctx context.Context, loc dataLoc, dataID string, size uint64, stripe uint32) error {
	st, err := g.dataStore(loc.pool)
	for n := uint64(0); err == nil && n < stripes(size, stripe); n++ {
		err = st.Delete(ctx, dataObject(loc.bucketID, dataID, n))
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		err = g.dataErr(loc.pool, err)
	}
	if errors.Is(err, ErrNoPool) {
		return nil
	}
	return err
}

// readAhead is how many stripes a GET fetches ahead of what it sends.
const readAhead = 4

// piece is one read of a stripe: which stripe object, the range in it.
type piece struct {
	name     string
	off, len uint64
}

// pieces maps [off, off+length) of an entry onto its stripes.
func pieces(bucketID string, e *Entry, off, length uint64) []piece {
	var out []piece
	stripe := uint64(e.Stripe)
	base := uint64(0)
	for _, p := range e.Parts {
		if length == 0 {
			break
		}
		if off >= base+p.Size {
			base += p.Size
			continue
		}
		for in := off - base; in < p.Size && length > 0; {
			n := in / stripe
			sOff := in % stripe
			l := min(stripe-sOff, p.Size-in, length)
			out = append(out, piece{dataObject(bucketID, p.DataID, n), sOff, l})
			in += l
			off += l
			length -= l
		}
		base += p.Size
	}
	return out
}

// streamData writes [off, off+length) of an entry's data, which is in
// loc, to w, fetching up to readAhead stripes in parallel and sending them
// in order; inline data as readEntry loaded it.
func (g *Gateway) streamData(ctx context.Context, w io.Writer, loc dataLoc, e *Entry, off, length uint64) error {
	if e.Inline != "" {
		if uint64(len(e.inline)) != e.Size || off+length > e.Size {
			return fmt.Errorf("s3: inline data of %d bytes not loaded for [%d, +%d)", e.Size, off, length)
		}
		_, err := w.Write(e.inline[off : off+length])
		return err
	}
	st, err := g.dataStore(loc.pool)
	if err != nil {
		return err
	}
	ps := pieces(loc.bucketID, e, off, length)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]chan readResult, len(ps))
	fetch := func(i int) {
		results[i] = make(chan readResult, 1)
		go func(p piece, ch chan readResult) { ch <- g.readPiece(ctx, st, p) }(ps[i], results[i])
	}
	for i := 0; i < min(readAhead, len(ps)); i++ {
		fetch(i)
	}
	defer func() { // the reads still in flight when a send fails
		for i := range results {
			if results[i] != nil {
				(<-results[i]).release()
			}
		}
	}()
	for i := range ps {
		r := <-results[i]
		results[i] = nil
		if r.err != nil {
			return g.dataErr(loc.pool, r.err)
		}
		if i+readAhead < len(ps) {
			fetch(i + readAhead)
		}
		err := writeAll(w, r.bufs)
		r.release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readResult is one piece read: its data in one or more buffers, and
// what hands them back.
type readResult struct {
	bufs    [][]byte
	release func()
	err     error
}

// readPiece reads one piece, into pooled buffers where the store offers
// them.
func (g *Gateway) readPiece(ctx context.Context, st Store, p piece) readResult {
	r := readResult{release: func() {}}
	if pr, ok := st.(PooledReader); ok {
		r.bufs, _, r.release, r.err = pr.ReadAtPooled(ctx, p.name, p.off, p.len)
	} else {
		var data []byte
		data, _, r.err = st.ReadAt(ctx, p.name, p.off, p.len)
		r.bufs = [][]byte{data}
	}
	n := 0
	for _, b := range r.bufs {
		n += len(b)
	}
	if r.err == nil && uint64(n) != p.len {
		r.err = fmt.Errorf("s3: stripe %s holds %d bytes at %d, the index says %d", p.name, n, p.off, p.len)
	}
	return r
}

// writeAll writes bufs to w one after another.
func writeAll(w io.Writer, bufs [][]byte) error {
	for _, b := range bufs {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
