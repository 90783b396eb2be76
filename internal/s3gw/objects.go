package s3gw

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"time"
)

// bodyLength is the size of the object data a request carries: the
// decoded length of an aws-chunked body, else Content-Length. S3 requires
// one (MissingContentLength).
func (rq *request) bodyLength() (uint64, error) {
	n := rq.r.ContentLength
	if rq.auth.Chunked {
		n = rq.auth.DecodedLength
	}
	if n < 0 {
		return 0, ErrMissingContentLength
	}
	return uint64(n), nil
}

// cleanupTimeout bounds the removal of a failed write's data, which runs
// after the client may have gone.
const cleanupTimeout = 30 * time.Second

// stored is data written under an intent that no entry names yet: its id
// and size, the intent's guard for the commit that will name it, and the
// cleanup that removes the data and the intent if that commit does not
// happen.
type stored struct {
	dataID  string
	size    uint64
	guard   Cond
	cleanup func()
}

// storeBody writes a request body as new data of the bucket under an
// intent: the intent (0x00 p <data id>) commits first, so that if this
// gateway dies while writing, the collector finds and removes the data.
func (rq *request) storeBody(b *bucketRec, body io.Reader, size uint64, hashes []hash.Hash) (stored, error) {
	g := rq.g
	dataID := newID()
	pk := pendingKey(dataID)
	iv := intent{Start: g.now(), Size: size}.encode()
	b, err := g.applyToKey(rq.ctx, b, rq.key, func(shardRange) Txn { return Txn{Set: map[string][]byte{pk: iv}} })
	if err != nil {
		return stored{}, err
	}
	shard := b.shard(rq.key)
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := g.removeData(ctx, b.data(), dataID, size, stripeSize); err != nil {
			g.cfg.Logf("s3: removing the data of a failed write in bucket %s: %v (the collector will)", b.Name, err)
			return
		}
		g.cfg.Store.OmapApply(ctx, shard, Txn{If: []Cond{{Key: pk, Value: iv}}, Rm: []string{pk}})
	}
	if err = g.writeData(rq.ctx, b.data(), dataID, body, size, hashes); err != nil {
		cleanup()
		return stored{}, err
	}
	return stored{dataID: dataID, size: size, guard: Cond{Key: pk, Value: iv}, cleanup: cleanup}, nil
}

// commitGuardErr turns a failed intent guard into what the client sees:
// the collector took this write for dead.
func commitGuardErr(err error, guard Cond) error {
	var pe *PreconditionError
	if errors.As(err, &pe) && pe.Key == guard.Key {
		return ErrInternal.with("The upload took longer than the gateway's intent timeout; retry it.")
	}
	return err
}

func (rq *request) putObject() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	size, err := rq.bodyLength()
	if err != nil {
		return err
	}
	if size > maxPutSize {
		return ErrEntityTooLarge
	}
	std, meta, err := objectHeaders(rq.r.Header)
	if err != nil {
		return err
	}
	conds, err := parseConditions(rq.r.Header, "")
	if err != nil {
		return err
	}
	in, err := rq.integrity(size)
	if err != nil {
		return err
	}
	defer in.close()
	if conds.any() { // fail early, before the body is stored
		if err := rq.checkWrite(b, conds); err != nil {
			return err
		}
	}
	ahead := rq.g.readAhead(rq.ctx, b, rq.key)
	e := &Entry{Size: size, Headers: std, Meta: meta}
	if size <= inlineMax {
		err = rq.putInline(b, e, ahead, in, conds)
	} else {
		err = rq.putStriped(b, e, ahead, in, conds)
	}
	if err != nil {
		return err
	}
	h := rq.w.Header()
	h.Set("ETag", `"`+e.ETag+`"`)
	if in.given {
		checksumHeaders(h, e.Checksum)
	}
	rq.w.WriteHeader(http.StatusOK)
	return nil
}

