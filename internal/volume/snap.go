package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// snapWait bounds how long taking a snapshot waits for open writers to
// switch to its number.
const snapWait = 30 * time.Second

// SnapCreate takes snapshot snap of a volume: O(1), no data is copied.
// Writes that returned before it are in it; writes that start after it
// returns are not.
func SnapCreate(ctx context.Context, p *client.Pool, name, snap string) (Snap, error) {
	if !validName.MatchString(snap) {
		return Snap{}, fmt.Errorf("%w: snapshot name %q: use up to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, snap)
	}
	info, err := Stat(ctx, p, name)
	if err != nil {
		return Snap{}, err
	}
	if _, ok := info.snap(snap); ok {
		return Snap{}, fmt.Errorf("%w: %s/%s@%s", ErrSnapExists, p.Name(), name, snap)
	}
	if info.ObjectSize > client.MaxChunk {
		// The first write after a snapshot carries the object's copy in
		// the same transaction, which must fit one message.
		return Snap{}, fmt.Errorf("%w: %s/%s has %d-byte objects; snapshots need objects of at most %d bytes", ErrInvalid, p.Name(), name, info.ObjectSize, client.MaxChunk)
	}
	id, err := p.Client().NextSnap(ctx, info.group(), snapWait)
	if err != nil {
		return Snap{}, err
	}
	s := Snap{Name: snap, ID: id, Size: info.Size, Created: time.Now().UTC().Truncate(time.Second)}
	if info.Parent != nil {
		s.ParentOverlap = info.Parent.Overlap
	}
	b, _ := json.Marshal(s)
	if err := p.OmapSet(ctx, headerPrefix+name, map[string][]byte{snapKey + snap: b}); err != nil {
		return Snap{}, err
	}
	return s, nil
}

// SnapRemove deletes a snapshot and then the object clones only it needed.
// A snapshot that clones were made from is refused.
func SnapRemove(ctx context.Context, p *client.Pool, name, snap string, progress Progress) error {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return err
	}
	s, ok := info.snap(snap)
	if !ok {
		return noSnap(p, name, snap)
	}
	for _, c := range info.Children {
		if c.SnapID != s.ID {
			continue
		}
		gone, err := childGone(ctx, p, c)
		if err != nil {
			return err
		}
		if !gone {
			return fmt.Errorf("%w: %s/%s@%s has clone %s/%s: flatten or remove it first", ErrInvalid, p.Name(), name, snap, c.Pool, c.Volume)
		}
		// Its pool was removed with it (pool rm --force): forget it.
		if err := p.OmapRm(ctx, headerPrefix+name, childKey+c.Pool+"/"+c.Volume); err != nil {
			return err
		}
	}
	// Gone from the header first: nobody reads it once trimming starts.
	if err := p.OmapRm(ctx, headerPrefix+name, snapKey+snap); err != nil {
		return err
	}
	var keep []uint64
	for _, o := range info.Snaps {
		if o.ID != s.ID {
			keep = append(keep, o.ID)
		}
	}
	return info.trim(ctx, p, keep, progress)
}

