package powercut

import (
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// raw is the FUSE side of one mount: each request under FS.mu, against the
// state, or EIO once the power is cut.
type raw struct {
	fuse.RawFileSystem
	fs      *FS
	st      *state // nil after a cut: the disk is dead
	handles map[uint64]*handle
	nextFh  uint64
}

type handle struct {
	n     *inode
	flags uint32
	names []dirent // directory handles: the entries when opened
}

type dirent struct {
	name string
	ino  uint64
	dir  bool
}

const ttl = time.Second

func (r *raw) String() string { return "powercut" }

// lock takes the mount's lock and returns the state, nil if the power is
// cut.
func (r *raw) lock() *state {
	r.fs.mu.Lock()
	return r.st
}

func (r *raw) unlock() { r.fs.mu.Unlock() }

func (r *raw) node(st *state, id uint64) *inode {
	if id == fuse.FUSE_ROOT_ID {
		return st.root
	}
	return st.nodes[id]
}

func (r *raw) attr(st *state, n *inode, a *fuse.Attr) {
	a.Ino = n.id
	a.Size = uint64(n.size)
	a.Blksize = 4096
	if n.dir {
		a.Mode = syscall.S_IFDIR | n.mode
		a.Nlink = 2
		a.Size = 4096
	} else {
		a.Mode = syscall.S_IFREG | n.mode
		if n.lparent != nil {
			a.Nlink = 1
		}
		var blocks int64
		if f, err := st.file(n); err == nil && f != nil {
			var s unix.Stat_t
			if unix.Fstat(int(f.Fd()), &s) == nil {
				blocks = s.Blocks
			}
		}
		a.Blocks = uint64(blocks + n.opBytes/512)
	}
	t := uint64(n.mtime.Unix())
	ns := uint32(n.mtime.Nanosecond())
	a.Mtime, a.Ctime, a.Atime = t, t, t
	a.Mtimensec, a.Ctimensec, a.Atimensec = ns, ns, ns
}

func (r *raw) entry(st *state, n *inode, out *fuse.EntryOut) {
	n.nlookup++
	out.NodeId = n.id
	out.Generation = 1
	out.SetEntryTimeout(ttl)
	out.SetAttrTimeout(ttl)
	r.attr(st, n, &out.Attr)
}

func (r *raw) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	d := r.node(st, h.NodeId)
	if d == nil || !d.dir {
		return fuse.ENOENT
	}
	n := d.live[name]
	if n == nil {
		return fuse.ENOENT
	}
	r.entry(st, n, out)
	return fuse.OK
}

func (r *raw) Forget(id, nlookup uint64) {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return
	}
	if n := st.nodes[id]; n != nil {
		n.nlookup -= min(nlookup, n.nlookup)
		st.forgetIfDead(n)
	}
}

func (r *raw) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n := r.node(st, in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	out.SetTimeout(ttl)
	r.attr(st, n, &out.Attr)
	return fuse.OK
}

func (r *raw) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n := r.node(st, in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		if n.dir {
			return fuse.Status(syscall.EISDIR)
		}
		r.fs.stats.Truncates++
		if err := st.addOp(n, dataOp{kind: opTruncate, off: int64(in.Size)}); err != nil {
			return fuse.ToStatus(errno(err))
		}
	}
	if in.Valid&fuse.FATTR_MODE != 0 {
		n.mode = in.Mode & 0o7777
	}
	if in.Valid&(fuse.FATTR_MTIME|fuse.FATTR_MTIME_NOW) != 0 {
		n.mtime = time.Now()
	}
	out.SetTimeout(ttl)
	r.attr(st, n, &out.Attr)
	return fuse.OK
}

func (r *raw) Access(_ <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	return fuse.OK
}

// create makes a live entry d/name, volatile until d is synced.
func (r *raw) create(st *state, parent uint64, name string, dir bool, mode uint32) (*inode, fuse.Status) {
	d := r.node(st, parent)
	if d == nil || !d.dir {
		return nil, fuse.ENOENT
	}
	if d.live[name] != nil {
		return nil, fuse.Status(syscall.EEXIST)
	}
	n := st.newInode(dir, mode)
	n.lparent, n.lname = d, name
	d.live[name] = n
	d.mtime = time.Now()
	return n, fuse.OK
}

