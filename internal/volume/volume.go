// Package volume implements block volumes (the RBD of cairn) on top of the
// client library: a volume is a header object plus data objects of
// ObjectSize bytes, created only when written (thin). It imports client
// only, like every gateway.
//
// Layout in the pool:
//
//	volumes                  directory: omap name → volume id
//	volume.<name>            header: omap id, size, object_size, created, format,
//	                         snap.<name> (JSON Snap), parent (JSON Parent),
//	                         child.<pool>/<name> (JSON Child)
//	vol.<id>.<index, 16 hex> data objects; absent = zeros (or, in a clone,
//	                         the parent snapshot's data)
//
// These names belong to this package (ReservedObject); `cairn obj` refuses
// to put or remove them.
//
// Snapshots are copy-on-write at object granularity, done by the OSDs (see
// client.WithSnapSeq): a snapshot is a number from the volume's snapshot
// group in etcd, and every open writer joins that group, so a snapshot
// counts only once every writer sends its number.
//
// Every open writer also joins the volume's size group, the same mechanism
// with a number of its own: a resize or removal records the new size (or
// the removal) in the header, then bumps that number, which returns only
// once every writer has re-read the header under its exclusive lock. From
// then on no writer has a write past the new end in flight or accepts one,
// so the data objects past the end can be deleted without a racing write
// bringing one back. The size group also counts the open writers, so a
// shrink or removal under a connected client is refused unless forced.
package volume

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/client"
)

const (
	directoryObject = "volumes"
	headerPrefix    = "volume."
	format          = "1"

	// DefaultObjectSize stripes volumes over 4 MiB objects.
	DefaultObjectSize = 4 << 20
	minObjectSize     = 64 << 10
	maxObjectSize     = 64 << 20

	// MaxSize bounds a volume's size: 1 PiB, 2^28 objects of the default
	// size. Removal and resizing cost what the volume holds, but export,
	// diffs and clones still visit every object of the nominal size.
	MaxSize = 1 << 50
)

