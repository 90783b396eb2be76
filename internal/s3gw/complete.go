package s3gw

import (
	"context"
	"encoding/xml"
	"errors"
	"net/http"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// completeRequest is the body of CompleteMultipartUpload.
type completeRequest struct {
	XMLName xml.Name       `xml:"CompleteMultipartUpload"`
	Parts   []completePart `xml:"Part"`
}

type completePart struct {
	PartNumber        int    `xml:"PartNumber"`
	ETag              string `xml:"ETag"`
	ChecksumCRC32     string `xml:"ChecksumCRC32"`
	ChecksumCRC32C    string `xml:"ChecksumCRC32C"`
	ChecksumCRC64NVME string `xml:"ChecksumCRC64NVME"`
	ChecksumSHA1      string `xml:"ChecksumSHA1"`
	ChecksumSHA256    string `xml:"ChecksumSHA256"`
}

func (p completePart) checksum(a checksum.Algorithm) string {
	switch a {
	case checksum.CRC32:
		return p.ChecksumCRC32
	case checksum.CRC32C:
		return p.ChecksumCRC32C
	case checksum.CRC64NVME:
		return p.ChecksumCRC64NVME
	case checksum.SHA1:
		return p.ChecksumSHA1
	case checksum.SHA256:
		return p.ChecksumSHA256
	}
	return ""
}

// parseComplete decodes a CompleteMultipartUpload body and checks its
// order (fuzzed): 1 to 10,000 parts in strictly ascending order.
func parseComplete(body []byte) (*completeRequest, error) {
	var req completeRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		return nil, ErrMalformedXML
	}
	if len(req.Parts) == 0 || len(req.Parts) > maxPartNum {
		return nil, ErrMalformedXML.with("CompleteMultipartUpload lists 1 to %d parts; this one %d.", maxPartNum, len(req.Parts))
	}
	for i, p := range req.Parts {
		if p.PartNumber < 1 || p.PartNumber > maxPartNum {
			return nil, ErrInvalidArgument.with("Part number must be an integer between 1 and %d, inclusive", maxPartNum)
		}
		if i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber {
			return nil, ErrInvalidPartOrder
		}
	}
	return &req, nil
}

type completeResult struct {
	XMLName           xml.Name `xml:"CompleteMultipartUploadResult"`
	NS                string   `xml:"xmlns,attr"`
	Location          string   `xml:"Location"`
	Bucket            string   `xml:"Bucket"`
	Key               string   `xml:"Key"`
	ETag              string   `xml:"ETag"`
	ChecksumCRC32     string   `xml:"ChecksumCRC32,omitempty"`
	ChecksumCRC32C    string   `xml:"ChecksumCRC32C,omitempty"`
	ChecksumCRC64NVME string   `xml:"ChecksumCRC64NVME,omitempty"`
	ChecksumSHA1      string   `xml:"ChecksumSHA1,omitempty"`
	ChecksumSHA256    string   `xml:"ChecksumSHA256,omitempty"`
	ChecksumType      string   `xml:"ChecksumType,omitempty"`
}

func (rq *request) completeUpload() error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	conds, err := parseConditions(rq.r.Header, "")
	if err != nil {
		return err
	}
	body, err := readAllBounded(rq.auth.Body, maxXMLBytes)
	if err != nil {
		return err
	}
	req, err := parseComplete(body)
	if err != nil {
		return err
	}
	uploadID := rq.query.Get("uploadId")
	up, err := rq.readUpload(b, uploadID)
	if errors.Is(err, ErrNoSuchUpload) {
		// Completed already? Then this is a retry and succeeds again.
		if e, rerr := rq.g.readEntry(rq.ctx, b, rq.key); rerr == nil && e.UploadID == uploadID {
			return rq.completeAnswer(b, e)
		}
	}
	if err != nil {
		return err
	}
	unseal, err := rq.sealUpload(b, up)
	if errors.Is(err, ErrNoSuchUpload) {
		return rq.completedMeanwhile(b, uploadID)
	}
	if err != nil {
		return err
	}
	e, err := rq.commitUpload(b, up, req, conds)
	var pe *PreconditionError
	if errors.As(err, &pe) && pe.Key == up.key {
		return rq.completedMeanwhile(b, uploadID)
	}
	if err != nil {
		unseal()
		// A Complete sent again may have ended the upload before this
		// one listed its parts (they are gone: InvalidPart).
		if _, rerr := rq.readUpload(b, uploadID); errors.Is(rerr, ErrNoSuchUpload) {
			return rq.completedMeanwhile(b, uploadID)
		}
		return err
	}
	return rq.completeAnswer(b, e)
}

