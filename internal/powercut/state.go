package powercut

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The model: every inode of the mount lives in memory with two views.
//
// The live view is what programs see: the live entries of each directory
// and, for a file, its durable content with its volatile data ops applied in
// order over it.
//
// The durable view is the backing directory: a directory's durable entries
// (dur) mirror the real directory at its durable path, and a file's durable
// content is the real file there. An inode that has durable data but no
// durable name (created and fsynced, its directory not yet synced; or
// unlinked durably while still open) lives in the stage directory beside the
// backing one, named by its inode number: a cut frees it, as a journaling
// filesystem frees orphan inodes.

type opKind uint8

const (
	opWrite    opKind = iota + 1 // data at off
	opTruncate                   // size = off
	opPunch                      // zeros in [off, off+n), size unchanged
	opZero                       // zeros in [off, off+n), size extended unless keep
	opAlloc                      // allocation of [off, off+n), size extended unless keep
)

type dataOp struct {
	kind opKind
	off  int64
	n    int64 // length (write: len(data))
	keep bool  // FALLOC_FL_KEEP_SIZE
	data []byte
}

type inode struct {
	id   uint64
	dir  bool
	mode uint32 // permission bits

	// Live namespace: position and, for a directory, entries.
	lparent *inode
	lname   string
	live    map[string]*inode

	// Durable namespace: position and, for a directory, entries. The root
	// is always durable; staged inodes are durable without a name.
	dparent *inode
	dname   string
	dur     map[string]*inode
	staged  bool

	// A file's data: the live size, the ops not yet durable in order and
	// their data bytes, and the open backing file of the durable content.
	size    int64
	ops     []dataOp
	opBytes int64
	bf      *os.File

	opens   int
	nlookup uint64
	mtime   time.Time
}

// state is the whole filesystem of one mount; every method is called with
// FS.mu held.
type state struct {
	backing, stage string
	root           *inode
	nodes          map[uint64]*inode
	nextID         uint64
	volBytes       int64 // sum of opBytes
	maxVol         int64
	stats          *Stats
}

func newState(backing, stage string, maxVol int64, st *Stats) (*state, error) {
	s := &state{backing: backing, stage: stage, nodes: map[uint64]*inode{}, nextID: 1, maxVol: maxVol, stats: st}
	if err := os.RemoveAll(stage); err != nil {
		return nil, err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return nil, err
	}
	s.root = s.newInode(true, 0o755)
	if err := s.load(s.root); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *state) newInode(dir bool, mode uint32) *inode {
	n := &inode{id: s.nextID, dir: dir, mode: mode & 0o7777, mtime: time.Now()}
	s.nextID++
	if dir {
		n.live, n.dur = map[string]*inode{}, map[string]*inode{}
	}
	s.nodes[n.id] = n
	return n
}

