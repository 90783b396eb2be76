package objstore

// Lookups of everything but object data: object records (through the
// index cache and the filter of object keys), Stat, xattrs, omaps,
// listings of objects and collections.

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// getIndexed is get for an object record, checksum chunk or xattr,
// through the index cache; the caller holds the object's shard lock (see
// indexCache).
func (s *Store) getIndexed(key []byte) ([]byte, error) {
	if v, ok := s.idx.get(key); ok {
		if v == nil {
			return nil, pebble.ErrNotFound
		}
		return v, nil
	}
	v, err := s.get(key)
	switch {
	case err == nil:
		s.idx.fill(key, v)
	case errors.Is(err, pebble.ErrNotFound):
		s.idx.fillAbsent(key)
	}
	return v, err
}

// loadRec reads an object record; caller holds the object's shard lock.
func (s *Store) loadRec(coll, name string) (objRec, bool, error) {
	key := objKey(coll, name)
	if f := s.filter.Load(); f != nil && !f.mayContain(key) {
		s.filterSkips.Add(1)
		return objRec{}, false, nil
	}
	v, err := s.getIndexed(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return objRec{}, false, nil
	}
	if err != nil {
		return objRec{}, false, err
	}
	r, err := decodeObjRec(v)
	if err != nil {
		return objRec{}, false, &CorruptionError{Coll: coll, Name: name, Detail: err.Error()}
	}
	return r, true, nil
}

func (s *Store) objID(coll, name string) (uint64, error) {
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, notFound(coll, name)
	}
	return r.id, nil
}

// Stat returns the object's size and modification time.
func (s *Store) Stat(coll, name string) (Info, error) {
	if err := checkName(coll, name); err != nil {
		return Info{}, err
	}
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, notFound(coll, name)
	}
	return Info{Size: r.size, Mtime: time.Unix(0, r.mtime)}, nil
}

// DataPath returns the object's bulk data file, if it has one.
func (s *Store) DataPath(coll, name string) (string, bool) {
	if checkName(coll, name) != nil {
		return "", false
	}
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil || !ok || r.inline {
		return "", false
	}
	return s.filePath(r.fileID), true
}

// GetXattr returns one extended attribute.
func (s *Store) GetXattr(coll, name, key string) ([]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	v, err := s.getIndexed(idKey(tagXattr, id, []byte(key)))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("objstore: xattr %q of %q/%q: %w", key, coll, name, ErrNotFound)
	}
	return v, err
}

// Xattrs returns all extended attributes of the object.
func (s *Store) Xattrs(coll, name string) (map[string][]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	_, err = s.scan(idKey(tagXattr, id, nil), idKey(tagXattr, id+1, nil), 0, func(k, v []byte) {
		out[string(k[9:])] = bytes.Clone(v)
	})
	return out, err
}

// OmapGet returns one omap value.
func (s *Store) OmapGet(coll, name string, key []byte) ([]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	v, err := s.get(idKey(tagOmap, id, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("objstore: omap key %q of %q/%q: %w", key, coll, name, ErrNotFound)
	}
	return v, err
}

// OmapList returns omap entries in [start, end) (nil end = no end), sorted,
// at most limit of them (limit <= 0 = all), and whether more remain.
func (s *Store) OmapList(coll, name string, start, end []byte, limit int) ([]KV, bool, error) {
	if err := checkName(coll, name); err != nil {
		return nil, false, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, false, err
	}
	hi := idKey(tagOmap, id+1, nil)
	if end != nil {
		hi = idKey(tagOmap, id, end)
	}
	lo := idKey(tagOmap, id, start)
	var kvs []KV
	if bytes.Compare(lo, hi) >= 0 {
		return kvs, false, nil
	}
	more, err := s.scan(lo, hi, limit, func(k, v []byte) {
		kvs = append(kvs, KV{Key: bytes.Clone(k[9:]), Value: bytes.Clone(v)})
	})
	return kvs, more, err
}

// List returns object names in coll greater than after, sorted, at most limit
// (limit <= 0 = all), and whether more remain.
func (s *Store) List(coll string, after string, limit int) ([]string, bool, error) {
	if len(coll) == 0 || len(coll) > MaxNameLen {
		return nil, false, fmt.Errorf("objstore: collection %q: %w", coll, ErrInvalid)
	}
	prefix := collPrefix(coll)
	lo := prefix
	if after != "" {
		lo = appendEsc(bytes.Clone(prefix), after)
		lo = append(lo, 0) // the successor of after's key
	}
	var names []string
	var bad bool
	more, err := s.scan(lo, collEnd(coll), limit, func(k, _ []byte) {
		n, rest, ok := unesc(k[len(prefix):])
		if !ok || len(rest) != 0 {
			bad = true
			return
		}
		names = append(names, n)
	})
	if err == nil && bad {
		err = &CorruptionError{Coll: coll, Detail: "bad object key"}
	}
	return names, more, err
}

// Collections returns every collection that holds at least one object.
func (s *Store) Collections() ([]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagObject}, UpperBound: []byte{tagObject + 1}})
	if err != nil {
		return nil, err
	}
	var out []string
	for valid := it.First(); valid; {
		c, _, ok := unesc(it.Key()[1:])
		if !ok {
			it.Close()
			return nil, &CorruptionError{Detail: "bad object key"}
		}
		out = append(out, c)
		valid = it.SeekGE(collEnd(c))
	}
	return out, it.Close()
}

// scan calls fn for keys in [lo, hi) and reports whether more than limit
// (if > 0) keys exist.
func (s *Store) scan(lo, hi []byte, limit int, fn func(k, v []byte)) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	n := 0
	more := false
	for it.First(); it.Valid(); it.Next() {
		if limit > 0 && n == limit {
			more = true
			break
		}
		fn(it.Key(), it.Value())
		n++
	}
	return more, it.Close()
}