func (r *raw) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n, code := r.create(st, in.NodeId, name, true, in.Mode&^in.Umask)
	if !code.Ok() {
		return code
	}
	r.entry(st, n, out)
	return fuse.OK
}

func (r *raw) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n, code := r.create(st, in.NodeId, name, false, in.Mode&^in.Umask)
	if !code.Ok() {
		return code
	}
	r.entry(st, n, &out.EntryOut)
	r.open(n, in.Flags, &out.OpenOut)
	return fuse.OK
}

func (r *raw) open(n *inode, flags uint32, out *fuse.OpenOut) {
	n.opens++
	r.nextFh++
	r.handles[r.nextFh] = &handle{n: n, flags: flags}
	out.Fh = r.nextFh
	if flags&syscall.O_DIRECT != 0 {
		r.fs.stats.DirectOpens++
	}
}

func (r *raw) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n := r.node(st, in.NodeId)
	if n == nil {
		return fuse.ENOENT
	}
	if n.dir {
		return fuse.Status(syscall.EISDIR)
	}
	r.open(n, in.Flags, out)
	return fuse.OK
}

func (r *raw) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.remove(h.NodeId, name, false)
}

func (r *raw) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.remove(h.NodeId, name, true)
}

func (r *raw) remove(parent uint64, name string, dir bool) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	d := r.node(st, parent)
	if d == nil || !d.dir {
		return fuse.ENOENT
	}
	n := d.live[name]
	switch {
	case n == nil:
		return fuse.ENOENT
	case dir && !n.dir:
		return fuse.Status(syscall.ENOTDIR)
	case !dir && n.dir:
		return fuse.Status(syscall.EISDIR)
	case dir && len(n.live) > 0:
		return fuse.Status(syscall.ENOTEMPTY)
	}
	st.unlinkLive(n)
	d.mtime = time.Now()
	return fuse.OK
}

func (r *raw) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	from, to := r.node(st, in.NodeId), r.node(st, in.Newdir)
	if from == nil || to == nil || !from.dir || !to.dir {
		return fuse.ENOENT
	}
	n := from.live[oldName]
	if n == nil {
		return fuse.ENOENT
	}
	if in.Flags&^unix.RENAME_NOREPLACE != 0 {
		return fuse.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT: not modelled
	}
	if old := to.live[newName]; old != nil {
		switch {
		case old == n:
			return fuse.OK
		case in.Flags&unix.RENAME_NOREPLACE != 0:
			return fuse.Status(syscall.EEXIST)
		case n.dir && !old.dir:
			return fuse.Status(syscall.ENOTDIR)
		case !n.dir && old.dir:
			return fuse.Status(syscall.EISDIR)
		case old.dir && len(old.live) > 0:
			return fuse.Status(syscall.ENOTEMPTY)
		}
		st.unlinkLive(old)
	}
	delete(from.live, oldName)
	n.lparent, n.lname = to, newName
	to.live[newName] = n
	from.mtime, to.mtime = time.Now(), time.Now()
	return fuse.OK
}

func (r *raw) Link(<-chan struct{}, *fuse.LinkIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM // hard links are not modelled
}

func (r *raw) Symlink(<-chan struct{}, *fuse.InHeader, string, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM // symbolic links are not modelled
}

func (r *raw) Mknod(<-chan struct{}, *fuse.MknodIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (r *raw) Read(_ <-chan struct{}, in *fuse.ReadIn, _ []byte) (fuse.ReadResult, fuse.Status) {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return nil, fuse.EIO
	}
	h := r.handles[in.Fh]
	if h == nil {
		return nil, fuse.EBADF
	}
	b, err := st.read(h.n, int64(in.Offset), int(in.Size))
	if err != nil {
		return nil, fuse.ToStatus(errno(err))
	}
	return fuse.ReadResultData(b), fuse.OK
}