// commitUpload lists a sealed upload's parts, assembles the object from
// those the request names, and commits it: the entry, the removal of the
// upload, its parts and its seal, and the parts left out to the collector.
func (rq *request) commitUpload(b *bucketRec, up *uploadInfo, req *completeRequest, conds conditions) (*Entry, error) {
	parts, _, err := rq.listUploadParts(b, up.id)
	if err != nil {
		return nil, err
	}
	e, leftover, err := assemble(up.rec, req, parts)
	if err != nil {
		return nil, err
	}
	e.MTime, e.UploadID = rq.g.now().UTC(), up.id
	pp := partPrefix(up.id)
	_, err = rq.g.update(rq.ctx, b, rq.key, []Cond{{Key: up.key, Value: up.raw}}, func(old *Entry) (change, error) {
		if err := conds.evalWrite(old); err != nil {
			return change{}, err
		}
		return change{entry: e, extra: func(t *Txn) {
			t.Rm = append(t.Rm, up.key) // the range holds the seal too
			t.RmFrom, t.RmTo = pp, pp+"\xff"
			if len(leftover.Parts) > 0 {
				t.Set[gcKey(rq.g.now(), newID())] = leftover.encode()
			}
		}}, nil
	})
	return e, err
}

// sealUpload stops parts from being recorded in an upload while a
// Complete or an Abort lists them and commits. Without it, a part
// uploaded again in between (a client's retry of a part whose first
// attempt is still in flight) would hand data the new object names to the
// collector, and its own data would be removed with the part keys and
// never reclaimed. The seal is a token among the upload's part keys
// (moved with them by a split), which every part's commit guards absent;
// the commit that ends the upload removes it with them. The returned unseal removes it (if it is still this
// request's) when the request fails; a gateway that dies in between
// leaves the upload sealed, and a Complete or an Abort sent again ends it.
func (rq *request) sealUpload(b *bucketRec, up *uploadInfo) (unseal func(), err error) {
	r := b.rangeOf(rq.key)
	st, shard, sk := rq.g.cfg.Store, shardObject(b.ID, r.N), sealKey(up.id)
	token := []byte(newID())
	err = st.OmapApply(rq.ctx, shard, Txn{If: []Cond{openCond(r), {Key: up.key, Value: up.raw}}, Set: map[string][]byte{sk: token}})
	var pe *PreconditionError
	switch {
	case errors.As(err, &pe) && pe.Key == keyOpen && pe.Exists:
		rq.g.buckets.drop(b.Name) // split since the upload was read
		return nil, errIndexMoved
	case errors.As(err, &pe) && pe.Key == keyOpen, errors.Is(err, ErrNotFound):
		rq.g.buckets.drop(b.Name)
		return nil, ErrNoSuchBucket
	case errors.As(err, &pe):
		return nil, ErrNoSuchUpload
	case err != nil:
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		st.OmapApply(ctx, shard, Txn{If: []Cond{{Key: sk, Value: token}}, Rm: []string{sk}})
	}, nil
}

