package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/zeebo/xxh3"
)

// versionXattr holds, on every object, the eversion of the write that last
// changed it. Peering compares these across the copies of a PG to find the
// stale ones without reading data. The reserved prefix hides it from clients.
const versionXattr = proto.ReservedPrefix + "v"

// eversion orders the writes of a PG: the epoch of the interval in which the
// primary went active, then the PG version. Two primaries of different
// intervals can hand out the same PG version, never the same eversion.
type eversion struct {
	Epoch   uint64
	Version uint64
}

func (e eversion) less(o eversion) bool {
	return e.Epoch < o.Epoch || e.Epoch == o.Epoch && e.Version < o.Version
}

func (e eversion) String() string { return fmt.Sprintf("%d'%d", e.Epoch, e.Version) }

func (e eversion) encode() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, e.Epoch)
	binary.BigEndian.PutUint64(b[8:], e.Version)
	return b
}

func decodeEversion(b []byte) (eversion, bool) {
	if len(b) != 16 {
		return eversion{}, false
	}
	return eversion{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}, true
}

// objState summarises one copy of an object for peering and scrub.
//
// Encoding (version 1): [1 format][8 epoch][8 version][8 size][8 meta digest]
// [8 data digest][1 flags].
type objState struct {
	Ver     eversion
	Size    uint64
	Meta    uint64 // digest of the xattrs (but the version) and the omap
	Data    uint64 // digest of the data; deep listings only
	Deep    bool   // Data was computed
	Corrupt bool   // deep: a checksum failed; Data is meaningless
}

const (
	objStateFormat = 1
	objStateLen    = 1 + 8*5 + 1
	flagDeep       = 1
	flagCorrupt    = 2
)

func (o objState) encode() []byte {
	b := make([]byte, objStateLen)
	b[0] = objStateFormat
	binary.BigEndian.PutUint64(b[1:], o.Ver.Epoch)
	binary.BigEndian.PutUint64(b[9:], o.Ver.Version)
	binary.BigEndian.PutUint64(b[17:], o.Size)
	binary.BigEndian.PutUint64(b[25:], o.Meta)
	binary.BigEndian.PutUint64(b[33:], o.Data)
	if o.Deep {
		b[41] |= flagDeep
	}
	if o.Corrupt {
		b[41] |= flagCorrupt
	}
	return b
}

var errBadObjState = errors.New("object state: malformed")

func decodeObjState(b []byte) (objState, error) {
	if len(b) != objStateLen || b[0] != objStateFormat || b[41]&^(flagDeep|flagCorrupt) != 0 {
		return objState{}, errBadObjState
	}
	return objState{
		Ver:     eversion{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])},
		Size:    binary.BigEndian.Uint64(b[17:]),
		Meta:    binary.BigEndian.Uint64(b[25:]),
		Data:    binary.BigEndian.Uint64(b[33:]),
		Deep:    b[41]&flagDeep != 0,
		Corrupt: b[41]&flagCorrupt != 0,
	}, nil
}

// sameCopy reports whether two copies hold the same object: for recovery
// the versions decide; scrub also compares what was measured on both.
func sameCopy(a, b objState) bool {
	if a.Corrupt || b.Corrupt {
		return false
	}
	if a.Ver != b.Ver || a.Size != b.Size || a.Meta != b.Meta {
		return false
	}
	return !a.Deep || !b.Deep || a.Data == b.Data
}

// scrubChunk is how much of an object a deep read takes at once.
const scrubChunk = 4 << 20

// stateLevel says how much of an object's copy localState looks at.
type stateLevel int

const (
	stateVersion stateLevel = iota // eversion and size: two index lookups (peering)
	stateDigest                    // and a digest of xattrs and omap (light scrub)
	stateDeep                      // and every byte, checksums verified (deep scrub)
)

// localState computes the state of this OSD's copy of an object. It
// returns objstore.ErrNotFound if there is no copy.
func (s *Server) localState(coll, name string, level stateLevel) (objState, int64, error) {
	info, err := s.store.Stat(coll, name)
	if err != nil {
		return objState{}, 0, err
	}
	st := objState{Size: info.Size}
	deep := level == stateDeep
	if level == stateVersion {
		v, err := s.store.GetXattr(coll, name, versionXattr)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return s.corruptState(st, deep, err)
		}
		st.Ver, _ = decodeEversion(v)
		return st, 0, nil
	}
	xs, err := s.store.Xattrs(coll, name)
	if err != nil {
		return s.corruptState(st, deep, err)
	}
	h := xxh3.New()
	keys := make([]string, 0, len(xs))
	for k := range xs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == versionXattr {
			st.Ver, _ = decodeEversion(xs[k])
			continue
		}
		digestKV(h, []byte(k), xs[k])
	}
	h.Write([]byte{0xff})
	var start []byte
	for {
		kvs, more, err := s.store.OmapList(coll, name, start, nil, 1024)
		if err != nil {
			return s.corruptState(st, deep, err)
		}
		for _, kv := range kvs {
			digestKV(h, kv.Key, kv.Value)
		}
		if !more || len(kvs) == 0 {
			break
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
	st.Meta = h.Sum64()
	if !deep {
		return st, 0, nil
	}
	st.Deep = true
	d := xxh3.New()
	var read int64
	for off := uint64(0); off < info.Size; off += scrubChunk {
		start := time.Now()
		b, err := s.store.Read(coll, name, off, scrubChunk)
		if err != nil {
			return s.corruptState(st, deep, err)
		}
		d.Write(b)
		read += int64(len(b))
		if s.clientBusy() {
			// Clients first: read at most half the time while they work.
			time.Sleep(time.Since(start))
		}
	}
	st.Data = d.Sum64()
	return st, read, nil
}

// corruptState turns a checksum error found while computing a state into a
// corrupt state (deep) or passes other errors on.
func (s *Server) corruptState(st objState, deep bool, err error) (objState, int64, error) {
	if objstore.IsCorruption(err) {
		st.Deep, st.Corrupt = true, true
		return st, 0, nil
	}
	return objState{}, 0, err
}

func digestKV(h *xxh3.Hasher, k, v []byte) {
	var n [8]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(k)))
	binary.BigEndian.PutUint32(n[4:], uint32(len(v)))
	h.Write(n[:])
	h.Write(k)
	h.Write(v)
}
