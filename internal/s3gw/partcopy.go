package s3gw

import (
	"crypto/md5"
	"encoding/xml"
	"hash"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	NS           string   `xml:"xmlns,attr"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
	copyResult
}

// parseCopyRange reads x-amz-copy-source-range: "bytes=first-last" inside
// an object of size bytes (fuzzed). Unlike Range, a malformed one or one
// past the object's end is an error.
func parseCopyRange(h string, size uint64) (byteRange, error) {
	if h == "" {
		return byteRange{0, size}, nil
	}
	bad := ErrInvalidArgument.with("The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy, within the source object.")
	spec, ok := strings.CutPrefix(h, "bytes=")
	first, last, ok2 := strings.Cut(spec, "-")
	if !ok || !ok2 || len(first) > 19 || len(last) > 19 {
		return byteRange{}, bad
	}
	a, err1 := strconv.ParseUint(first, 10, 64)
	b, err2 := strconv.ParseUint(last, 10, 64)
	if err1 != nil || err2 != nil || a > b || b >= size {
		return byteRange{}, bad
	}
	return byteRange{a, b - a + 1}, nil
}

// uploadPartCopy stores a range of an existing object as a part: the
// bytes are copied into the part's own data (the collector frees data by
// the entry that names it, so no two entries may share it).
func (rq *request) uploadPartCopy() error {
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
	src, se, err := rq.copySourceEntry()
	if err != nil {
		return err
	}
	rng, err := parseCopyRange(rq.r.Header.Get("x-amz-copy-source-range"), se.Size)
	if err != nil {
		return err
	}
	if rng.Length > maxPartSize {
		return ErrEntityTooLarge
	}
	alg := up.rec.Checksum.Alg
	if alg == 0 {
		alg = checksum.CRC64NVME
	}
	md5h, algh := md5.New(), alg.New()
	s, err := rq.copyStream(src, se, rng, b, []hash.Hash{md5h, algh})
	if err != nil {
		return err
	}
	sum := algh.Sum(nil)
	part, err := rq.recordPart(b, up, n, s, md5h.Sum(nil), Checksum{Alg: alg, Sum: sum})
	if err != nil {
		return err
	}
	res := copyPartResult{NS: s3NS, ETag: `"` + part.ETag + `"`, LastModified: isoTime(part.MTime)}
	if up.rec.Checksum.Alg != 0 {
		res.setChecksum(alg, sum)
	}
	return rq.writeXML(http.StatusOK, res)
}
