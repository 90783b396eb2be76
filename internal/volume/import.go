package volume

// Imports: a stream applied to a volume, all of it or nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cairn-storage/cairn/client"
)

// Import creates the volume name from a full stream. If the stream turns
// out damaged or the import fails, the volume is removed again.
func Import(ctx context.Context, p *client.Pool, r io.Reader, name string, progress Progress) (info Info, err error) {
	sr, err := newStreamReader(r)
	if err != nil {
		return Info{}, err
	}
	if sr.Header.FromSnap != "" {
		return Info{}, fmt.Errorf("%w: this is a diff stream (from snapshot %q): use import-diff", ErrInvalid, sr.Header.FromSnap)
	}
	info, err = Create(ctx, p, name, sr.Header.Size, sr.Header.ObjectSize)
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			if rerr := Remove(context.WithoutCancel(ctx), p, name, true); rerr != nil {
				err = fmt.Errorf("%w (and removing the partly imported volume failed: %v)", err, rerr)
			}
		}
	}()
	v, err := Open(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	defer v.Close()
	for {
		rec, err := sr.next()
		if err != nil {
			return Info{}, err
		}
		switch rec.typ {
		case recEnd:
			if progress != nil {
				progress(v.Size, v.Size)
			}
			if sr.Header.ToSnap != "" {
				// The stream was made at a snapshot: take it here too, so
				// diffs from it apply.
				if _, err := SnapCreate(ctx, p, name, sr.Header.ToSnap); err != nil {
					return Info{}, err
				}
				return Stat(ctx, p, name)
			}
			return info, nil
		case recData:
			if err := v.WriteAt(ctx, rec.data, rec.offset); err != nil {
				return Info{}, err
			}
		case recZero:
			if err := v.Zero(ctx, rec.offset, uint64(rec.length), true); err != nil {
				return Info{}, err
			}
		}
		if progress != nil {
			progress(rec.offset+uint64(rec.length), v.Size)
		}
	}
}

// ImportDiff applies a diff stream to a volume that has the stream's
// starting snapshot and has not changed since it, then takes the stream's
// ending snapshot. A damaged stream or a failure part-way rolls the volume
// back to the starting snapshot, so nothing is ever half-applied.
func ImportDiff(ctx context.Context, p *client.Pool, r io.Reader, name string, progress Progress) (info Info, err error) {
	sr, err := newStreamReader(r)
	if err != nil {
		return Info{}, err
	}
	h := sr.Header
	info, err = diffTarget(ctx, p, name, h)
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			err = rollBackAfter(ctx, p, name, h.FromSnap, err)
		}
	}()
	if h.Size > info.Size {
		if _, err := Resize(ctx, p, name, h.Size, false); err != nil {
			return Info{}, err
		}
	}
	v, err := Open(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	defer v.Close()
	if err := applyDiff(ctx, v, sr, progress); err != nil {
		return Info{}, err
	}
	if h.Size < v.Size {
		// This import is the volume's writer: the shrink is its own.
		if _, err := Resize(ctx, p, name, h.Size, true); err != nil {
			return Info{}, err
		}
	}
	if h.ToSnap != "" {
		if _, err := SnapCreate(ctx, p, name, h.ToSnap); err != nil {
			return Info{}, err
		}
	}
	return Stat(ctx, p, name)
}

