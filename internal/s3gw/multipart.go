package s3gw

import (
	"encoding/hex"
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// Multipart uploads. An upload is a key 0x00 u 0x00 <key> 0x00 <upload id>
// in the shard that holds <key>, whose value is an Entry holding what the
// object will carry (headers, metadata, checksum algorithm; Checksum.Parts
// 1 for COMPOSITE, 0 for FULL_OBJECT). Each part is a key 0x00 q 0x00
// <upload id> 0x00 <part number> in the same shard, whose value is an
// Entry with one Part: its data id, size, MD5 and checksum. Completing
// the upload seals it (sealUpload: no part is recorded from then on), then
// is one transaction in that shard: the object's entry names
// the parts' data as its own (no byte is copied), and the upload and part
// keys go, parts left out of the list to the collector.

// S3's part rules.
const (
	minPartSize = 5 << 20
	maxPartSize = 5 << 30
	maxPartNum  = checksum.MaxParts
)

// uploadInfo is a multipart upload read from its shard.
type uploadInfo struct {
	key, id string
	raw     []byte
	rec     *Entry
}

func (rq *request) readUpload(b *bucketRec, uploadID string) (*uploadInfo, error) {
	if uploadID == "" || len(uploadID) > 64 {
		return nil, ErrNoSuchUpload
	}
	k := uploadKey(rq.key, uploadID)
	vals, _, err := rq.g.readIndex(rq.ctx, b, rq.key, k)
	if err != nil {
		return nil, err
	}
	raw, ok := vals[k]
	if !ok {
		return nil, ErrNoSuchUpload
	}
	rec, err := decodeEntry(raw)
	if err != nil {
		return nil, err
	}
	return &uploadInfo{key: k, id: uploadID, raw: raw, rec: rec}, nil
}

type initiateResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	NS       string   `xml:"xmlns,attr"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

func (rq *request) createUpload() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	std, meta, err := objectHeaders(rq.r.Header)
	if err != nil {
		return err
	}
	rec := &Entry{MTime: rq.g.now().UTC(), Headers: std, Meta: meta, Stripe: stripeSize}
	if v := rq.r.Header.Get("x-amz-checksum-algorithm"); v != "" {
		if rec.Checksum.Alg, err = checksum.ParseAlgorithm(v); err != nil {
			return ErrInvalidRequest.with("%v", err)
		}
		rec.Checksum.Parts = 1
		switch t := rq.r.Header.Get("x-amz-checksum-type"); t {
		case "", "COMPOSITE":
		case "FULL_OBJECT":
			if !rec.Checksum.Alg.IsCRC() {
				return ErrInvalidRequest.with("The FULL_OBJECT checksum type needs a CRC algorithm.")
			}
			rec.Checksum.Parts = 0
		default:
			return ErrInvalidRequest.with("Unknown x-amz-checksum-type %q.", t)
		}
	}
	id := newUploadID(rq.g.now())
	_, err = rq.g.applyToKey(rq.ctx, b, rq.key, func(shardRange) Txn {
		return Txn{Set: map[string][]byte{uploadKey(rq.key, id): rec.encode()}}
	})
	if err != nil {
		return err
	}
	if rec.Checksum.Alg != 0 {
		rq.w.Header().Set("x-amz-checksum-algorithm", rec.Checksum.Alg.String())
	}
	return rq.writeXML(http.StatusOK, initiateResult{NS: s3NS, Bucket: b.Name, Key: rq.key, UploadID: id})
}

func partNumber(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPartNum {
		return 0, ErrInvalidArgument.with("Part number must be an integer between 1 and %d, inclusive", maxPartNum)
	}
	return n, nil
}

func decodePart(raw []byte) (Part, error) {
	e, err := decodeEntry(raw)
	if err != nil {
		return Part{}, err
	}
	if len(e.Parts) != 1 {
		return Part{}, errCorruptRecord
	}
	return e.Parts[0], nil
}

// uploadPart stores a part's data under an intent and records it in one
// transaction guarded on the upload (an abort or complete in between
// makes it fail) and on the part's previous record (whose data, if any,
// goes to the collector).
func (rq *request) uploadPart() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	n, err := partNumber(rq.query.Get("partNumber"))
	if err != nil {
		return err
	}
	up, err := rq.readUpload(b, rq.query.Get("uploadId"))
	if err != nil {
		return err
	}
	size, err := rq.bodyLength()
	if err != nil {
		return err
	}
	if size > maxPartSize {
		return ErrEntityTooLarge
	}
	in, err := rq.integrity(size)
	if err != nil {
		return err
	}
	defer in.close()
	if a := up.rec.Checksum.Alg; a != 0 && !in.given {
		in.alg, in.algHash = a, a.New()
	} else if a != 0 && in.alg != a {
		return ErrInvalidRequest.with("The upload was created with %s; this part carries %s.", a, in.alg)
	}
	s, err := rq.storeBody(b, rq.auth.Body, size, in.hashes())
	if err != nil {
		return err
	}
	md5sum, sum, err := in.verify(rq)
	if err != nil {
		s.cleanup()
		return err
	}
	part, err := rq.recordPart(b, up, n, s, md5sum, Checksum{Alg: in.alg, Sum: sum})
	if err != nil {
		return err
	}
	h := rq.w.Header()
	h.Set("ETag", `"`+part.ETag+`"`)
	if in.given {
		h.Set(in.alg.Header(), checksum.Encode(sum))
	}
	rq.w.WriteHeader(http.StatusOK)
	return nil
}

// recordPart makes stored data part n of an upload, for UploadPart and
// UploadPartCopy alike: the part's record (its size, the ETag of md5sum,
// its checksum, the data) commits under the upload (commitPart), and if
// it does not, the data and its intent go.
func (rq *request) recordPart(b *bucketRec, up *uploadInfo, n int, s stored, md5sum []byte, ck Checksum) (*Entry, error) {
	part := &Entry{Size: s.size, ETag: hex.EncodeToString(md5sum), MTime: rq.g.now().UTC(), Stripe: stripeSize,
		Checksum: ck, Parts: []Part{{DataID: s.dataID, Size: s.size, MD5: md5sum, Checksum: ck.Sum}}}
	if err := rq.commitPart(b, up, n, part, s.guard); err != nil {
		s.cleanup()
		return nil, commitGuardErr(err, s.guard)
	}
	return part, nil
}

// commitPart records part n of an upload, guarded on the upload, the
// bucket being open, the part's intent and the upload not being sealed by
// a Complete or an Abort (sealUpload); a part uploaded again replaces the
// record, its old data going to the collector.
func (rq *request) commitPart(b *bucketRec, up *uploadInfo, n int, part *Entry, guard Cond) error {
	r := b.rangeOf(rq.key)
	shard := shardObject(b.ID, r.N)
	pk := partKey(up.id, n)
	for try := 0; try < maxCommitTries; try++ {
		vals, err := rq.g.cfg.Store.OmapGet(rq.ctx, shard, pk)
		if err != nil {
			return err
		}
		txn := Txn{If: []Cond{openCond(r), {Key: up.key, Value: up.raw}, {Key: sealKey(up.id), Absent: true}, guard},
			Set: map[string][]byte{pk: part.encode()}, Rm: []string{guard.Key}}
		if old, ok := vals[pk]; ok {
			txn.If = append(txn.If, Cond{Key: pk, Value: old})
			if p, err := decodePart(old); err == nil {
				txn.Set[gcKey(rq.g.now(), newID())] = gcRec{Stripe: stripeSize, Parts: []gcPart{{p.DataID, p.Size}}}.encode()
			}
		} else {
			txn.If = append(txn.If, Cond{Key: pk, Absent: true})
		}
		err = rq.g.cfg.Store.OmapApply(rq.ctx, shard, txn)
		var pe *PreconditionError
		if errors.As(err, &pe) && rq.g.landed(rq.ctx, shard, pk, false, txn.Set[pk]) {
			return nil // applied; its resend failed on its own change
		}
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pe) && pe.Key == pk:
			continue // the same part uploaded twice at once: the later wins
		case errors.As(err, &pe) && pe.Key == up.key:
			return ErrNoSuchUpload
		case errors.As(err, &pe) && pe.Key == sealKey(up.id):
			return ErrNoSuchUpload.with("The upload is being completed or aborted.")
		case errors.As(err, &pe) && pe.Key == keyOpen && pe.Exists:
			// Split since the upload was read: the part's intent stays
			// in this shard, its upload may not.
			rq.g.buckets.drop(b.Name)
			return errIndexMoved
		case errors.As(err, &pe) && pe.Key == keyOpen:
			return ErrNoSuchBucket
		default:
			return err
		}
	}
	return ErrSlowDown
}

// listUploadParts returns every part record of an upload, in order.
func (rq *request) listUploadParts(b *bucketRec, uploadID string) (map[int]Part, []KV, error) {
	pp := partPrefix(uploadID)
	parts := map[int]Part{}
	var kvs []KV
	start := pp
	for len(kvs) <= maxPartNum {
		page, more, err := rq.g.cfg.Store.OmapList(rq.ctx, b.shard(rq.key), start, pp+"\xff", 1000)
		if err != nil {
			return nil, nil, err
		}
		for _, kv := range page {
			if kv.Key == sealKey(uploadID) {
				continue
			}
			n, err := strconv.Atoi(strings.TrimPrefix(kv.Key, pp))
			p, perr := decodePart(kv.Value)
			if err != nil || perr != nil {
				return nil, nil, errCorruptRecord
			}
			parts[n] = p
		}
		kvs = append(kvs, page...)
		if !more || len(page) == 0 {
			break
		}
		start = page[len(page)-1].Key + "\x00"
	}
	if err := rq.g.checkHolds(rq.ctx, b, rq.key); err != nil {
		return nil, nil, err
	}
	return parts, kvs, nil
}

func (rq *request) abortUpload() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	up, err := rq.readUpload(b, rq.query.Get("uploadId"))
	if err != nil {
		return err
	}
	// Sealed, so that no part lands between the listing and the commit,
	// which removes every part key.
	unseal, err := rq.sealUpload(b, up)
	if err != nil {
		return err
	}
	parts, _, err := rq.listUploadParts(b, up.id)
	if err != nil {
		unseal()
		return err
	}
	gc := gcRec{Stripe: stripeSize}
	for _, p := range parts {
		gc.Parts = append(gc.Parts, gcPart{p.DataID, p.Size})
	}
	pp := partPrefix(up.id)
	r := b.rangeOf(rq.key)
	txn := Txn{If: []Cond{openCond(r), {Key: up.key, Value: up.raw}}, Rm: []string{up.key}, RmFrom: pp, RmTo: pp + "\xff",
		Set: map[string][]byte{gcKey(rq.g.now(), newID()): gc.encode()}}
	var pe *PreconditionError
	if err := rq.g.cfg.Store.OmapApply(rq.ctx, shardObject(b.ID, r.N), txn); err != nil {
		switch {
		case errors.As(err, &pe) && pe.Key == keyOpen:
			rq.g.buckets.drop(b.Name)
			return errIndexMoved
		case errors.Is(err, ErrPrecondition):
			return ErrNoSuchUpload
		}
		unseal()
		return err
	}
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}