// childGone reports whether a recorded clone no longer exists: its pool
// was removed, or the clone itself.
func childGone(ctx context.Context, p *client.Pool, c Child) (bool, error) {
	cp, err := p.Client().Pool(c.Pool)
	if errors.Is(err, client.ErrPoolNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	_, err = Stat(ctx, cp, c.Volume)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	return false, err
}

// trim deletes the clones no snapshot in keep needs, on every data object
// (an object with clones keeps its head, so listing the heads finds them).
func (i *Info) trim(ctx context.Context, p *client.Pool, keep []uint64, progress Progress) error {
	return i.eachDataObject(ctx, p, 0, progress, func(idx uint64) error {
		if len(keep) == 0 && idx*i.ObjectSize >= i.Size {
			// Past the end, an object only served snapshots: without a
			// snapshot number the delete takes its clones too.
			return ignoreNotFound(p.Delete(ctx, i.objectName(idx)))
		}
		return ignoreNotFound(p.TrimSnaps(ctx, i.objectName(idx), keep))
	})
}

// Rollback makes a volume's data and size what they were at snapshot snap.
// Only objects that changed since are rewritten (found from their
// snapshot state, without reading data). Writers should be stopped first:
// a write racing the rollback may land on either side of it; open writers
// take the snapshot's size before Rollback returns.
func Rollback(ctx context.Context, p *client.Pool, name, snap string, progress Progress) error {
	v, err := Open(ctx, p, name)
	if err != nil {
		return err
	}
	defer v.Close()
	s, ok := v.snap(snap)
	if !ok {
		return noSnap(p, name, snap)
	}
	at, err := OpenSnap(ctx, p, name, snap)
	if err != nil {
		return err
	}
	if err := v.rollbackData(ctx, p, s, at, progress); err != nil {
		return err
	}
	if err := p.OmapSet(ctx, headerPrefix+name, map[string][]byte{"size": fmt.Appendf(nil, "%d", s.Size)}); err != nil {
		return err
	}
	if err := publishSize(ctx, p, &v.Info); err != nil {
		return fmt.Errorf("%s/%s: rolled back to %q, but its size %w", p.Name(), name, snap, err)
	}
	return nil
}

// rollbackData rewrites the objects that changed since snapshot s as at
// reads them.
func (v *Volume) rollbackData(ctx context.Context, p *client.Pool, s Snap, at *Volume, progress Progress) error {
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	defer done()
	return v.eachDataObject(ctx, p, 0, progress, func(idx uint64) error {
		obj := v.objectName(idx)
		set, _, err := p.Snaps(ctx, obj)
		if errors.Is(err, client.ErrNotFound) {
			return nil // absent now and then (no head means no clones)
		}
		if err != nil {
			return err
		}
		if set.Resolve(s.ID, true).Head {
			return nil // unchanged since the snapshot
		}
		data, _, ok, err := at.readObject(ctx, idx, 0, v.ObjectSize)
		switch {
		case err != nil:
			return err
		case ok:
			return wp.Put(ctx, obj, data)
		case v.inParent(idx):
			return wp.Truncate(ctx, obj, 0)
		}
		return ignoreNotFound(wp.Delete(ctx, obj))
	})
}

// Clone makes volume dst in dstPool from snapshot snap of volume src: it
// reads the snapshot's data until written, and shares it until then.
func Clone(ctx context.Context, src *client.Pool, name, snap string, dstPool *client.Pool, dst string) (Info, error) {
	info, err := Stat(ctx, src, name)
	if err != nil {
		return Info{}, err
	}
	s, ok := info.snap(snap)
	if !ok {
		return Info{}, noSnap(src, name, snap)
	}
	if info.ObjectSize > client.MaxChunk {
		return Info{}, fmt.Errorf("%w: %s/%s has %d-byte objects; clones need objects of at most %d bytes", ErrInvalid, src.Name(), name, info.ObjectSize, client.MaxChunk)
	}
	// The parent records its child first, so the snapshot cannot be
	// removed while the clone is being made.
	ckey := childKey + dstPool.Name() + "/" + dst
	cb, _ := json.Marshal(Child{Pool: dstPool.Name(), Volume: dst, SnapID: s.ID})
	if err := src.OmapSet(ctx, headerPrefix+name, map[string][]byte{ckey: cb}); err != nil {
		return Info{}, err
	}
	par := Parent{Pool: src.Name(), Volume: name, Snap: snap, SnapID: s.ID, Overlap: s.Size, VolumeID: info.ID}
	pb, _ := json.Marshal(par)
	out, err := create(ctx, dstPool, dst, s.Size, info.ObjectSize, map[string][]byte{parentKey: pb})
	if err != nil {
		src.OmapRm(context.WithoutCancel(ctx), headerPrefix+name, ckey)
		return Info{}, err
	}
	out.Parent = &par
	return out, nil
}

// Flatten copies into a clone all the data it still reads from its parent
// and then detaches it, so the parent snapshot can be removed.
func Flatten(ctx context.Context, p *client.Pool, name string, progress Progress) error {
	v, err := Open(ctx, p, name)
	if err != nil {
		return err
	}
	defer v.Close()
	if v.Parent == nil {
		return fmt.Errorf("%w: %s/%s is not a clone", ErrInvalid, p.Name(), name)
	}
	if len(v.Snaps) > 0 {
		// They read the parent where the clone had no data of its own.
		return fmt.Errorf("%w: clone %s/%s has snapshots, which still read its parent: remove them first", ErrInvalid, p.Name(), name)
	}
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	n := v.objects(v.overlap.Load())
	var count atomic.Uint64
	err = forEachObject(ctx, 0, n, func(idx uint64) error {
		err := v.copyUp(ctx, wp, idx)
		if progress != nil {
			progress(count.Add(1), n)
		}
		return err
	})
	done()
	if err != nil {
		return err
	}
	if err := p.OmapRm(ctx, headerPrefix+name, parentKey); err != nil {
		return err
	}
	pp, err := p.Client().Pool(v.Parent.Pool)
	if err != nil {
		return err
	}
	return ignoreNotFound(pp.OmapRm(ctx, headerPrefix+v.Parent.Volume, childKey+p.Name()+"/"+name))
}