// load reads the backing directory of d (durable and live alike).
func (s *state) load(d *inode) error {
	ents, err := os.ReadDir(s.dpath(d))
	if err != nil {
		return err
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("powercut: %s: only files and directories are modelled", filepath.Join(s.dpath(d), e.Name()))
		}
		n := s.newInode(info.IsDir(), uint32(info.Mode().Perm()))
		n.lparent, n.lname, n.dparent, n.dname = d, e.Name(), d, e.Name()
		n.size, n.mtime = info.Size(), info.ModTime()
		d.live[e.Name()], d.dur[e.Name()] = n, n
		if n.dir {
			if err := s.load(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// rootID is the root directory's inode number.
const rootID = 1

// durable reports whether n exists in the backing or stage directory.
func (n *inode) durable() bool { return n.id == rootID || n.dparent != nil || n.staged }

// named reports whether n has a durable path from the root: what survives a
// cut.
func (n *inode) named() bool {
	for a := n; a.id != rootID; a = a.dparent {
		if a.dparent == nil {
			return false
		}
	}
	return true
}

// dpath is the backing path of a durable inode.
func (s *state) dpath(n *inode) string {
	switch {
	case n == s.root:
		return s.backing
	case n.staged:
		return filepath.Join(s.stage, strconv.FormatUint(n.id, 10))
	case n.dparent == nil:
		panic(fmt.Sprintf("powercut: inode %d has no durable path", n.id))
	}
	return filepath.Join(s.dpath(n.dparent), n.dname)
}

// file returns the backing file of n's durable content, nil if it has none.
func (s *state) file(n *inode) (*os.File, error) {
	if n.bf != nil || !n.durable() {
		return n.bf, nil
	}
	f, err := os.OpenFile(s.dpath(n), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	n.bf = f
	return f, nil
}

// needed reports whether a program can still reach n (by a live name or an
// open handle).
func (n *inode) needed() bool { return n.lparent != nil || n.opens > 0 || n.id == rootID }

// ensureDurable gives n a durable existence, staged if it has no durable
// name.
func (s *state) ensureDurable(n *inode) error {
	if n.durable() {
		return nil
	}
	n.staged = true
	p := s.dpath(n)
	if n.dir {
		return os.Mkdir(p, os.FileMode(n.mode|0o700))
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(n.mode|0o600))
	if err != nil {
		return err
	}
	n.bf = f
	return nil
}

// dropDurable takes n's durable name away. If a program can still reach n,
// its durable content moves to the stage; otherwise it is deleted, with
// whatever of its subtree no program reaches.
func (s *state) dropDurable(n *inode) error {
	if n.dparent == nil {
		return nil
	}
	p := s.dpath(n)
	delete(n.dparent.dur, n.dname)
	n.dparent, n.dname = nil, ""
	if n.needed() {
		n.staged = true
		return os.Rename(p, s.dpath(n))
	}
	return s.deleteDurable(n, p)
}

func (s *state) deleteDurable(n *inode, p string) error {
	if n.dir {
		for name, c := range n.dur {
			c.dparent, c.dname = nil, ""
			delete(n.dur, name)
			if c.needed() {
				c.staged = true
				if err := os.Rename(filepath.Join(p, name), s.dpath(c)); err != nil {
					return err
				}
			} else if err := s.deleteDurable(c, filepath.Join(p, name)); err != nil {
				return err
			}
		}
		return os.Remove(p)
	}
	if n.bf != nil {
		n.bf.Close()
		n.bf = nil
	}
	s.forgetIfDead(n)
	return os.Remove(p)
}

// setDurable gives n the durable name d/name, which must be free: moving it
// from its old durable name or the stage, or creating it empty.
func (s *state) setDurable(n, d *inode, name string) error {
	if n.dir {
		// A directory cannot move below itself: if d lies durably
		// inside n, d's own live position goes first (it is no longer
		// inside n live).
		for a := d; a != nil; a = a.dparent {
			if a == n {
				if err := s.persistEntry(d.lparent, d.lname); err != nil {
					return err
				}
				break
			}
		}
	}
	if err := s.ensureDurable(d); err != nil {
		return err
	}
	target := filepath.Join(s.dpath(d), name)
	if n.durable() {
		if err := os.Rename(s.dpath(n), target); err != nil {
			return err
		}
		if n.dparent != nil {
			delete(n.dparent.dur, n.dname)
		}
		n.staged = false
	} else if n.dir {
		if err := os.Mkdir(target, os.FileMode(n.mode|0o700)); err != nil {
			return err
		}
	} else {
		f, err := os.OpenFile(target, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(n.mode|0o600))
		if err != nil {
			return err
		}
		n.bf = f
	}
	n.dparent, n.dname = d, name
	d.dur[name] = n
	return nil
}

// persistEntry makes the durable entry d/name what the live one is. A
// rename is one atomic change: persisting either of its directories
// persists both of its ends, as a journaling filesystem commits it.
func (s *state) persistEntry(d *inode, name string) error {
	return s.persist(d, name, map[entry]bool{})
}

type entry struct {
	dir  uint64
	name string
}

func (s *state) persist(d *inode, name string, visiting map[entry]bool) error {
	x, y := d.live[name], d.dur[name]
	if x == y {
		return nil
	}
	visiting[entry{d.id, name}] = true
	if y != nil && y.lparent != nil && !visiting[entry{y.lparent.id, y.lname}] {
		// y was renamed away from here: its new name becomes
		// durable with the removal of this one. (A cycle of renames
		// goes through the stage instead.)
		if err := s.persist(y.lparent, y.lname, visiting); err != nil {
			return err
		}
	}
	if y = d.dur[name]; y != nil && y != x {
		if err := s.dropDurable(y); err != nil {
			return err
		}
	}
	if x != nil && d.dur[name] != x {
		return s.setDurable(x, d, name)
	}
	return nil
}

// syncDir is fsync of directory d: its durable entries become its live
// ones.
func (s *state) syncDir(d *inode) error {
	names := make([]string, 0, len(d.live)+len(d.dur))
	for name := range d.live {
		names = append(names, name)
	}
	for name := range d.dur {
		if _, ok := d.live[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := s.persistEntry(d, name); err != nil {
			return fmt.Errorf("powercut: sync of directory %d entry %q: %w", d.id, name, err)
		}
	}
	return nil
}

// addOp records a volatile data op of file n.
func (s *state) addOp(n *inode, op dataOp) error {
	n.ops = append(n.ops, op)
	n.opBytes += int64(len(op.data))
	s.volBytes += int64(len(op.data))
	end := op.off + op.n
	switch op.kind {
	case opWrite:
		n.size = max(n.size, end)
	case opTruncate:
		n.size = op.off
	case opZero, opAlloc:
		if !op.keep {
			n.size = max(n.size, end)
		}
	}
	n.mtime = time.Now()
	// Bounded memory: past maxVol the largest volatile files are written
	// back, as a page cache under pressure and a full disk cache do.
	for s.volBytes > s.maxVol {
		var big *inode
		for _, m := range s.nodes {
			if big == nil || m.opBytes > big.opBytes {
				big = m
			}
		}
		if big == nil || big.opBytes == 0 {
			break
		}
		s.stats.ForcedWritebacks++
		if err := s.syncData(big); err != nil {
			return err
		}
	}
	return nil
}

// syncData is fsync of file n: its ops reach its durable content.
func (s *state) syncData(n *inode) error {
	if len(n.ops) == 0 {
		return nil
	}
	if err := s.ensureDurable(n); err != nil {
		return err
	}
	f, err := s.file(n)
	if err != nil {
		return err
	}
	for _, op := range n.ops {
		if err := applyOp(f, op); err != nil {
			return fmt.Errorf("powercut: sync of %s: %w", s.dpath(n), err)
		}
	}
	s.clearOps(n)
	return nil
}

func (s *state) clearOps(n *inode) {
	s.volBytes -= n.opBytes
	n.ops, n.opBytes = nil, 0
}

// syncAll is syncfs: every volatile op of every inode becomes durable.
func (s *state) syncAll() error {
	for _, n := range s.sorted() {
		if n.dir {
			if err := s.syncDir(n); err != nil {
				return err
			}
		}
	}
	for _, n := range s.sorted() {
		if !n.dir {
			if err := s.syncData(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// sorted returns the inodes in the order they were made: iteration that a
// seed replays.
func (s *state) sorted() []*inode {
	ns := make([]*inode, 0, len(s.nodes))
	for _, n := range s.nodes {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(a, b *inode) int { return int(a.id) - int(b.id) })
	return ns
}

func applyOp(f *os.File, op dataOp) error {
	switch op.kind {
	case opWrite:
		_, err := f.WriteAt(op.data, op.off)
		return err
	case opTruncate:
		return f.Truncate(op.off)
	case opPunch:
		return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, op.off, op.n)
	case opZero, opAlloc:
		mode := uint32(0)
		if op.kind == opZero {
			mode = unix.FALLOC_FL_ZERO_RANGE
		}
		if op.keep {
			mode |= unix.FALLOC_FL_KEEP_SIZE
		}
		return unix.Fallocate(int(f.Fd()), mode, op.off, op.n)
	}
	return fmt.Errorf("unknown op %d", op.kind)
}

// read returns n's live content in [off, off+size).
func (s *state) read(n *inode, off int64, size int) ([]byte, error) {
	if off >= n.size {
		return nil, nil
	}
	end := min(n.size, off+int64(size))
	buf := make([]byte, end-off)
	f, err := s.file(n)
	if err != nil {
		return nil, err
	}
	if f != nil {
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	for _, op := range n.ops {
		lo, hi := max(op.off, off), min(op.off+op.n, end)
		switch op.kind {
		case opWrite:
			if lo < hi {
				copy(buf[lo-off:hi-off], op.data[lo-op.off:])
			}
		case opPunch, opZero:
			if lo < hi {
				clear(buf[lo-off : hi-off])
			}
		case opTruncate:
			if op.off < end {
				clear(buf[max(op.off, off)-off:])
			}
		}
	}
	return buf, nil
}

// forgetIfDead drops n from the node table once nothing can reach it: no
// live name, no handle, no kernel reference and no durable existence.
func (s *state) forgetIfDead(n *inode) {
	if n.needed() || n.nlookup > 0 || n.durable() {
		return
	}
	s.clearOps(n)
	if n.bf != nil {
		n.bf.Close()
		n.bf = nil
	}
	delete(s.nodes, n.id)
}

// unlinkLive removes n's live name; an inode nothing reaches any more loses
// its volatile data (it can never become durable) and, if staged, its
// staged content.
func (s *state) unlinkLive(n *inode) {
	delete(n.lparent.live, n.lname)
	n.lparent, n.lname = nil, ""
	s.released(n)
}

// released is called when n may have become unreachable.
func (s *state) released(n *inode) {
	if n.needed() {
		return
	}
	s.clearOps(n)
	if n.staged {
		p := s.dpath(n)
		n.staged = false
		if err := s.deleteDurable(n, p); err != nil {
			s.stats.Errors++
		}
	}
	s.forgetIfDead(n)
}

// close releases every backing file.
func (s *state) close() {
	for _, n := range s.nodes {
		if n.bf != nil {
			n.bf.Close()
			n.bf = nil
		}
	}
}

// cut drops the volatile state: the stage (nameless inodes) goes, the
// backing directory already holds the rest.
func (s *state) cut() error {
	s.close()
	return os.RemoveAll(s.stage)
}

// CutReport says what a harsh cut kept.
type CutReport struct {
	Seed                     int64
	DirsSynced, DirsDropped  int // directories with pending entries
	OpsKept, OpsDropped      int // volatile data ops of files that kept a name
	WritesTorn, SectorsKept  int // kept writes applied only in part, and their sectors that landed
	SectorsDropped, Orphaned int // sectors of torn writes lost; files lost with their names
}

const sector = 512

// cutHarsh persists a random part of the volatile state: each directory
// with pending entries is synced or not, at random; then, for every file
// that has a durable name, a random subset of its volatile ops lands in
// random order, and a write of more than one sector may land torn: each of
// its 512-byte sectors (at file offsets that are multiples of 512) lands or
// not, a sector never in part.
func (s *state) cutHarsh(seed int64) (CutReport, error) {
	r := rand.New(rand.NewSource(seed))
	rep := CutReport{Seed: seed}
	for _, d := range s.sorted() {
		if !d.dir || !d.needed() || !pending(d) {
			continue
		}
		if r.Intn(2) == 0 {
			rep.DirsDropped++
			continue
		}
		rep.DirsSynced++
		if err := s.syncDir(d); err != nil {
			return rep, err
		}
	}
	for _, n := range s.sorted() {
		if n.dir || len(n.ops) == 0 {
			continue
		}
		if !n.named() {
			rep.Orphaned++
			continue
		}
		f, err := s.file(n)
		if err != nil {
			return rep, err
		}
		var kept []dataOp
		for _, op := range n.ops {
			if r.Intn(2) == 0 {
				rep.OpsDropped++
				continue
			}
			rep.OpsKept++
			kept = append(kept, op)
		}
		r.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
		for _, op := range kept {
			if op.kind != opWrite || op.n <= sector || op.off/sector == (op.off+op.n-1)/sector || r.Intn(2) == 0 {
				if err := applyOp(f, op); err != nil {
					return rep, err
				}
				continue
			}
			rep.WritesTorn++
			for lo := op.off; lo < op.off+op.n; {
				hi := min((lo/sector+1)*sector, op.off+op.n)
				if r.Intn(2) == 0 {
					rep.SectorsDropped++
				} else {
					rep.SectorsKept++
					if _, err := f.WriteAt(op.data[lo-op.off:hi-op.off], lo); err != nil {
						return rep, err
					}
				}
				lo = hi
			}
		}
	}
	return rep, s.cut()
}

// pending reports whether directory d has entries not yet durable.
func pending(d *inode) bool {
	if len(d.live) != len(d.dur) {
		return true
	}
	for name, n := range d.live {
		if d.dur[name] != n {
			return true
		}
	}
	return false
}

func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
