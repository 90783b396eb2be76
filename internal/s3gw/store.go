package s3gw

import (
	"context"
	"errors"
	"fmt"
)

// Store is what the gateway needs of a cairn pool: whole-object puts and
// ranged reads for data stripes, and guarded omap transactions and
// listings for the bucket registry and indexes. cairn's client.Pool
// provides it (through a thin adapter in cli); MemStore is an in-memory
// model of the same contract for tests.
//
// Errors: a missing object is ErrNotFound; a failed guard of OmapApply is
// ErrPrecondition (a *PreconditionError says which key); any operation on
// a pool that no longer exists is ErrNoPool; a write refused for want of
// space is ErrNoSpace, an operation the cluster cannot serve now (too few
// copies up) ErrUnavailable, each followed by ": " and the cluster's reason.
//
// A bucket's data may live in a Store of its own (Config.DataStore, by
// pool name): the gateway asks that one only for Put, ReadAt (and
// ReadAtPooled) and Delete, which an erasure-coded pool serves.
type Store interface {
	// Put stores data as the whole content of the object.
	Put(ctx context.Context, name string, data []byte) error
	// ReadAt reads up to length bytes at off (fewer at the end) and
	// returns them with the object's size.
	ReadAt(ctx context.Context, name string, off, length uint64) ([]byte, uint64, error)
	// Delete removes the object; ErrNotFound if absent.
	Delete(ctx context.Context, name string) error
	// OmapGet returns the values of those keys that exist.
	OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error)
	// OmapApply checks every condition of txn and, only if all hold,
	// applies its removals and then its sets as one atomic step.
	OmapApply(ctx context.Context, name string, txn Txn) error
	// OmapList returns up to limit entries with start <= key < end ("":
	// no end) in key order, and whether more follow.
	OmapList(ctx context.Context, name, start, end string, limit int) ([]KV, bool, error)
	// OmapListDelim lists the keys after `after` that start with prefix,
	// rolling keys that contain delim past the prefix into one common
	// prefix each (skipped whole); entries and prefixes together are at
	// most limit. Keys starting with 0x00 are listed only when prefix
	// starts with 0x00.
	OmapListDelim(ctx context.Context, name, prefix, delim, after string, limit int) (Listing, error)
}

// PooledReader is what a Store may offer besides: ReadAt into buffers
// the caller hands back (release, never nil) once it has sent the data,
// so that a GET streaming gigabytes reuses a few buffers instead of
// allocating one per stripe for the garbage collector. The range comes as
// one or more buffers in order (an erasure-coded pool's chunks as its
// positions sent them), which the caller writes out one after another.
type PooledReader interface {
	ReadAtPooled(ctx context.Context, name string, off, length uint64) (bufs [][]byte, size uint64, release func(), err error)
}

// KV is one omap entry.
type KV struct {
	Key   string
	Value []byte
}

// Cond is a guard of a Txn: the key is absent (Absent), or holds exactly
// Value.
type Cond struct {
	Key    string
	Value  []byte
	Absent bool
}

// Txn is an atomic, guarded omap transaction on one object. Rm and the
// range [RmFrom, RmTo) (none when RmTo is "") are removed before Set is
// applied. Create makes
// the object if it does not exist (else the transaction on a missing
// object is ErrNotFound).
type Txn struct {
	If     []Cond
	Set    map[string][]byte
	Rm     []string
	RmFrom string
	RmTo   string
	Create bool
}

// Listing is one page of OmapListDelim: entries and common prefixes in
// key order; More says a next page exists, which starts after Next.
type Listing struct {
	Entries  []KV
	Prefixes []string
	More     bool
	Next     string
}

// The Store's errors; test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrPrecondition = errors.New("precondition failed")
	ErrNoPool       = errors.New("pool does not exist")
	ErrNoSpace      = errors.New("no space left")
	ErrUnavailable  = errors.New("unavailable")
)

// PreconditionError says which guard of a Txn failed and what the key
// held (Exists false: absent).
type PreconditionError struct {
	Key    string
	Value  []byte
	Exists bool
}

func (e *PreconditionError) Error() string {
	if !e.Exists {
		return fmt.Sprintf("precondition failed: omap key %q is absent", e.Key)
	}
	return fmt.Sprintf("precondition failed: omap key %q holds another value", e.Key)
}

// Is makes errors.Is(err, ErrPrecondition) hold.
func (e *PreconditionError) Is(target error) bool { return target == ErrPrecondition }