// putStriped stores a PUT's body as new data objects under an intent and
// then commits e, which names them.
func (rq *request) putStriped(b *bucketRec, e *Entry, ahead *entryRead, in *integrity, conds conditions) error {
	s, err := rq.storeBody(b, rq.auth.Body, e.Size, in.hashes())
	if err != nil {
		return err
	}
	md5sum, sum, err := in.verify(rq)
	if err != nil {
		s.cleanup()
		return err
	}
	e.ETag, e.Checksum, e.MTime = hex.EncodeToString(md5sum), Checksum{Alg: in.alg, Sum: sum}, rq.g.now().UTC()
	e.Stripe, e.Parts = stripeSize, []Part{{DataID: s.dataID, Size: e.Size, MD5: md5sum}}
	_, err = rq.g.updateAhead(rq.ctx, b, rq.key, ahead, []Cond{s.guard}, func(old *Entry) (change, error) {
		if err := conds.evalWrite(old); err != nil {
			return change{}, err
		}
		return change{entry: e, extra: func(t *Txn) { t.Rm = append(t.Rm, s.guard.Key) }}, nil
	})
	if err != nil {
		s.cleanup()
		return commitGuardErr(err, s.guard)
	}
	return nil
}

// putInline commits a small PUT's body with its entry, in its index
// shard: nothing is written before the commit, so nothing needs an intent.
func (rq *request) putInline(b *bucketRec, e *Entry, ahead *entryRead, in *integrity, conds conditions) error {
	data, err := readSmall(rq.auth.Body, e.Size, in.hashes())
	if err != nil {
		return err
	}
	md5sum, sum, err := in.verify(rq)
	if err != nil {
		return err
	}
	e.ETag, e.Checksum, e.MTime = hex.EncodeToString(md5sum), Checksum{Alg: in.alg, Sum: sum}, rq.g.now().UTC()
	e.Inline = newID()
	_, err = rq.g.updateAhead(rq.ctx, b, rq.key, ahead, nil, func(old *Entry) (change, error) {
		if err := conds.evalWrite(old); err != nil {
			return change{}, err
		}
		return change{entry: e, inline: data}, nil
	})
	return err
}

// checkWrite evaluates a write's conditions on the key's entry now.
func (rq *request) checkWrite(b *bucketRec, conds conditions) error {
	e, err := rq.g.readEntry(rq.ctx, b, rq.key)
	if err != nil && !errors.Is(err, ErrNoSuchKey) {
		return err
	}
	return conds.evalWrite(e)
}

// readEntry returns key's entry, with its data if that is inline (read
// in the same round trip): ErrNoSuchKey if there is none.
func (g *Gateway) readEntry(ctx context.Context, b *bucketRec, key string) (*Entry, error) {
	for try := 0; ; try++ {
		vals, _, err := g.readIndex(ctx, b, key, key, inlineKey(key))
		if err != nil {
			return nil, err
		}
		raw, ok := vals[key]
		if !ok {
			return nil, ErrNoSuchKey
		}
		e, err := decodeEntry(raw)
		if err != nil || e.Inline == "" {
			return e, err
		}
		// The two keys change in one transaction, but a read may fall
		// between them: the id says whether the data is this entry's.
		data, ok := bytes.CutPrefix(vals[inlineKey(key)], []byte(e.Inline))
		if ok && uint64(len(data)) == e.Size {
			e.inline = data
			return e, nil
		}
		if try == maxCommitTries {
			return nil, fmt.Errorf("%w: the inline data of %q is not its entry's", errCorruptRecord, key)
		}
	}
}

// responseOverrides are the query parameters of a GET that set headers
// of the answer (presigned downloads use them).
var responseOverrides = map[string]string{
	"response-content-type": "Content-Type", "response-content-language": "Content-Language",
	"response-expires": "Expires", "response-cache-control": "Cache-Control",
	"response-content-disposition": "Content-Disposition", "response-content-encoding": "Content-Encoding",
}

// objectRange is the part of e a GET or HEAD asks for: the Range header's,
// one part's (partNumber: S3's ranged GET of a part of a multipart upload,
// answered 206 with the part count; part 1 of any other object is all of
// it), or all of e (partial false).
func (rq *request) objectRange(e *Entry) (byteRange, bool, error) {
	if !rq.query.Has("partNumber") {
		rng, partial, err := parseRange(rq.r.Header.Get("Range"), e.Size)
		if err != nil {
			rq.w.Header().Set("Content-Range", "bytes */"+strconv.FormatUint(e.Size, 10))
			return byteRange{}, false, err
		}
		if !partial {
			rng = byteRange{0, e.Size}
		}
		return rng, partial, nil
	}
	n, err := partNumber(rq.query.Get("partNumber"))
	if err != nil {
		return byteRange{}, false, err
	}
	if rq.r.Header.Get("Range") != "" {
		return byteRange{}, false, ErrInvalidRequest.with("Cannot specify both Range header and partNumber query parameter.")
	}
	count := max(len(e.Parts), 1)
	if n > count {
		return byteRange{}, false, ErrInvalidPartNumber
	}
	rq.w.Header().Set("x-amz-mp-parts-count", strconv.Itoa(count))
	rng := byteRange{0, e.Size}
	if len(e.Parts) > 1 {
		for _, p := range e.Parts[:n-1] {
			rng.Start += p.Size
		}
		rng.Length = e.Parts[n-1].Size
	}
	return rng, rng.Length > 0, nil
}