// diffTarget returns the volume a diff stream of header h is to apply to,
// after checking that the stream is a diff, that the volume has the
// snapshot the diff starts at and not the one it ends at, the diff's object
// size, and that the volume is unchanged since the starting snapshot.
func diffTarget(ctx context.Context, p *client.Pool, name string, h StreamHeader) (Info, error) {
	if h.FromSnap == "" {
		return Info{}, fmt.Errorf("%w: this is a full stream: use import", ErrInvalid)
	}
	info, err := Stat(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	from, ok := info.snap(h.FromSnap)
	if !ok {
		return Info{}, fmt.Errorf("%w: the diff starts at snapshot %q, which %s/%s does not have", ErrInvalid, h.FromSnap, p.Name(), name)
	}
	if h.ToSnap != "" {
		if _, ok := info.snap(h.ToSnap); ok {
			return Info{}, fmt.Errorf("%w: %s/%s already has snapshot %q, where the diff ends", ErrSnapExists, p.Name(), name, h.ToSnap)
		}
	}
	if h.ObjectSize != info.ObjectSize {
		return Info{}, fmt.Errorf("%w: the diff has %d-byte objects, %s/%s %d-byte ones", ErrInvalid, h.ObjectSize, p.Name(), name, info.ObjectSize)
	}
	if err := unchangedSince(ctx, p, &info, from); err != nil {
		return Info{}, err
	}
	return info, nil
}

// rollBackAfter rolls volume name back to snapshot snap after an import
// failed with err, even if ctx was cancelled, and returns err saying so.
func rollBackAfter(ctx context.Context, p *client.Pool, name, snap string, err error) error {
	rctx := context.WithoutCancel(ctx)
	if rerr := Rollback(rctx, p, name, snap, nil); rerr != nil {
		return fmt.Errorf("%w (and rolling %s/%s back to %q failed: %v)", err, p.Name(), name, snap, rerr)
	}
	return fmt.Errorf("%w; %s/%s was rolled back to snapshot %q", err, p.Name(), name, snap)
}

// applyDiff writes the records of a diff stream to v, up to and including
// its END record, which checks the whole stream.
func applyDiff(ctx context.Context, v *Volume, sr *streamReader, progress Progress) error {
	h := sr.Header
	for done := false; !done; {
		rec, err := sr.next()
		if err != nil {
			return err
		}
		switch rec.typ {
		case recEnd:
			done = true
		case recData:
			err = v.WriteAt(ctx, rec.data, rec.offset)
		case recZero:
			err = v.Zero(ctx, rec.offset, uint64(rec.length), true)
		}
		if err != nil {
			return err
		}
		if progress != nil {
			progress(min(rec.offset+uint64(rec.length), h.Size), h.Size)
		}
	}
	if progress != nil {
		progress(h.Size, h.Size) // the whole stream is applied
	}
	return nil
}

// unchangedSince checks that a volume holds what it held at snapshot s
// (like zfs receive, a diff applies only onto the state it was made from).
// Objects unwritten since are found from their snapshot state; the data of
// the others (rewritten by a rollback, say) is compared.
func unchangedSince(ctx context.Context, p *client.Pool, info *Info, s Snap) error {
	if info.Size != s.Size {
		return fmt.Errorf("%w: %s/%s was resized since snapshot %q: roll it back first (cairn volume snap rollback)", ErrInvalid, p.Name(), info.Name, s.Name)
	}
	now, err := OpenSnap(ctx, p, info.Name, "")
	if err != nil {
		return err
	}
	then, err := OpenSnap(ctx, p, info.Name, s.Name)
	if err != nil {
		return err
	}
	return info.eachDataObject(ctx, p, 0, nil, func(idx uint64) error {
		set, _, err := p.Snaps(ctx, info.objectName(idx))
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if set.Resolve(s.ID, true).Head {
			return nil
		}
		same, err := sameObject(ctx, now, then, idx)
		if err != nil || same {
			return err
		}
		return fmt.Errorf("%w: %s/%s was written after snapshot %q (at byte %d): roll it back first (cairn volume snap rollback)", ErrInvalid, p.Name(), info.Name, s.Name, idx*info.ObjectSize)
	})
}

// sameObject reports whether object idx reads the same in a and b.
func sameObject(ctx context.Context, a, b *Volume, idx uint64) (bool, error) {
	da, _, _, err := a.readObject(ctx, idx, 0, a.ObjectSize)
	if err != nil {
		return false, err
	}
	db, _, _, err := b.readObject(ctx, idx, 0, b.ObjectSize)
	if err != nil {
		return false, err
	}
	n := max(len(da), len(db))
	return bytes.Equal(append(da, make([]byte, n-len(da))...), append(db, make([]byte, n-len(db))...)), nil
}
