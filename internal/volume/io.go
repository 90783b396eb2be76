package volume

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cairn-storage/cairn/client"
)

// Volume is an open volume: reads and writes at byte offsets, spread over
// its data objects. Every method may be called concurrently; a write returns
// when every copy of every object it touched is durable.
type Volume struct {
	Info
	p *client.Pool
}

// Open opens a volume for IO.
func Open(ctx context.Context, p *client.Pool, name string) (*Volume, error) {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return nil, err
	}
	return &Volume{Info: info, p: p}, nil
}

// Extent is a piece of a read: data, or Hole bytes never written (zeros).
type Extent struct {
	Data []byte
	Hole uint64
}

// piece is the part of an IO that falls in one data object.
type piece struct {
	i        int    // position in the split
	index    uint64 // object
	objOff   uint64 // offset in the object
	n        uint64 // bytes
	ioOffset uint64 // offset in the IO
}

// split cuts [off, off+length) at object boundaries.
func (v *Volume) split(off, length uint64) []piece {
	var out []piece
	for done := uint64(0); done < length; {
		pos := off + done
		idx, in := pos/v.ObjectSize, pos%v.ObjectSize
		n := min(v.ObjectSize-in, length-done)
		out = append(out, piece{i: len(out), index: idx, objOff: in, n: n, ioOffset: done})
		done += n
	}
	return out
}

func (v *Volume) check(off, length uint64) error {
	if end := off + length; end < off || end > v.Size {
		return fmt.Errorf("%w: %d bytes at %d go past the end of %s/%s (%d bytes)", ErrInvalid, length, off, v.Pool, v.Name, v.Size)
	}
	return nil
}

// parallel runs fn on every piece at once and returns the first error.
func parallel(ps []piece, fn func(piece) error) error {
	if len(ps) == 1 {
		return fn(ps[0])
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, pc := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(pc)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Read returns length bytes at off, as data and holes in order.
func (v *Volume) Read(ctx context.Context, off, length uint64) ([]Extent, error) {
	if err := v.check(off, length); err != nil {
		return nil, err
	}
	ps := v.split(off, length)
	parts := make([][]Extent, len(ps))
	err := parallel(ps, func(pc piece) error {
		i := pc.i
		data, _, err := v.p.ReadAt(ctx, v.objectName(pc.index), pc.objOff, pc.n)
		if errors.Is(err, client.ErrNotFound) {
			parts[i] = []Extent{{Hole: pc.n}}
			return nil
		}
		if err != nil {
			return err
		}
		ext := []Extent{}
		if len(data) > 0 {
			ext = append(ext, Extent{Data: data})
		}
		if rest := pc.n - uint64(len(data)); rest > 0 {
			ext = append(ext, Extent{Hole: rest}) // beyond the object's end
		}
		parts[i] = ext
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Extent
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

// ReadAt reads len(b) bytes at off into b, zeros where never written.
func (v *Volume) ReadAt(ctx context.Context, b []byte, off uint64) error {
	ext, err := v.Read(ctx, off, uint64(len(b)))
	if err != nil {
		return err
	}
	pos := 0
	for _, e := range ext {
		if e.Data != nil {
			pos += copy(b[pos:], e.Data)
		} else {
			clear(b[pos : pos+int(e.Hole)])
			pos += int(e.Hole)
		}
	}
	return nil
}

// WriteAt writes b at off.
func (v *Volume) WriteAt(ctx context.Context, b []byte, off uint64) error {
	if err := v.check(off, uint64(len(b))); err != nil {
		return err
	}
	return parallel(v.split(off, uint64(len(b))), func(pc piece) error {
		return v.p.WriteAt(ctx, v.objectName(pc.index), pc.objOff, b[pc.ioOffset:pc.ioOffset+pc.n])
	})
}

// Zero makes [off, off+length) read as zeros. Whole objects are deleted
// (the volume stays thin); partial ones are written with zeros, unless
// punch is set and the object was never written.
func (v *Volume) Zero(ctx context.Context, off, length uint64, punch bool) error {
	if err := v.check(off, length); err != nil {
		return err
	}
	return parallel(v.split(off, length), func(pc piece) error {
		name := v.objectName(pc.index)
		if pc.objOff == 0 && pc.n == v.ObjectSize && punch {
			return ignoreNotFound(v.p.Delete(ctx, name))
		}
		if punch {
			st, err := v.p.Stat(ctx, name)
			if errors.Is(err, client.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if pc.objOff >= st.Size {
				return nil // already beyond the object's data: reads as zeros
			}
			if pc.objOff+pc.n >= st.Size {
				return v.p.Truncate(ctx, name, pc.objOff)
			}
		}
		return v.p.WriteAt(ctx, name, pc.objOff, make([]byte, pc.n))
	})
}

// Trim frees the whole objects inside [off, off+length); partial objects
// are left as they are (a trimmed range may read as anything).
func (v *Volume) Trim(ctx context.Context, off, length uint64) error {
	if err := v.check(off, length); err != nil {
		return err
	}
	var whole []piece
	for _, pc := range v.split(off, length) {
		if pc.objOff == 0 && pc.n == v.ObjectSize {
			whole = append(whole, pc)
		}
	}
	if len(whole) == 0 {
		return nil
	}
	return parallel(whole, func(pc piece) error {
		return ignoreNotFound(v.p.Delete(ctx, v.objectName(pc.index)))
	})
}

// Run is one stretch of a volume's allocation map.
type Run struct {
	Length uint64
	Hole   bool // never written: reads as zeros
}

// Map describes [off, off+length) as data and holes, from each object's
// existence and size (one stat per object, no data read).
func (v *Volume) Map(ctx context.Context, off, length uint64) ([]Run, error) {
	if err := v.check(off, length); err != nil {
		return nil, err
	}
	ps := v.split(off, length)
	parts := make([][]Run, len(ps))
	err := parallel(ps, func(pc piece) error {
		st, err := v.p.Stat(ctx, v.objectName(pc.index))
		if errors.Is(err, client.ErrNotFound) {
			parts[pc.i] = []Run{{Length: pc.n, Hole: true}}
			return nil
		}
		if err != nil {
			return err
		}
		data := uint64(0)
		if st.Size > pc.objOff {
			data = min(pc.n, st.Size-pc.objOff)
		}
		if data > 0 {
			parts[pc.i] = append(parts[pc.i], Run{Length: data})
		}
		if data < pc.n {
			parts[pc.i] = append(parts[pc.i], Run{Length: pc.n - data, Hole: true})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Run
	for _, p := range parts {
		for _, r := range p {
			if n := len(out); n > 0 && out[n-1].Hole == r.Hole {
				out[n-1].Length += r.Length
			} else {
				out = append(out, r)
			}
		}
	}
	return out, nil
}