// Errors.
var (
	ErrNotFound     = errors.New("volume does not exist")
	ErrExists       = errors.New("volume exists")
	ErrSnapNotFound = errors.New("snapshot does not exist")
	ErrSnapExists   = errors.New("snapshot exists")
	ErrInvalid      = errors.New("invalid volume request")
	// ErrInUse refuses a shrink or removal while writers have the volume
	// open (an NBD client, say); force overrides it.
	ErrInUse = errors.New("volume is in use")
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Info describes a volume.
type Info struct {
	Pool       string    `json:"pool"`
	Name       string    `json:"name"`
	ID         string    `json:"id"`
	Size       uint64    `json:"size"`
	ObjectSize uint64    `json:"object_size"`
	Created    time.Time `json:"created"`
	Snaps      []Snap    `json:"snapshots,omitempty"` // by ascending ID
	Parent     *Parent   `json:"parent,omitempty"`
	Children   []Child   `json:"children,omitempty"`
	// Removing is set while `volume rm` deletes the data: the volume can
	// no longer be opened, and rm finishes what a cut-short rm left.
	Removing bool `json:"removing,omitempty"`

	poolID uint32
}

// Snap is one snapshot of a volume.
type Snap struct {
	Name    string    `json:"name"`
	ID      uint64    `json:"id"`
	Size    uint64    `json:"size"`
	Created time.Time `json:"created"`
	// ParentOverlap is a clone's overlap when the snapshot was taken: a
	// later shrink does not take the parent's data from the snapshot.
	ParentOverlap uint64 `json:"parent_overlap,omitempty"`
}

// Parent names the snapshot a clone was made from. Overlap is how much of
// the clone still reads the parent where the clone has no data of its own.
type Parent struct {
	Pool     string `json:"pool"`
	Volume   string `json:"volume"`
	Snap     string `json:"snap"`
	SnapID   uint64 `json:"snap_id"`
	Overlap  uint64 `json:"overlap"`
	VolumeID string `json:"volume_id"`
}

// Child names a clone of one of a volume's snapshots.
type Child struct {
	Pool   string `json:"pool"`
	Volume string `json:"volume"`
	SnapID uint64 `json:"snap_id"`
}

// noSnap is the error for a snapshot that is not there.
func noSnap(p *client.Pool, name, snap string) error {
	return fmt.Errorf("%w: %s/%s@%s (cairn volume snap ls %s/%s lists them)", ErrSnapNotFound, p.Name(), name, snap, p.Name(), name)
}

// snap returns the snapshot called name.
func (i *Info) snap(name string) (Snap, bool) {
	for _, s := range i.Snaps {
		if s.Name == name {
			return s, true
		}
	}
	return Snap{}, false
}

// group is the volume's snapshot group in etcd.
func (i *Info) group() string { return fmt.Sprintf("vol/%d/%s", i.poolID, i.ID) }

// sizeGroup is the volume's size group in etcd (see the package doc). Its
// name must not start with group()+"/": a group's writers are the keys
// under its name.
func (i *Info) sizeGroup() string { return fmt.Sprintf("volsize/%d/%s", i.poolID, i.ID) }

// checkSize validates a volume size.
func checkSize(size uint64) error {
	if size == 0 || size%512 != 0 {
		return fmt.Errorf("%w: size %d: want a positive multiple of 512 bytes", ErrInvalid, size)
	}
	if size > MaxSize {
		return fmt.Errorf("%w: size %d bytes is larger than the largest volume, 1 PiB (%d bytes)", ErrInvalid, size, uint64(MaxSize))
	}
	return nil
}

// Create makes a thin volume: nothing but its header is written.
func Create(ctx context.Context, p *client.Pool, name string, size, objectSize uint64) (Info, error) {
	return create(ctx, p, name, size, objectSize, nil)
}

// create makes a volume whose header also holds extra.
func create(ctx context.Context, p *client.Pool, name string, size, objectSize uint64, extra map[string][]byte) (Info, error) {
	if !validName.MatchString(name) {
		return Info{}, fmt.Errorf("%w: name %q: use up to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, name)
	}
	if objectSize == 0 {
		objectSize = DefaultObjectSize
	}
	if objectSize < minObjectSize || objectSize > maxObjectSize || objectSize&(objectSize-1) != 0 {
		return Info{}, fmt.Errorf("%w: object size %d: want a power of two from 64 KiB to 64 MiB", ErrInvalid, objectSize)
	}
	if err := checkSize(size); err != nil {
		return Info{}, err
	}
	var idb [8]byte
	rand.Read(idb[:])
	info := Info{Pool: p.Name(), Name: name, ID: hex.EncodeToString(idb[:]), Size: size, ObjectSize: objectSize, Created: time.Now().UTC().Truncate(time.Second), poolID: p.ID()}
	if err := p.Create(ctx, headerPrefix+name, true); err != nil {
		if errors.Is(err, client.ErrExists) {
			return Info{}, fmt.Errorf("%w: %s/%s", ErrExists, p.Name(), name)
		}
		return Info{}, err
	}
	header := map[string][]byte{
		"id": []byte(info.ID), "size": []byte(strconv.FormatUint(size, 10)),
		"object_size": []byte(strconv.FormatUint(objectSize, 10)),
		"created":     []byte(info.Created.Format(time.RFC3339)), "format": []byte(format),
	}
	for k, v := range extra {
		header[k] = v
	}
	if err := p.OmapSet(ctx, headerPrefix+name, header); err != nil {
		return Info{}, err
	}
	if err := p.OmapSet(ctx, directoryObject, map[string][]byte{name: []byte(info.ID)}); err != nil {
		return Info{}, err
	}
	return info, nil
}

// Stat reads a volume's header.
func Stat(ctx context.Context, p *client.Pool, name string) (Info, error) {
	kv := map[string][]byte{}
	for start := ""; ; {
		kvs, more, err := p.OmapList(ctx, headerPrefix+name, start, "", 1000)
		if errors.Is(err, client.ErrNotFound) {
			return Info{}, fmt.Errorf("%w: %s/%s", ErrNotFound, p.Name(), name)
		}
		if err != nil {
			return Info{}, err
		}
		for _, e := range kvs {
			kv[e.Key] = e.Value
		}
		if !more || len(kvs) == 0 {
			break
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	if len(kv) == 0 {
		return Info{}, fmt.Errorf("%w: %s/%s", ErrNotFound, p.Name(), name)
	}
	if f := string(kv["format"]); f != format {
		return Info{}, fmt.Errorf("volume %s/%s has header format %q; this cairn reads %q", p.Name(), name, f, format)
	}
	info := Info{Pool: p.Name(), Name: name, ID: string(kv["id"]), poolID: p.ID()}
	var err error
	info.Size, err = strconv.ParseUint(string(kv["size"]), 10, 64)
	if err == nil {
		info.ObjectSize, err = strconv.ParseUint(string(kv["object_size"]), 10, 64)
	}
	if err != nil || info.ObjectSize == 0 || info.ID == "" {
		return Info{}, fmt.Errorf("volume %s/%s: damaged header", p.Name(), name)
	}
	info.Created, _ = time.Parse(time.RFC3339, string(kv["created"]))
	_, info.Removing = kv[removingKey]
	for k, v := range kv {
		var err error
		switch {
		case strings.HasPrefix(k, snapKey):
			var sn Snap
			err = json.Unmarshal(v, &sn)
			info.Snaps = append(info.Snaps, sn)
		case strings.HasPrefix(k, childKey):
			var c Child
			err = json.Unmarshal(v, &c)
			info.Children = append(info.Children, c)
		case k == parentKey:
			info.Parent = new(Parent)
			err = json.Unmarshal(v, info.Parent)
		}
		if err != nil {
			return Info{}, fmt.Errorf("volume %s/%s: damaged header entry %q: %v", p.Name(), name, k, err)
		}
	}
	slices.SortFunc(info.Snaps, func(a, b Snap) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(info.Children, func(a, b Child) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Volume, b.Volume))
	})
	return info, nil
}

// Header keys beyond the fixed ones.
const (
	snapKey     = "snap."
	childKey    = "child."
	parentKey   = "parent"
	removingKey = "removing"
)

// List returns the volumes of a pool, by name.
func List(ctx context.Context, p *client.Pool) ([]Info, error) {
	var out []Info
	start := ""
	for {
		kvs, more, err := p.OmapList(ctx, directoryObject, start, "", 1000)
		if errors.Is(err, client.ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			info, err := Stat(ctx, p, kv.Key)
			if errors.Is(err, ErrNotFound) {
				continue // a create or remove cut short
			}
			if err != nil {
				return nil, err
			}
			out = append(out, info)
		}
		if !more || len(kvs) == 0 {
			return out, nil
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
}

// objectName is the data object holding byte off of the volume.
func (i *Info) objectName(index uint64) string {
	// "vol.<id>.<index as 16 hex digits>", formatted by hand: every read
	// and write names its objects, and fmt.Sprintf costs more than
	// appending the bytes.
	const digits = "0123456789abcdef"
	b := make([]byte, 0, len("vol.")+len(i.ID)+1+16)
	b = append(b, "vol."...)
	b = append(b, i.ID...)
	b = append(b, '.')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[index>>shift&0xf])
	}
	return string(b)
}

// objects returns how many data objects a volume of size can have.
func (i *Info) objects(size uint64) uint64 {
	return (size + i.ObjectSize - 1) / i.ObjectSize
}

// forEachObject runs fn on object indexes [from, to) with limited parallelism.
func forEachObject(ctx context.Context, from, to uint64, fn func(uint64) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var first error
	for i := from; i < to && ctx.Err() == nil; i++ {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// Resize changes a volume's size. Open writers (NBD connections) learn
// the new size before Resize returns: their IO past the end fails from
// then on. Shrinking deletes the data past the new end (snapshots keep
// theirs) and is refused while writers have the volume open, unless force:
// an NBD client cannot be told that its disk shrank, and a guest's file
// system past the new end would be lost. Resizing to the current size
// again finishes a shrink that was cut short.
func Resize(ctx context.Context, p *client.Pool, name string, size uint64, force bool) (Info, error) {
	if err := checkSize(size); err != nil {
		return Info{}, err
	}
	info, err := Stat(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	if info.Removing {
		return Info{}, removing(p, name)
	}
	if size < info.Size && !force {
		if err := refuseInUse(ctx, p, &info, "shrinking it would cut the disk under them", "their IO past the new end then fails"); err != nil {
			return Info{}, err
		}
	}
	header := map[string][]byte{"size": []byte(strconv.FormatUint(size, 10))}
	if info.Parent != nil && size < info.Parent.Overlap {
		// Growing again later reads zeros there, not the parent.
		par := *info.Parent
		par.Overlap = size
		b, _ := json.Marshal(par)
		header[parentKey] = b
	}
	// Record the new size first, then have every writer take it: data
	// beyond it is then unreachable even if the deletes below are cut
	// short, and no write can bring it back.
	if err := p.OmapSet(ctx, headerPrefix+name, header); err != nil {
		return Info{}, err
	}
	if err := publishSize(ctx, p, &info); err != nil {
		return Info{}, fmt.Errorf("%s/%s: the new size is recorded, but %w: run the resize again to delete the data past the end", p.Name(), name, err)
	}
	if size <= info.Size {
		if err := cutTail(ctx, p, name, size); err != nil {
			return Info{}, err
		}
	}
	return Stat(ctx, p, name)
}

// removing is the error for a volume whose removal has begun.
func removing(p *client.Pool, name string) error {
	return fmt.Errorf("%w: %s/%s is being removed: run cairn volume rm %s/%s again to finish", ErrNotFound, p.Name(), name, p.Name(), name)
}

// Writers counts the clients that have a volume open for writing; one
// that stopped without closing it counts until its registration's lease
// runs out.
func Writers(ctx context.Context, p *client.Pool, name string) (int, error) {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return 0, err
	}
	return p.Client().SnapWriters(ctx, info.group())
}

// refuseInUse returns ErrInUse if writers have the volume open.
func refuseInUse(ctx context.Context, p *client.Pool, info *Info, harm, forced string) error {
	// Every writer joins the snapshot group (writers of older builds too,
	// which do not know the size group).
	n, err := p.Client().SnapWriters(ctx, info.group())
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s/%s is open for writing by %d client(s) (NBD connections, imports, flattens; one that crashed counts for 10 s more): %s; disconnect them first, or use --force (%s)",
		ErrInUse, info.Pool, info.Name, n, harm, forced)
}

// publishSize has every open writer of the volume re-read its header, and
// returns once none has a write in flight under the size it had before.
func publishSize(ctx context.Context, p *client.Pool, info *Info) error {
	if _, err := p.Client().NextSnap(ctx, info.sizeGroup(), snapWait); err != nil {
		return fmt.Errorf("not every open writer took it: %w", err)
	}
	return nil
}

// cutTail deletes the data at and past size: the last object is truncated
// at the end, every data object after it is deleted (listed, so objects a
// cut-short shrink left behind go too). Snapshots keep their data.
func cutTail(ctx context.Context, p *client.Pool, name string, size uint64) error {
	v, err := Open(ctx, p, name)
	if err != nil {
		return err
	}
	defer v.Close()
	wp, done, err := v.writer(ctx)
	if err != nil {
		return err
	}
	defer done()
	last := size / v.ObjectSize
	if tail := size % v.ObjectSize; tail != 0 {
		if err := v.truncateObject(ctx, wp, last, tail); err != nil {
			return err
		}
		last++
	}
	return v.eachDataObject(ctx, v.p, last, nil, func(i uint64) error {
		return ignoreNotFound(wp.Delete(ctx, v.objectName(i)))
	})
}

// truncateObject cuts object index at size bytes, if it holds more (in a
// clone, after copying the parent's data in).
func (v *Volume) truncateObject(ctx context.Context, wp *client.Pool, index, size uint64) error {
	if v.inParent(index) {
		if err := v.copyUp(ctx, wp, index); err != nil {
			return err
		}
	}
	st, err := v.p.Stat(ctx, v.objectName(index))
	if errors.Is(err, client.ErrNotFound) || err == nil && st.Size <= size {
		return nil
	}
	if err != nil {
		return err
	}
	return wp.Truncate(ctx, v.objectName(index), size)
}

// eachDataObject runs fn, 16 at a time, on every data object of the volume
// that exists with an index from from on: the pool's listing finds them, so
// the cost follows what the volume holds, not its nominal size. progress,
// if set, counts the objects done.
func (i *Info) eachDataObject(ctx context.Context, p *client.Pool, from uint64, progress Progress, fn func(uint64) error) error {
	prefix := "vol." + i.ID + "."
	var idx []uint64
	err := p.ListPrefix(ctx, prefix, func(name string) error {
		n, err := strconv.ParseUint(name[len(prefix):], 16, 64)
		if err != nil || len(name) != len(prefix)+16 {
			return nil // not a data object of this volume (no writer makes such a name)
		}
		if n >= from {
			idx = append(idx, n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var done atomic.Uint64
	return forEachObject(ctx, 0, uint64(len(idx)), func(k uint64) error {
		err := fn(idx[k])
		if progress != nil {
			progress(done.Add(1), uint64(len(idx)))
		}
		return err
	})
}

// Remove deletes a volume and all its data. A volume with snapshots is
// refused: they are removed first, one by one, on purpose. So is a volume
// open for writing, unless force: then its writers' IO fails from the
// moment the removal begins. A removal cut short is finished by the next.
func Remove(ctx context.Context, p *client.Pool, name string, force bool) error {
	info, err := Stat(ctx, p, name)
	if err != nil {
		return err
	}
	if len(info.Snaps) > 0 {
		names := make([]string, len(info.Snaps))
		for i, s := range info.Snaps {
			names[i] = s.Name
		}
		return fmt.Errorf("%w: %s/%s has snapshots %s: remove them first (cairn volume snap rm)", ErrInvalid, p.Name(), name, strings.Join(names, ", "))
	}
	if !force {
		if err := refuseInUse(ctx, p, &info, "removing it would pull the disk from under them", "all their IO then fails"); err != nil {
			return err
		}
	}
	if !info.Removing {
		if err := p.OmapSet(ctx, headerPrefix+name, map[string][]byte{removingKey: []byte("1")}); err != nil {
			return err
		}
	}
	if err := publishSize(ctx, p, &info); err != nil {
		return fmt.Errorf("%s/%s: the removal has begun, but %w: run cairn volume rm again to finish it", p.Name(), name, err)
	}
	// Without a snapshot number a delete also removes every clone.
	if err := info.eachDataObject(ctx, p, 0, nil, func(i uint64) error {
		return ignoreNotFound(p.Delete(ctx, info.objectName(i)))
	}); err != nil {
		return err
	}
	if info.Parent != nil {
		if pp, err := p.Client().Pool(info.Parent.Pool); err == nil {
			if err := ignoreNotFound(pp.OmapRm(ctx, headerPrefix+info.Parent.Volume, childKey+p.Name()+"/"+name)); err != nil {
				return err
			}
		}
	}
	if err := ignoreNotFound(p.Delete(ctx, headerPrefix+name)); err != nil {
		return err
	}
	for _, g := range []string{info.group(), info.sizeGroup()} {
		if err := p.Client().DeleteSnapGroup(ctx, g); err != nil {
			return err
		}
	}
	return ignoreNotFound(p.OmapRm(ctx, directoryObject, name))
}

func ignoreNotFound(err error) error {
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return err
}