func (rq *request) getObject(head bool) error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	conds, err := parseConditions(rq.r.Header, "")
	if err != nil {
		return err
	}
	e, err := rq.g.readEntry(rq.ctx, b, rq.key)
	if err != nil {
		return err
	}
	if err := conds.evalRead(e); err != nil {
		if err == errNotModified {
			h := rq.w.Header()
			h.Set("ETag", `"`+e.ETag+`"`)
			h.Set("Last-Modified", e.MTime.UTC().Format(http.TimeFormat))
		}
		return err
	}
	rng, partial, err := rq.objectRange(e)
	if err != nil {
		return err
	}
	h := rq.w.Header()
	setObjectHeaders(h, e)
	for q, name := range responseOverrides {
		if v := rq.query.Get(q); v != "" {
			h.Set(name, v)
		}
	}
	if checksumMode(rq.r.Header) && !partial {
		checksumHeaders(h, e.Checksum)
	}
	if e.Parts != nil && len(e.Parts) > 1 {
		h.Set("x-amz-mp-parts-count", strconv.Itoa(len(e.Parts)))
	}
	h.Set("Content-Length", strconv.FormatUint(rng.Length, 10))
	status := http.StatusOK
	if partial {
		status = http.StatusPartialContent
		h.Set("Content-Range", "bytes "+strconv.FormatUint(rng.Start, 10)+"-"+strconv.FormatUint(rng.Start+rng.Length-1, 10)+"/"+strconv.FormatUint(e.Size, 10))
	}
	if head || rng.Length == 0 {
		rq.w.WriteHeader(status)
		return nil
	}
	sw := &statusOnWrite{w: rq.w, status: status}
	if err := rq.g.streamData(rq.ctx, sw, b.data(), e, rng.Start, rng.Length); err != nil {
		if !sw.sent {
			clearObjectHeaders(h)
			return err
		}
		// The status is sent: all that is left is to cut the body short,
		// which the client sees as a length mismatch.
		rq.g.cfg.Logf("s3: GET %s/%s: %v", b.Name, rq.key, err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// statusOnWrite sends a GET's status just before the first byte of its
// body, so that a GET whose first stripe cannot be read (its data pool
// removed, say) answers with an S3 error instead of a body cut short.
type statusOnWrite struct {
	w      http.ResponseWriter
	status int
	sent   bool
}

func (s *statusOnWrite) Write(p []byte) (int, error) {
	if !s.sent {
		s.sent = true
		s.w.WriteHeader(s.status)
	}
	return s.w.Write(p)
}

// clearObjectHeaders drops what a GET set about the object before it
// failed, keeping the request's ids.
func clearObjectHeaders(h http.Header) {
	for k := range h {
		if k != "X-Amz-Request-Id" && k != "X-Amz-Id-2" && k != "Server" {
			delete(h, k)
		}
	}
}

func (rq *request) deleteObject() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	conds, err := parseConditions(rq.r.Header, "")
	if err != nil {
		return err
	}
	if err := rq.g.deleteKey(rq.ctx, b, rq.key, conds); err != nil {
		return err
	}
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteKey removes key (nothing to do if absent); its data goes to the
// collector in the same transaction.
func (g *Gateway) deleteKey(ctx context.Context, b *bucketRec, key string, conds conditions) error {
	_, err := g.update(ctx, b, key, nil, func(old *Entry) (change, error) {
		if conds.any() {
			if err := conds.evalWrite(old); err != nil {
				return change{}, err
			}
		}
		return change{}, nil
	})
	return err
}
