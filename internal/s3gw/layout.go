package s3gw

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// The gateway's objects in its pool (ARCHITECTURE.md, "S3 gateway"):
//
//	s3.buckets              omap: bucket name → bucketRec (JSON);
//	                        0x00 "d" 0x00 <bucket id> → time: a deleted bucket to reclaim
//	s3i.<bucket id>.<n>     an index shard; omap: object key → Entry, and the
//	                        bookkeeping keys below, all starting with 0x00
//	s3d.<bucket id>.<data id>.<stripe>   4 MiB stripes of an object's or a part's data
//
// Bookkeeping keys of a shard (S3 keys never hold NUL, so none collides):
//
//	0x00 "open"                          present while the bucket lives
//	0x00 "closing"                       the token of the DeleteBucket that closed it
//	0x00 "g" 0x00 <unix ns, 20 digits> 0x00 <data id> → gcRec: data to delete after the grace
//	0x00 "p" 0x00 <data id>              → intent: a PUT or part being written (time, size)
//	0x00 "u" 0x00 <key> 0x00 <upload id> → uploadRec: a multipart upload in progress
//	0x00 "q" 0x00 <upload id> 0x00 <part, 5 digits> → partRec
//	0x00 "q" 0x00 <upload id> 0x00 "seal" → the token of a Complete or Abort in progress
//	0x00 "i" 0x00 <key>                  → <Entry.Inline id> <data>: the data of a small object
const (
	registryObject = "s3.buckets"
	keyOpen        = "\x00open"
	keyClosing     = "\x00closing" // names the DeleteBucket that closed the shard
	prefixGC       = "\x00g\x00"
	prefixPending  = "\x00p\x00"
	prefixUpload   = "\x00u\x00"
	prefixPart     = "\x00q\x00"
	prefixDead     = "\x00d\x00"
	prefixInline   = "\x00i\x00"
)

// inlineKey is where the data of key's entry lives when it is inline.
func inlineKey(key string) string { return prefixInline + key }

var openValue = []byte("1")

func shardObject(bucketID string, n int) string { return "s3i." + bucketID + "." + strconv.Itoa(n) }

func dataObject(bucketID, dataID string, stripe uint64) string {
	return "s3d." + bucketID + "." + dataID + "." + strconv.FormatUint(stripe, 10)
}

func gcKey(t time.Time, dataID string) string {
	return fmt.Sprintf("%s%020d\x00%s", prefixGC, t.UnixNano(), dataID)
}

func pendingKey(dataID string) string { return prefixPending + dataID }

func uploadKey(key, uploadID string) string { return prefixUpload + key + "\x00" + uploadID }

func partPrefix(uploadID string) string { return prefixPart + uploadID + "\x00" }

func partKey(uploadID string, n int) string { return fmt.Sprintf("%s%05d", partPrefix(uploadID), n) }

// sealKey sorts after the upload's part keys, in their range, so that a
// split moves it with them and the removal of the parts removes it;
// listings of the parts skip it.
func sealKey(uploadID string) string { return partPrefix(uploadID) + "seal" }

// newID returns a random identifier of 16 hex digits (bucket and data
// ids): unique without coordination.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newUploadID returns an upload id that sorts by creation time, as
// ListMultipartUploads orders the uploads of one key.
func newUploadID(now time.Time) string {
	return fmt.Sprintf("%016x", now.UnixNano()) + newID()
}

// gcRec lists data to delete: the parts of an object that was replaced or
// removed, or of an aborted upload.
type gcRec struct {
	Stripe uint32
	Parts  []gcPart
}

type gcPart struct {
	DataID string
	Size   uint64
}

func (r gcRec) encode() []byte {
	w := &enc{}
	w.uvarint(uint64(r.Stripe))
	w.uvarint(uint64(len(r.Parts)))
	for _, p := range r.Parts {
		w.str(p.DataID)
		w.uvarint(p.Size)
	}
	return w.b
}

func decodeGC(b []byte) (gcRec, error) {
	d := &dec{b: b}
	r := gcRec{Stripe: uint32(d.count(1 << 30))}
	n := d.count(maxParts)
	for i := 0; i < n && d.err == nil; i++ {
		r.Parts = append(r.Parts, gcPart{d.str(), d.uvarint()})
	}
	if d.err == nil && (r.Stripe == 0 || len(d.b) != 0) {
		d.err = errCorruptRecord
	}
	return r, d.err
}

func gcOf(e *Entry) gcRec {
	r := gcRec{Stripe: e.Stripe}
	if r.Stripe == 0 {
		r.Stripe = stripeSize
	}
	for _, p := range e.Parts {
		r.Parts = append(r.Parts, gcPart{p.DataID, p.Size})
	}
	return r
}

// intent is the value of a pending key: when the write began and how
// many bytes it may write (so a reclaimer knows its stripes).
type intent struct {
	Start time.Time
	Size  uint64
}

func (in intent) encode() []byte {
	w := &enc{}
	w.varint(in.Start.UnixNano())
	w.uvarint(in.Size)
	return w.b
}

func decodeIntent(b []byte) (intent, error) {
	d := &dec{b: b}
	in := intent{Start: time.Unix(0, d.varint()), Size: d.uvarint()}
	return in, d.err
}

// deadRec is the value of a deleted bucket's key in the registry: when it
// was deleted, its index shards and its data pool, all the collector needs
// to reclaim it. A shard number is never negative, so deadPoolMark after
// the shards says that the pool's name follows; a record of a bucket
// whose data is in the gateway's pool (and every record written before
// buckets had data pools) ends with the shards.
type deadRec struct {
	at     time.Time
	shards []int
	pool   string
}

const deadPoolMark = -1

// maxDeadShards bounds the shards a dead-bucket key may name.
const maxDeadShards = 1 << 20

func (r deadRec) encode() []byte {
	w := &enc{}
	w.varint(r.at.UnixNano())
	for _, n := range r.shards {
		w.varint(int64(n))
	}
	if r.pool != "" {
		w.varint(deadPoolMark)
		w.str(r.pool)
	}
	return w.b
}

// decodeDead reads a dead-bucket record; a record without shards is of a
// bucket deleted before they were listed, which had one (shard 0).
func decodeDead(b []byte) (deadRec, error) {
	d := &dec{b: b}
	r := deadRec{at: time.Unix(0, d.varint())}
	for d.err == nil && len(d.b) > 0 {
		n := d.varint()
		switch {
		case d.err != nil:
		case n == deadPoolMark:
			r.pool = d.str()
			if d.err == nil && (r.pool == "" || len(d.b) != 0) {
				d.err = errCorruptRecord
			}
		case n < 0 || len(r.shards) == maxDeadShards: // more shards than any bucket has
			d.err = errCorruptRecord
		default:
			r.shards = append(r.shards, int(n))
		}
	}
	if len(r.shards) == 0 {
		r.shards = []int{0}
	}
	return r, d.err
}
