package s3gw

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// parseCopySource reads x-amz-copy-source: "bucket/key" or "/bucket/key",
// URL-encoded, optionally followed by "?versionId=null" (any other
// version is NotImplemented: buckets are not versioned). Fuzzed.
func parseCopySource(v string) (bucket, key string, err error) {
	if len(v) > 3*(maxKeyBytes+64) {
		return "", "", ErrInvalidArgument.with("x-amz-copy-source is too long.")
	}
	path, query, _ := strings.Cut(v, "?")
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil || len(q) != 1 || q.Get("versionId") != "null" {
			return "", "", ErrNotImplemented.with("Copying a version of an object is not implemented.")
		}
	}
	dec, err := url.PathUnescape(path)
	if err != nil {
		return "", "", ErrInvalidArgument.with("x-amz-copy-source is not URL-encoded correctly.")
	}
	dec = strings.TrimPrefix(dec, "/")
	bucket, key, ok := strings.Cut(dec, "/")
	if !ok || bucket == "" || key == "" {
		return "", "", ErrInvalidArgument.with("x-amz-copy-source must name a bucket and a key.")
	}
	if e := keyProblem(key); e != nil {
		return "", "", e
	}
	return bucket, key, nil
}

type copyResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	NS           string   `xml:"xmlns,attr"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
	CRC32        string   `xml:"ChecksumCRC32,omitempty"`
	CRC32C       string   `xml:"ChecksumCRC32C,omitempty"`
	CRC64NVME    string   `xml:"ChecksumCRC64NVME,omitempty"`
	SHA1         string   `xml:"ChecksumSHA1,omitempty"`
	SHA256       string   `xml:"ChecksumSHA256,omitempty"`
}

func (c *copyResult) setChecksum(a checksum.Algorithm, sum []byte) {
	v := checksum.Encode(sum)
	switch a {
	case checksum.CRC32:
		c.CRC32 = v
	case checksum.CRC32C:
		c.CRC32C = v
	case checksum.CRC64NVME:
		c.CRC64NVME = v
	case checksum.SHA1:
		c.SHA1 = v
	case checksum.SHA256:
		c.SHA256 = v
	}
}

// copyObject copies an object's data into new data of the destination
// (each entry owns its data, so the collector never frees data another
// entry still names), with the source's metadata (COPY, the default) or
// the request's (REPLACE).
func (rq *request) copyObject() error {
	dst, err := rq.ownBucket()
	if err != nil {
		return err
	}
	directive := rq.r.Header.Get("x-amz-metadata-directive")
	if directive != "" && directive != "COPY" && directive != "REPLACE" {
		return ErrInvalidArgument.with("Unknown metadata directive %q.", directive)
	}
	conds, err := parseConditions(rq.r.Header, "")
	if err != nil {
		return err
	}
	srcBucket, srcKey, err := parseCopySource(rq.r.Header.Get("x-amz-copy-source"))
	if err != nil {
		return err
	}
	src, se, err := rq.copySourceEntry()
	if err != nil {
		return err
	}
	if srcBucket == rq.bucket && srcKey == rq.key && directive != "REPLACE" {
		return ErrInvalidRequest.with("This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")
	}
	std, meta := se.Headers, se.Meta
	if directive == "REPLACE" {
		if std, meta, err = objectHeaders(rq.r.Header); err != nil {
			return err
		}
	}
	alg := se.Checksum.Alg
	if v := rq.r.Header.Get("x-amz-checksum-algorithm"); v != "" {
		if alg, err = checksum.ParseAlgorithm(v); err != nil {
			return ErrInvalidRequest.with("%v", err)
		}
	}
	if alg == 0 {
		alg = checksum.CRC64NVME
	}
	return rq.copyData(src, se, dst, std, meta, alg, conds)
}

// copyData streams the source's data into new stripes of dst, hashing it,
// and commits the destination entry.
func (rq *request) copyData(src *bucketRec, se *Entry, dst *bucketRec, std StdHeaders, meta []MetaKV, alg checksum.Algorithm, conds conditions) error {
	md5h, algh := md5.New(), alg.New()
	s, err := rq.copyStream(src, se, byteRange{0, se.Size}, dst, []hash.Hash{md5h, algh})
	if err != nil {
		return err
	}
	md5sum := md5h.Sum(nil)
	e := &Entry{Size: se.Size, ETag: hex.EncodeToString(md5sum), MTime: rq.g.now().UTC(), Headers: std, Meta: meta,
		Checksum: Checksum{Alg: alg, Sum: algh.Sum(nil)}, Stripe: stripeSize, Parts: []Part{{DataID: s.dataID, Size: se.Size, MD5: md5sum}}}
	_, err = rq.g.update(rq.ctx, dst, rq.key, []Cond{s.guard}, func(old *Entry) (change, error) {
		if err := conds.evalWrite(old); err != nil {
			return change{}, err
		}
		return change{entry: e, extra: func(t *Txn) { t.Rm = append(t.Rm, s.guard.Key) }}, nil
	})
	if err != nil {
		s.cleanup()
		return commitGuardErr(err, s.guard)
	}
	res := copyResult{NS: s3NS, ETag: `"` + e.ETag + `"`, LastModified: isoTime(e.MTime)}
	res.setChecksum(alg, e.Checksum.Sum)
	return rq.writeXML(http.StatusOK, res)
}

// copyStream stores rng of a source object as new data of dst (under an
// intent, as storeBody), hashing it on the way.
func (rq *request) copyStream(src *bucketRec, se *Entry, rng byteRange, dst *bucketRec, hashes []hash.Hash) (stored, error) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(rq.ctx)
	defer cancel()
	go func() { pw.CloseWithError(rq.g.streamData(ctx, pw, src.data(), se, rng.Start, rng.Length)) }()
	s, err := rq.storeBody(dst, pr, rng.Length, hashes)
	pr.CloseWithError(io.ErrClosedPipe)
	return s, err
}

// copySourceEntry resolves x-amz-copy-source to the source bucket and
// entry the request's user may read, with its copy-source conditions
// applied.
func (rq *request) copySourceEntry() (*bucketRec, *Entry, error) {
	srcBucket, srcKey, err := parseCopySource(rq.r.Header.Get("x-amz-copy-source"))
	if err != nil {
		return nil, nil, err
	}
	srcConds, err := parseConditions(rq.r.Header, "x-amz-copy-source-")
	if err != nil {
		return nil, nil, err
	}
	src, err := rq.g.lookupBucket(rq.ctx, srcBucket)
	if err != nil {
		return nil, nil, err
	}
	if src == nil {
		return nil, nil, ErrNoSuchBucket
	}
	if src.Owner != rq.user {
		return nil, nil, ErrAccessDenied
	}
	se, err := rq.g.readEntry(rq.ctx, src, srcKey)
	if err != nil {
		return nil, nil, err
	}
	if err := srcConds.evalRead(se); err != nil {
		return nil, nil, ErrPreconditionFailed // S3 answers 412 for every failed copy-source condition
	}
	return src, se, nil
}
