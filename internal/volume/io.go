package volume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// Volume is an open volume: reads and writes at byte offsets, spread over
// its data objects. Every method may be called concurrently; a write returns
// when every copy of every object it touched is durable. A volume opened at
// a snapshot (OpenSnap) is read-only. Info.Size is the size when opened;
// CurrentSize follows resizes (see the package doc).
type Volume struct {
	Info
	p        *client.Pool // reads: at the snapshot, if any
	readOnly bool
	snapName string  // the snapshot it was opened at
	parent   *Volume // a clone's parent, read-only at its snapshot
	// overlap is the bytes of the clone that fall through to parent; a
	// shrink lowers it.
	overlap atomic.Uint64
	// size is the size IO is checked against, and why the volume cannot
	// be used any more, if so (removed); set under mu held exclusively.
	size atomic.Pointer[sizeState]

	// Writers hold mu shared; a new snapshot number or size takes it
	// exclusively, so no write under the old one is in flight once it is
	// switched.
	mu         sync.RWMutex
	wp         *client.Pool // writes: carries the snapshot number
	paused     bool         // the snapshot-group registration is lost
	sizePaused bool         // the size-group registration is lost
	// resumed is closed when lost registrations return (nil while
	// registered): writers wait on it.
	resumed    chan struct{}
	pausedAt   time.Time
	member     *client.SnapWriter // set under mu: its callback reads it
	sizeMember *client.SnapWriter
	logf       func(format string, args ...any)
	copied     sync.Map     // clone objects known to hold their own data
	queues     objectQueues // writes waiting behind another to the same object
}

// ErrReadOnly is returned for writes to a volume opened at a snapshot.
var ErrReadOnly = errors.New("volume is read-only")

// An Option changes how Open opens a volume.
type Option func(*Volume)

// WithLog has the volume report what its user's operator should see
// through logf: its snapshot-group registration lost (writes wait) and
// back.
func WithLog(logf func(format string, args ...any)) Option {
	return func(v *Volume) { v.logf = logf }
}

// sizeState is the size an open volume's IO is checked against.
type sizeState struct {
	size uint64
	err  error // not nil: every IO fails with it (the volume is removed)
}

// Open opens a volume for reading and writing. It joins the volume's
// snapshot group (Close leaves it), so snapshots taken while it is open
// wait until its writes carry their number, and its size group, so resizes
// reach it before they return.
func Open(ctx context.Context, p *client.Pool, name string, opts ...Option) (*Volume, error) {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return nil, err
	}
	if info.Removing {
		return nil, removing(p, name)
	}
	v := &Volume{Info: info, p: p, wp: p}
	v.size.Store(&sizeState{size: info.Size})
	for _, o := range opts {
		o(v)
	}
	if err := v.openParent(ctx); err != nil {
		return nil, err
	}
	m, err := p.Client().JoinSnapGroup(ctx, info.group(), v.setSnapSeq)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.member = m
	v.mu.Unlock()
	// Joined after the header was read above: the join's first call of
	// setSize reads it again, so a resize that did not wait for this
	// writer recorded its size before, and is seen.
	sm, err := p.Client().JoinSnapGroup(ctx, info.sizeGroup(), v.setSize)
	if err != nil {
		v.Close()
		return nil, err
	}
	v.mu.Lock()
	v.sizeMember = sm
	v.mu.Unlock()
	if st := v.size.Load(); st.err != nil {
		v.Close()
		return nil, st.err
	}
	return v, nil
}

