package volume

// Exports: a volume, or what changed between two of its snapshots, written
// as a stream (stream.go has its format).

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cairn-storage/cairn/client"
)

// Export writes the whole volume (at the snapshot it was opened at) as a
// stream: the written parts only.
func (v *Volume) Export(ctx context.Context, w io.Writer, progress Progress) error {
	sw, err := newStreamWriter(w, StreamHeader{Size: v.Size, ObjectSize: v.ObjectSize, ToSnap: v.snapName})
	if err != nil {
		return err
	}
	for off := uint64(0); off < v.Size; off += v.ObjectSize {
		n := min(v.ObjectSize, v.Size-off)
		ext, err := v.Read(ctx, off, n)
		if err != nil {
			return err
		}
		pos := off
		for _, e := range ext {
			if e.Data != nil {
				if err := sw.nonZero(pos, e.Data); err != nil {
					return err
				}
				pos += uint64(len(e.Data))
			} else {
				pos += e.Hole
			}
		}
		if progress != nil {
			progress(off+n, v.Size)
		}
	}
	return sw.end()
}

// ExportDiff writes the changes of a volume from snapshot from to snapshot
// to (empty: the volume as it is now) as a diff stream. Objects that did
// not change are found from their snapshot state, without reading data;
// each changed object is sent whole (its data, and zeros for the rest).
func ExportDiff(ctx context.Context, p *client.Pool, name, from, to string, w io.Writer, progress Progress) error {
	if from == "" {
		return fmt.Errorf("%w: a diff needs the snapshot it starts from", ErrInvalid)
	}
	a, err := OpenSnap(ctx, p, name, from)
	if err != nil {
		return err
	}
	b, err := OpenSnap(ctx, p, name, to)
	if err != nil {
		return err
	}
	fromID := b.Info.mustSnap(from)
	toID := uint64(0)
	if to != "" {
		toID = b.Info.mustSnap(to)
		if toID < fromID {
			return fmt.Errorf("%w: snapshot %q is older than %q", ErrInvalid, to, from)
		}
	}
	sw, err := newStreamWriter(w, StreamHeader{Size: b.Size, ObjectSize: b.ObjectSize, FromSnap: from, ToSnap: to})
	if err != nil {
		return err
	}
	n := b.objects(b.Size)
	for idx := uint64(0); idx < n; idx++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		changed, err := b.changed(ctx, idx, fromID, toID, a.Size)
		if err != nil {
			return err
		}
		if changed {
			off := idx * b.ObjectSize
			length := min(b.ObjectSize, b.Size-off)
			data, _, _, err := b.readObject(ctx, idx, 0, length)
			if err != nil {
				return err
			}
			if err := sw.exact(off, data, length); err != nil {
				return err
			}
		}
		if progress != nil {
			progress((idx+1)*b.ObjectSize, n*b.ObjectSize)
		}
	}
	return sw.end()
}

// mustSnap returns the ID of a snapshot known to exist.
func (i *Info) mustSnap(name string) uint64 {
	s, ok := i.snap(name)
	if !ok {
		panic("volume: snapshot " + name + " vanished from a header already read")
	}
	return s.ID
}

// changed reports whether object idx differs between snapshots from and
// to (0: the head), from the object's snapshot state alone.
func (v *Volume) changed(ctx context.Context, idx, from, to, fromSize uint64) (bool, error) {
	if idx*v.ObjectSize >= fromSize {
		return true, nil // beyond the old end: send what is there now
	}
	set, _, err := v.p.AtSnap(0).Snaps(ctx, v.objectName(idx))
	if errors.Is(err, client.ErrNotFound) {
		return false, nil // absent now, so at both (in a clone: the parent's, at both)
	}
	if err != nil {
		return false, err
	}
	return set.Resolve(from, true) != set.Resolve(to, true), nil
}