func (r *raw) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return 0, fuse.EIO
	}
	h := r.handles[in.Fh]
	if h == nil {
		return 0, fuse.EBADF
	}
	r.fs.stats.Writes++
	if in.Flags&syscall.O_DIRECT != 0 {
		r.fs.stats.DirectWrites++
	}
	op := dataOp{kind: opWrite, off: int64(in.Offset), n: int64(len(data)), data: append([]byte(nil), data...)}
	if err := st.addOp(h.n, op); err != nil {
		return 0, fuse.ToStatus(errno(err))
	}
	// O_SYNC, O_DSYNC, RWF_SYNC, RWF_DSYNC: the kernel marks the write
	// and sends an FSYNC after it; the write is durable when it returns.
	if in.Flags&(syscall.O_DSYNC|syscall.O_SYNC) != 0 {
		r.fs.stats.SyncWrites++
		if err := st.syncData(h.n); err != nil {
			return 0, fuse.ToStatus(errno(err))
		}
	}
	return uint32(len(data)), fuse.OK
}

func (r *raw) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	h := r.handles[in.Fh]
	if h == nil {
		return fuse.EBADF
	}
	op := dataOp{off: int64(in.Offset), n: int64(in.Length), keep: in.Mode&unix.FALLOC_FL_KEEP_SIZE != 0}
	switch in.Mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
		op.kind = opAlloc
		r.fs.stats.Allocs++
	case unix.FALLOC_FL_PUNCH_HOLE:
		if !op.keep {
			return fuse.EINVAL
		}
		op.kind = opPunch
		r.fs.stats.Punches++
	case unix.FALLOC_FL_ZERO_RANGE:
		op.kind = opZero
		r.fs.stats.Punches++
	default:
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	if err := st.addOp(h.n, op); err != nil {
		return fuse.ToStatus(errno(err))
	}
	return fuse.OK
}

func (r *raw) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	n := r.node(st, in.NodeId)
	if h := r.handles[in.Fh]; h != nil {
		n = h.n
	}
	if n == nil {
		return fuse.EBADF
	}
	r.fs.stats.Fsyncs++
	if err := st.syncData(n); err != nil {
		r.fs.logf("powercut: fsync: %v", err)
		return fuse.ToStatus(errno(err))
	}
	return fuse.OK
}

func (r *raw) Flush(<-chan struct{}, *fuse.FlushIn) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	return fuse.OK // close(2) makes nothing durable
}

func (r *raw) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	r.fs.mu.Lock()
	defer r.fs.mu.Unlock()
	h := r.handles[in.Fh]
	delete(r.handles, in.Fh)
	if h == nil || r.st == nil {
		return
	}
	h.n.opens--
	r.st.released(h.n)
}

func (r *raw) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	d := r.node(st, in.NodeId)
	if d == nil || !d.dir {
		return fuse.Status(syscall.ENOTDIR)
	}
	h := &handle{n: d, flags: in.Flags}
	for name, n := range d.live {
		h.names = append(h.names, dirent{name, n.id, n.dir})
	}
	slices.SortFunc(h.names, func(a, b dirent) int {
		if a.name < b.name {
			return -1
		}
		return 1
	})
	d.opens++
	r.nextFh++
	r.handles[r.nextFh] = h
	out.Fh = r.nextFh
	return fuse.OK
}

func (r *raw) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	h := r.handles[in.Fh]
	if h == nil {
		return fuse.EBADF
	}
	for i := int(in.Offset); i < len(h.names); i++ {
		e := h.names[i]
		mode := uint32(syscall.S_IFREG)
		if e.dir {
			mode = syscall.S_IFDIR
		}
		if !out.AddDirEntry(fuse.DirEntry{Name: e.name, Ino: e.ino, Mode: mode, Off: uint64(i + 1)}) {
			break
		}
	}
	return fuse.OK
}

func (r *raw) ReleaseDir(in *fuse.ReleaseIn) {
	r.Release(nil, in)
}

func (r *raw) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	d := r.node(st, in.NodeId)
	if d == nil || !d.dir {
		return fuse.EBADF
	}
	r.fs.stats.DirSyncs++
	if err := st.syncDir(d); err != nil {
		r.fs.logf("powercut: fsync of a directory: %v", err)
		return fuse.ToStatus(errno(err))
	}
	return fuse.OK
}

func (r *raw) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st := r.lock()
	defer r.unlock()
	if st == nil {
		return fuse.EIO
	}
	var s unix.Statfs_t
	if err := unix.Statfs(st.backing, &s); err != nil {
		return fuse.ToStatus(err)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize, out.NameLen = uint32(s.Bsize), uint32(s.Frsize), uint32(s.Namelen)
	return fuse.OK
}
