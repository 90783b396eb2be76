package client

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/snapset"
)

// Snapshots are copy-on-write at object granularity and belong to a set of
// objects (a volume): the set's snapshots are numbered from a sequence
// kept in etcd (a snapshot group), every writer of the set sends the newest
// number with its writes (WithSnapSeq), and the OSDs keep an object's old
// content, as a clone, before the first write after a snapshot.

// SnapSet is an object's snapshot history: which clone, if any, holds it as
// it was at each snapshot (Resolve).
type SnapSet = snapset.Set

// WithSnapSeq returns a handle on the same pool whose writes carry the
// snapshot number seq: 0 means the objects have no snapshots.
func (p *Pool) WithSnapSeq(seq uint64) *Pool {
	q := *p
	q.snapSeq = seq
	return &q
}

// AtSnap returns a read-only handle whose reads and stats see objects as
// they were at snapshot snap (0: as they are now).
func (p *Pool) AtSnap(snap uint64) *Pool {
	q := *p
	q.snap = snap
	return &q
}

// Snaps returns an object's snapshot history and its current size;
// ErrNotFound if it does not exist now (then it has no clones either).
func (p *Pool) Snaps(ctx context.Context, name string) (SnapSet, uint64, error) {
	resp, err := p.AtSnap(0).do(ctx, &proto.Request{Op: proto.OpSnaps, Object: name})
	if err != nil {
		return SnapSet{}, 0, err
	}
	set, err := snapset.Decode(resp.Data)
	if err != nil {
		return SnapSet{}, 0, fmt.Errorf("snaps %s/%s: %w", p.name, name, err)
	}
	return set, resp.Size, nil
}

// TrimSnaps deletes the clones of an object that no snapshot in keep needs.
func (p *Pool) TrimSnaps(ctx context.Context, name string, keep []uint64) error {
	_, err := p.AtSnap(0).do(ctx, &proto.Request{Op: proto.OpSnapTrim, Object: name, Data: snapset.EncodeSnaps(keep)})
	return err
}

// SnapWriter is a writer's membership of a snapshot group.
type SnapWriter = meta.SnapWriter

// JoinSnapGroup registers a writer of the objects of group: apply(seq, true)
// gives the snapshot number to send from now on, and is called again (and
// must wait for writes in flight under the old number) before a new
// snapshot counts; apply(0, false) means writes must pause until the
// registration is back. Leave the group when done writing.
func (c *Client) JoinSnapGroup(ctx context.Context, group string, apply func(seq uint64, ok bool)) (*SnapWriter, error) {
	return c.meta.JoinSnapGroup(ctx, group, apply)
}

// NextSnap allocates the next snapshot number of group and returns it
// once every registered writer sends it, or an error after wait.
func (c *Client) NextSnap(ctx context.Context, group string, wait time.Duration) (uint64, error) {
	return c.meta.NextSnap(ctx, group, wait)
}

// SnapSeq returns the newest snapshot number of group (0: none).
func (c *Client) SnapSeq(ctx context.Context, group string) (uint64, error) {
	return c.meta.SnapSeq(ctx, group)
}

// SnapWriters returns how many writers are registered in group now: a
// volume's open writers, which a shrink or removal refuses to cut off.
// It counts the keys JoinSnapGroup keeps under each writer's lease
// (/cairn/snapwriter/<group>/<lease>); a writer that vanished without
// leaving counts until its lease runs out (10 s).
func (c *Client) SnapWriters(ctx context.Context, group string) (int, error) {
	return c.meta.SnapWriters(ctx, group)
}

// DeleteSnapGroup forgets a group whose objects are gone.
func (c *Client) DeleteSnapGroup(ctx context.Context, group string) error {
	return c.meta.DeleteSnapGroup(ctx, group)
}
