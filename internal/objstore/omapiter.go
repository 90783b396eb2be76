package objstore

import (
	"github.com/cockroachdb/pebble/v2"
)

// OmapIter walks one object's omap in key order, over the committed state
// of the moment NewOmapIter made it: transactions applied since do not
// show. It can jump forward (SeekGE), so a caller can skip a whole run of
// keys, say every key under a common prefix, in one step instead of
// reading them. It holds no lock of the store, but it pins the index's
// state of that moment: close it soon. Not safe for concurrent use.
type OmapIter struct {
	s      *Store
	it     *pebble.Iterator
	prefix []byte // tagOmap objID: the index key of omap key k is prefix+k
	seek   []byte // reused key buffer
	err    error
}

// NewOmapIter returns an iterator over the omap of coll/name, positioned
// nowhere: call SeekGE first. ErrNotFound if the object does not exist.
func (s *Store) NewOmapIter(coll, name string) (*OmapIter, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	// The object's record and its omap keys change together under the
	// object's lock: the iterator, made under it, sees one state of both.
	unlock := s.rlock(coll, name)
	defer unlock()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: idKey(tagOmap, id, nil), UpperBound: idKey(tagOmap, id+1, nil)})
	if err != nil {
		return nil, s.indexError(err)
	}
	return &OmapIter{s: s, it: it, prefix: idKey(tagOmap, id, nil)}, nil
}

// SeekGE moves to the first key >= key and reports whether there is one.
func (o *OmapIter) SeekGE(key []byte) bool {
	o.seek = append(append(o.seek[:0], o.prefix...), key...)
	return o.it.SeekGE(o.seek)
}

// Next moves to the next key and reports whether there is one.
func (o *OmapIter) Next() bool { return o.it.Next() }

// Key is the current omap key; valid until the iterator moves.
func (o *OmapIter) Key() []byte { return o.it.Key()[len(o.prefix):] }

// Value is the current value; valid until the iterator moves.
func (o *OmapIter) Value() []byte { return o.it.Value() }

// Close releases the iterator and reports any error met while it moved
// (a walk that ended early because of one is not a complete walk).
func (o *OmapIter) Close() error {
	if o.it == nil {
		return o.err
	}
	o.err = o.s.indexError(o.it.Close())
	o.it = nil
	return o.err
}