// OpenSnap opens a volume read-only: as it was at snapshot snap, or as it
// is now if snap is empty.
func OpenSnap(ctx context.Context, p *client.Pool, name, snap string) (*Volume, error) {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return nil, err
	}
	v := &Volume{Info: info, p: p, readOnly: true}
	if snap != "" {
		s, ok := info.snap(snap)
		if !ok {
			return nil, noSnap(p, name, snap)
		}
		v.Size, v.p, v.snapName = s.Size, p.AtSnap(s.ID), snap
		if v.Parent != nil {
			par := *v.Parent
			par.Overlap = s.ParentOverlap
			v.Parent = &par
		}
	}
	v.size.Store(&sizeState{size: v.Size}) // no resize reaches a reader
	if err := v.openParent(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// openParent opens a clone's parent snapshot.
func (v *Volume) openParent(ctx context.Context) error {
	if v.Parent == nil {
		return nil
	}
	pp, err := v.p.Client().Pool(v.Parent.Pool)
	if err != nil {
		return fmt.Errorf("parent of %s/%s: %w", v.Pool, v.Name, err)
	}
	v.parent, err = OpenSnap(ctx, pp, v.Parent.Volume, v.Parent.Snap)
	if err != nil {
		return fmt.Errorf("parent of %s/%s: %w", v.Pool, v.Name, err)
	}
	if v.parent.ObjectSize != v.ObjectSize {
		return fmt.Errorf("volume %s/%s: object size %d differs from its parent's %d", v.Pool, v.Name, v.ObjectSize, v.parent.ObjectSize)
	}
	v.overlap.Store(min(v.Parent.Overlap, v.Size))
	return nil
}

// ReadOnly reports whether the volume was opened at a snapshot or for
// reading only.
func (v *Volume) ReadOnly() bool { return v.readOnly }

// CurrentSize is the volume's size now: a resize while it is open changes
// it (a removal makes it 0).
func (v *Volume) CurrentSize() uint64 {
	st := v.size.Load()
	if st.err != nil {
		return 0
	}
	return st.size
}

// Close leaves the snapshot and size groups.
func (v *Volume) Close() error {
	for _, m := range []**client.SnapWriter{&v.member, &v.sizeMember} {
		if *m != nil {
			(*m).Leave()
			*m = nil
		}
	}
	return nil
}

// setSnapSeq is the snapshot group's callback: writes carry seq from now
// on, or, if !ok, the registration is lost and writes wait. It takes mu
// exclusively, so no write under the old number is in flight after it.
func (v *Volume) setSnapSeq(seq uint64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.setPaused(&v.paused, !ok, "snapshot", v.member)
	v.wp = v.p.WithSnapSeq(seq)
}

// setSize is the size group's callback: a resize or removal was recorded in
// the header (or, if !ok, the registration is lost and writes wait). It
// re-reads the header under mu held exclusively, so no write checked
// against the old size is in flight after it.
func (v *Volume) setSize(_ uint64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.setPaused(&v.sizePaused, !ok, "size", v.sizeMember)
	if !ok {
		return
	}
	st := v.readSize()
	if old := v.size.Load(); old.err == nil && (st.err != nil || st.size != old.size) {
		v.log("volume %s/%s: resized from %d to %d bytes while open%s", v.Pool, v.Name, old.size, st.size, errSuffix(st.err))
	}
	v.size.Store(st)
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// readSize reads the volume's size from its header, trying for a while.
// If it cannot, the volume fails every IO from then on: a write checked
// against a size that may be gone could land past the end.
func (v *Volume) readSize() *sizeState {
	var err error
	for try := 0; try < 5; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var info Info
		info, err = Stat(ctx, v.p, v.Name)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound) || err == nil && info.ID != v.ID:
			return &sizeState{err: fmt.Errorf("%w: %s/%s was removed while open", ErrNotFound, v.Pool, v.Name)}
		case err == nil && info.Removing:
			return &sizeState{err: fmt.Errorf("%w: %s/%s is being removed", ErrNotFound, v.Pool, v.Name)}
		case err == nil:
			if info.Parent != nil {
				v.overlap.Store(min(v.overlap.Load(), info.Parent.Overlap))
			}
			return &sizeState{size: info.Size}
		}
	}
	return &sizeState{err: fmt.Errorf("%w: %s/%s was resized, and reading its new size failed (%v): open it again", client.ErrUnavailable, v.Pool, v.Name, err)}
}

// setPaused records that the registration with group what is lost (or
// back); writes wait while any registration is lost. The caller holds mu.
func (v *Volume) setPaused(flag *bool, lost bool, what string, m *client.SnapWriter) {
	was := v.paused || v.sizePaused
	*flag = lost
	now := v.paused || v.sizePaused
	switch {
	case now && !was:
		v.resumed = make(chan struct{})
		v.pausedAt = time.Now()
		v.log("volume %s/%s: lost its %s-group registration with etcd (%v): writes wait for it to return, up to %v",
			v.Pool, v.Name, what, m.Lost(), pausedWait)
	case !now && was:
		close(v.resumed)
		v.resumed = nil
		v.log("volume %s/%s: %s-group registration back after %v: writes go on", v.Pool, v.Name, what, time.Since(v.pausedAt).Round(time.Millisecond))
	}
}

