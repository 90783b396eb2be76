package s3gw

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// MemStore is an in-memory Store: the model the gateway's tests run
// against, and the oracle of its listings. Its omap transactions are
// atomic under one mutex, exactly the contract of a cluster object's.
// Fail, if set, is called before every operation and may return an error
// to inject (a store that fails mid-request).
type MemStore struct {
	mu   sync.Mutex
	objs map[string]*memObject
	Fail func(op, name string) error
	// Resent, if set and true for a transaction, makes OmapApply behave
	// as a transaction whose answer was lost and that was sent again: it
	// applies, then its guards are checked once more against the result,
	// and a guard that fails there fails the call.
	Resent func(name string) bool
}

type memObject struct {
	data   []byte
	omap   map[string][]byte
	sorted []string // omap keys in order; nil when stale
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{objs: map[string]*memObject{}} }

var _ Store = (*MemStore)(nil)

func (m *MemStore) fail(op, name string) error {
	if m.Fail != nil {
		return m.Fail(op, name)
	}
	return nil
}

func (m *MemStore) obj(name string, create bool) *memObject {
	o := m.objs[name]
	if o == nil && create {
		o = &memObject{omap: map[string][]byte{}}
		m.objs[name] = o
	}
	return o
}

func (o *memObject) keys() []string {
	if o.sorted == nil {
		o.sorted = make([]string, 0, len(o.omap))
		for k := range o.omap {
			o.sorted = append(o.sorted, k)
		}
		slices.Sort(o.sorted)
	}
	return o.sorted
}

// Put implements Store.
func (m *MemStore) Put(ctx context.Context, name string, data []byte) error {
	if err := m.fail("put", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obj(name, true).data = bytes.Clone(data)
	return nil
}

// ReadAt implements Store.
func (m *MemStore) ReadAt(ctx context.Context, name string, off, length uint64) ([]byte, uint64, error) {
	if err := m.fail("read", name); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.obj(name, false)
	if o == nil {
		return nil, 0, fmt.Errorf("read %s: %w", name, ErrNotFound)
	}
	size := uint64(len(o.data))
	if off >= size {
		return nil, size, nil
	}
	end := min(size, off+length)
	return bytes.Clone(o.data[off:end]), size, nil
}

// ReadAtPooled implements PooledReader, in three buffers where the data
// has three bytes or more. Its release overwrites the data, so that a
// gateway using a buffer after handing it back sends garbage that the
// tests' checks of what they read catch.
func (m *MemStore) ReadAtPooled(ctx context.Context, name string, off, length uint64) ([][]byte, uint64, func(), error) {
	data, size, err := m.ReadAt(ctx, name, off, length)
	bufs := [][]byte{data}
	if n := len(data) / 3; n > 0 {
		bufs = [][]byte{data[:n], data[n : 2*n], data[2*n:]}
	}
	return bufs, size, func() {
		for i := range data {
			data[i] = 0xEE
		}
	}, err
}

// Delete implements Store.
func (m *MemStore) Delete(ctx context.Context, name string) error {
	if err := m.fail("delete", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objs[name] == nil {
		return fmt.Errorf("delete %s: %w", name, ErrNotFound)
	}
	delete(m.objs, name)
	return nil
}

// OmapGet implements Store.
func (m *MemStore) OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error) {
	if err := m.fail("omapget", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.obj(name, false)
	if o == nil {
		return nil, fmt.Errorf("omap get %s: %w", name, ErrNotFound)
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if v, ok := o.omap[k]; ok {
			out[k] = bytes.Clone(v)
		}
	}
	return out, nil
}

// OmapApply implements Store.
func (m *MemStore) OmapApply(ctx context.Context, name string, txn Txn) error {
	if err := m.fail("omapapply", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.obj(name, false)
	if o == nil && !txn.Create {
		return fmt.Errorf("omap apply %s: %w", name, ErrNotFound)
	}
	var omap map[string][]byte
	if o != nil {
		omap = o.omap
	}
	for _, c := range txn.If {
		v, ok := omap[c.Key]
		if c.Absent && ok || !c.Absent && (!ok || !bytes.Equal(v, c.Value)) {
			return &PreconditionError{Key: c.Key, Value: bytes.Clone(v), Exists: ok}
		}
	}
	o = m.obj(name, true)
	for _, k := range txn.Rm {
		delete(o.omap, k)
	}
	if txn.RmTo != "" { // as the cluster does: no end, no range
		for k := range o.omap {
			if k >= txn.RmFrom && (txn.RmTo == "" || k < txn.RmTo) {
				delete(o.omap, k)
			}
		}
	}
	for k, v := range txn.Set {
		o.omap[k] = bytes.Clone(v)
	}
	o.sorted = nil
	if m.Resent != nil && m.Resent(name) {
		for _, c := range txn.If {
			v, ok := o.omap[c.Key]
			if c.Absent && ok || !c.Absent && (!ok || !bytes.Equal(v, c.Value)) {
				return &PreconditionError{Key: c.Key, Value: bytes.Clone(v), Exists: ok}
			}
		}
	}
	return nil
}

// OmapList implements Store.
func (m *MemStore) OmapList(ctx context.Context, name, start, end string, limit int) ([]KV, bool, error) {
	if err := m.fail("omaplist", name); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.obj(name, false)
	if o == nil {
		return nil, false, fmt.Errorf("omap list %s: %w", name, ErrNotFound)
	}
	keys := o.keys()
	i, _ := slices.BinarySearch(keys, start)
	var out []KV
	for ; i < len(keys) && (end == "" || keys[i] < end); i++ {
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, KV{keys[i], bytes.Clone(o.omap[keys[i]])})
	}
	return out, false, nil
}

// OmapListDelim implements Store.
func (m *MemStore) OmapListDelim(ctx context.Context, name, prefix, delim, after string, limit int) (Listing, error) {
	if err := m.fail("omaplistdelim", name); err != nil {
		return Listing{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.obj(name, false)
	if o == nil {
		return Listing{}, fmt.Errorf("omap list %s: %w", name, ErrNotFound)
	}
	if limit == 0 {
		limit = 1000 // as the cluster's: 0 means its largest page
	}
	keys := o.keys()
	from := max(after+"\x00", prefix)
	if prefix == "" {
		from = max(from, "\x01") // bookkeeping keys are not listed
	}
	i, _ := slices.BinarySearch(keys, from)
	var l Listing
	for ; i < len(keys); i++ {
		k := keys[i]
		if k <= after {
			continue
		}
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if k != "" && k[0] == 0 && (prefix == "" || prefix[0] != 0) {
			continue
		}
		if len(l.Entries)+len(l.Prefixes) == limit {
			l.More = true
			return l, nil
		}
		if j := strings.Index(k[len(prefix):], delim); delim != "" && j >= 0 {
			cp := k[:len(prefix)+j+len(delim)]
			// Skip every key under cp; cp itself is listed only if it
			// sorts after `after` (a page that ended on it resumes past it).
			for i+1 < len(keys) && strings.HasPrefix(keys[i+1], cp) {
				i++
			}
			if cp > after {
				l.Prefixes = append(l.Prefixes, cp)
				l.Next = cp
			}
			continue
		}
		l.Entries = append(l.Entries, KV{k, bytes.Clone(o.omap[k])})
		l.Next = k
	}
	return l, nil
}

// Objects returns the names of the objects held (sorted), for tests that
// check what is left in the store.
func (m *MemStore) Objects() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.objs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
