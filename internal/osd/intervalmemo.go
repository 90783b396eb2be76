package osd

import "github.com/cairn-storage/cairn/internal/clustermap"

// intervalMemo is what a PG's primary remembers per object within one
// interval of the PG, so that a write need not ask the positions again:
// an object's snapshot state (ecsnaps.go), the version every position
// holds (ecpartialknown.go). A new interval forgets it all, since peering
// may roll shards back. Bounded: at maxMemo objects it starts over. The
// caller holds the pgState's mu.
type intervalMemo[V any] struct {
	epoch clustermap.Epoch
	m     map[string]V
}

// maxMemo bounds the objects a memo holds, whatever a PG's size and
// however many objects its writes touch.
const maxMemo = 1 << 14

// get returns what the memo holds for name in interval epoch.
func (c *intervalMemo[V]) get(epoch clustermap.Epoch, name string) (V, bool) {
	if c.epoch != epoch {
		var none V
		return none, false
	}
	v, ok := c.m[name]
	return v, ok
}

// set records v for name in interval epoch.
func (c *intervalMemo[V]) set(epoch clustermap.Epoch, name string, v V) {
	if c.m == nil || c.epoch != epoch || len(c.m) >= maxMemo {
		c.m, c.epoch = map[string]V{}, epoch
	}
	c.m[name] = v
}

// forget drops what the memo holds for name.
func (c *intervalMemo[V]) forget(name string) { delete(c.m, name) }