func (v *Volume) log(format string, args ...any) {
	if v.logf != nil {
		v.logf(format, args...)
	}
}

// pausedWait bounds how long a write waits for a lost snapshot-group
// registration to return (the group re-registers within seconds when etcd
// answers) before it fails.
var pausedWait = 30 * time.Second

// writer returns the pool handle writes use now, and the function that
// ends the write. While the snapshot-group registration is lost it waits
// for it to return: a guest sees a slow write rather than an IO error.
func (v *Volume) writer(ctx context.Context) (*client.Pool, func(), error) {
	if v.readOnly {
		return nil, nil, fmt.Errorf("%w: %s/%s is open at a snapshot or for reading only", ErrReadOnly, v.Pool, v.Name)
	}
	var deadline <-chan time.Time
	for {
		v.mu.RLock()
		if !v.paused && !v.sizePaused {
			return v.wp, v.mu.RUnlock, nil
		}
		resumed := v.resumed
		v.mu.RUnlock()
		if deadline == nil {
			t := time.NewTimer(pausedWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-resumed:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-deadline:
			return nil, nil, fmt.Errorf("%w: %s/%s: lost its registration with etcd (%v), so a snapshot or resize could miss its writes, and it did not return within %v", client.ErrUnavailable, v.Pool, v.Name, errors.Join(v.member.Lost(), v.sizeMember.Lost()), pausedWait)
		}
	}
}

// inParent reports whether object index of a clone can fall through to
// the parent.
func (v *Volume) inParent(index uint64) bool {
	return v.parent != nil && index*v.ObjectSize < v.overlap.Load()
}

// readObject reads [off, off+n) of object index; ok is false where neither
// the object nor (in a clone) its parent has data.
func (v *Volume) readObject(ctx context.Context, index, off, n uint64) (data []byte, release func(), ok bool, err error) {
	data, _, release, err = v.p.ReadAtPooled(ctx, v.objectName(index), off, n)
	if errors.Is(err, client.ErrNotFound) {
		if !v.inParent(index) {
			return nil, nil, false, nil
		}
		start, overlap := index*v.ObjectSize+off, v.overlap.Load()
		if start >= overlap {
			return nil, nil, false, nil
		}
		return v.parent.readObject(ctx, index, off, min(n, overlap-start))
	}
	return data, release, err == nil, err
}

// statObject returns how many bytes of object index hold data (through to
// a clone's parent); ok is false if none does.
func (v *Volume) statObject(ctx context.Context, index uint64) (uint64, bool, error) {
	st, err := v.p.Stat(ctx, v.objectName(index))
	if errors.Is(err, client.ErrNotFound) {
		if !v.inParent(index) {
			return 0, false, nil
		}
		size, ok, err := v.parent.statObject(ctx, index)
		return min(size, v.overlap.Load()-index*v.ObjectSize), ok, err
	}
	if err != nil {
		return 0, false, err
	}
	return st.Size, true, nil
}

// copyUp gives a clone's object its own copy of the parent's data before
// the first write to it. PutNew is atomic: of two writers racing, one
// copies and the other finds the object there.
func (v *Volume) copyUp(ctx context.Context, wp *client.Pool, index uint64) error {
	if !v.inParent(index) {
		return nil
	}
	if _, done := v.copied.Load(index); done {
		return nil
	}
	name := v.objectName(index)
	if _, err := v.p.Stat(ctx, name); err == nil {
		v.copied.Store(index, true)
		return nil
	} else if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	data, _, ok, err := v.parent.readObject(ctx, index, 0, min(v.ObjectSize, v.overlap.Load()-index*v.ObjectSize))
	if err != nil {
		return fmt.Errorf("copying %s/%s's parent data: %w", v.Pool, v.Name, err)
	}
	if ok && len(data) > 0 {
		if err := wp.PutNew(ctx, name, data); err != nil && !errors.Is(err, client.ErrExists) {
			return err
		}
	}
	// The parent is a snapshot: where it has no data it never will.
	v.copied.Store(index, true)
	return nil
}

// removeObject makes object index read as zeros: deleted, or in a clone
// (where absence would show the parent) emptied.
func (v *Volume) removeObject(ctx context.Context, wp *client.Pool, index uint64) error {
	name := v.objectName(index)
	if v.inParent(index) {
		err := wp.Truncate(ctx, name, 0)
		if err == nil {
			v.copied.Store(index, true)
		}
		return err
	}
	return ignoreNotFound(wp.Delete(ctx, name))
}

// Extent is a piece of a read: data, or Hole bytes never written (zeros).
type Extent struct {
	Data []byte
	Hole uint64
	// Release, when not nil, hands Data's buffer back for reuse; the
	// reader calls it once done with Data (or never: that is only slower).
	Release func()
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

// check refuses IO past the volume's current end. A write checks under
// its writer lock, so a resize waits for it or it sees the resize.
func (v *Volume) check(off, length uint64) error {
	st := v.size.Load()
	if st.err != nil {
		return st.err
	}
	if end := off + length; end < off || end > st.size {
		return fmt.Errorf("%w: %d bytes at %d go past the end of %s/%s (%d bytes)", ErrInvalid, length, off, v.Pool, v.Name, st.size)
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
		data, release, ok, err := v.readObject(ctx, pc.index, pc.objOff, pc.n)
		if err != nil {
			return err
		}
		if !ok {
			parts[i] = []Extent{{Hole: pc.n}}
			return nil
		}
		ext := []Extent{}
		if len(data) > 0 {
			ext = append(ext, Extent{Data: data, Release: release})
		}
		if rest := pc.n - uint64(len(data)); rest > 0 {
			ext = append(ext, Extent{Hole: rest}) // beyond the object's end
		}
		parts[i] = ext
		return nil
	})
	var out []Extent
	for _, p := range parts {
		out = append(out, p...)
	}
	if err != nil {
		ReleaseAll(out) // the pieces read before one failed
		return nil, err
	}
	return out, nil
}

// ReleaseAll hands back the buffers of extents from Read.
func ReleaseAll(ext []Extent) {
	for _, e := range ext {
		if e.Release != nil {
			e.Release()
		}
	}
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
	ReleaseAll(ext)
	return nil
}

// WriteAt writes b at off.
func (v *Volume) WriteAt(ctx context.Context, b []byte, off uint64) error {
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := v.check(off, uint64(len(b))); err != nil {
		return err
	}
	return parallel(v.split(off, uint64(len(b))), func(pc piece) error {
		if err := v.copyUp(ctx, wp, pc.index); err != nil {
			return err
		}
		return v.writeObject(ctx, wp, pc.index, pc.objOff, b[pc.ioOffset:pc.ioOffset+pc.n])
	})
}

// Zero makes [off, off+length) read as zeros. Whole objects are deleted
// (the volume stays thin); partial ones are written with zeros, unless
// punch is set and the object was never written.
func (v *Volume) Zero(ctx context.Context, off, length uint64, punch bool) error {
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := v.check(off, length); err != nil {
		return err
	}
	return parallel(v.split(off, length), func(pc piece) error {
		name := v.objectName(pc.index)
		if pc.objOff == 0 && pc.n == v.ObjectSize && punch {
			return v.removeObject(ctx, wp, pc.index)
		}
		if err := v.copyUp(ctx, wp, pc.index); err != nil {
			return err
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
				return wp.Truncate(ctx, name, pc.objOff)
			}
		}
		return wp.WriteAt(ctx, name, pc.objOff, make([]byte, pc.n))
	})
}

// Trim frees the whole objects inside [off, off+length); partial objects
// are left as they are (a trimmed range may read as anything).
func (v *Volume) Trim(ctx context.Context, off, length uint64) error {
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	defer done()
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
		return v.removeObject(ctx, wp, pc.index)
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
		size, ok, err := v.statObject(ctx, pc.index)
		if err != nil {
			return err
		}
		if !ok {
			parts[pc.i] = []Run{{Length: pc.n, Hole: true}}
			return nil
		}
		data := uint64(0)
		if size > pc.objOff {
			data = min(pc.n, size-pc.objOff)
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
