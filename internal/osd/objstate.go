package osd

import (
	"encoding/binary"
	"errors"
	"sort"
	"time"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/zeebo/xxh3"
)

// versionXattr holds, on every object, the pg.EVersion of the write that last
// changed it. Peering compares these across the copies of a PG to find the
// stale ones without reading data. The reserved prefix hides it from clients.
const versionXattr = proto.ReservedPrefix + "v"

// scrubChunk is how much of an object a deep read takes at once.
const scrubChunk = 4 << 20

// stateLevel says how much of an object's copy localState looks at.
type stateLevel int

const (
	stateVersion stateLevel = iota // pg.EVersion and size: two index lookups (peering)
	stateDigest                    // and a digest of xattrs and omap (light scrub)
	stateDeep                      // and every byte, checksums verified (deep scrub)
)

// localState computes the state of this OSD's copy of an object. It
// returns objstore.ErrNotFound if there is no copy.
func (s *Server) localState(coll, name string, level stateLevel) (pg.ObjState, int64, error) {
	info, err := s.store.Stat(coll, name)
	if err != nil {
		return pg.ObjState{}, 0, err
	}
	st := pg.ObjState{Size: info.Size}
	deep := level == stateDeep
	if level == stateVersion {
		v, err := s.store.GetXattr(coll, name, versionXattr)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return s.corruptState(st, deep, err)
		}
		st.Ver, _ = pg.DecodeEVersion(v)
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
			st.Ver, _ = pg.DecodeEVersion(xs[k])
			continue
		}
		if k == shardMetaXattr || k == inlineUndoXattr {
			continue // the shard's position and rollback state: the keys compare across positions without them
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
	if m, err := pg.DecodeShardMeta(xs[shardMetaXattr]); err == nil && m.Ver == st.Ver {
		st.Held = m.Held // the positions a partial write skipped: scrub compares them as at it
	}
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
func (s *Server) corruptState(st pg.ObjState, deep bool, err error) (pg.ObjState, int64, error) {
	if objstore.IsCorruption(err) {
		st.Deep, st.Corrupt = true, true
		return st, 0, nil
	}
	return pg.ObjState{}, 0, err
}

func digestKV(h *xxh3.Hasher, k, v []byte) {
	var n [8]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(k)))
	binary.BigEndian.PutUint32(n[4:], uint32(len(v)))
	h.Write(n[:])
	h.Write(k)
	h.Write(v)
}