// completedMeanwhile answers a Complete whose upload was completed or
// aborted under it: a completion that won answers as this one would have.
func (rq *request) completedMeanwhile(b *bucketRec, uploadID string) error {
	if e, err := rq.g.readEntry(rq.ctx, b, rq.key); err == nil && e.UploadID == uploadID {
		return rq.completeAnswer(b, e)
	}
	return ErrNoSuchUpload
}

// assemble builds the object's entry from the parts the client listed:
// each must exist with the ETag given, all but the last at least 5 MiB.
// Parts uploaded but not listed are returned for the collector.
func assemble(up *Entry, req *completeRequest, parts map[int]Part) (*Entry, gcRec, error) {
	e := &Entry{Headers: up.Headers, Meta: up.Meta, Stripe: stripeSize}
	alg := up.Checksum.Alg
	var md5s, sums [][]byte
	used := map[int]bool{}
	for i, cp := range req.Parts {
		p, ok := parts[cp.PartNumber]
		if !ok || strings.Trim(strings.TrimSpace(cp.ETag), `"`) != hexString(p.MD5) {
			return nil, gcRec{}, ErrInvalidPart.with("Part %d was not uploaded, or its ETag is not %s.", cp.PartNumber, cp.ETag)
		}
		if i < len(req.Parts)-1 && p.Size < minPartSize {
			return nil, gcRec{}, ErrEntityTooSmall.with("Part %d is %d bytes; every part but the last must be at least %d.", cp.PartNumber, p.Size, minPartSize)
		}
		if v := cp.checksum(alg); alg != 0 && v != "" && v != checksum.Encode(p.Checksum) {
			return nil, gcRec{}, ErrInvalidPart.with("Part %d's %s is not %s.", cp.PartNumber, alg, v)
		}
		used[cp.PartNumber] = true
		e.Parts = append(e.Parts, p)
		e.Size += p.Size
		md5s = append(md5s, p.MD5)
		sums = append(sums, p.Checksum)
	}
	e.ETag = checksum.MultipartETag(md5s)
	if alg != 0 {
		e.Checksum = fullOrComposite(alg, up.Checksum.Parts > 0, e.Parts, sums)
	}
	leftover := gcRec{Stripe: stripeSize}
	for n, p := range parts {
		if !used[n] {
			leftover.Parts = append(leftover.Parts, gcPart{p.DataID, p.Size})
		}
	}
	return e, leftover, nil
}

func fullOrComposite(alg checksum.Algorithm, composite bool, parts []Part, sums [][]byte) Checksum {
	for _, s := range sums {
		if len(s) != alg.Size() {
			return Checksum{}
		}
	}
	if composite {
		return Checksum{Alg: alg, Sum: alg.Composite(sums), Parts: len(sums)}
	}
	sum := sums[0]
	for i := 1; i < len(sums); i++ {
		sum = alg.Combine(sum, sums[i], int64(parts[i].Size))
	}
	return Checksum{Alg: alg, Sum: sum}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

func (rq *request) completeAnswer(b *bucketRec, e *Entry) error {
	res := completeResult{NS: s3NS, Location: "/" + b.Name + "/" + rq.key, Bucket: b.Name, Key: rq.key, ETag: `"` + e.ETag + `"`}
	if c := e.Checksum; c.Alg != 0 {
		v := checksum.Encode(c.Sum)
		res.ChecksumType = "FULL_OBJECT"
		if c.Parts > 0 {
			v, res.ChecksumType = checksum.FormatComposite(c.Sum, c.Parts), "COMPOSITE"
		}
		switch c.Alg {
		case checksum.CRC32:
			res.ChecksumCRC32 = v
		case checksum.CRC32C:
			res.ChecksumCRC32C = v
		case checksum.CRC64NVME:
			res.ChecksumCRC64NVME = v
		case checksum.SHA1:
			res.ChecksumSHA1 = v
		case checksum.SHA256:
			res.ChecksumSHA256 = v
		}
	}
	return rq.writeXML(http.StatusOK, res)
}
