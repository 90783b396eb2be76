package s3gw

import (
	"errors"
	"hash"
	"net/http"
	"strings"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// integrity is what a request body must hash to: its Content-MD5 and its
// S3 checksum, given in a header or promised as an aws-chunked trailer.
// Without a checksum from the client the gateway computes CRC64NVME, as
// S3 does for every new object.
type integrity struct {
	md5     []byte // nil: no Content-MD5
	alg     checksum.Algorithm
	want    []byte // nil: from the trailer, or computed (given false)
	trailer string // header name of the trailer that carries want
	given   bool   // the client sent or promised a checksum
	md5Hash hash.Hash
	algHash hash.Hash
	done    func() // md5Hash is summed (md5Lanes)
}

// integrity reads what a body of size bytes must hash to from the
// request's headers; the caller calls close once the body is hashed.
func (rq *request) integrity(size uint64) (*integrity, error) {
	in := &integrity{}
	if v := rq.r.Header.Values("Content-MD5"); len(v) > 0 {
		sum, err := checksum.DecodeContentMD5(v[0])
		if err != nil || len(v) > 1 {
			return nil, ErrInvalidDigest
		}
		in.md5 = sum
	}
	alg, sum, err := checksum.FromHeaders(rq.r.Header)
	if err != nil {
		return nil, ErrInvalidRequest.with("%v", err)
	}
	in.alg, in.want, in.given = alg, sum, alg != 0
	for _, t := range rq.auth.DeclaredTrailers {
		a, ok := checksum.FromHeader(t)
		if !ok {
			continue
		}
		if in.given && a != in.alg || in.want != nil {
			return nil, ErrInvalidRequest.with("The request names more than one checksum.")
		}
		in.alg, in.trailer, in.given = a, t, true
	}
	if in.alg == 0 {
		if v := rq.r.Header.Get("x-amz-sdk-checksum-algorithm"); v != "" && in.trailer == "" {
			// Named but neither sent nor promised: compute it.
			if a, err := checksum.ParseAlgorithm(v); err == nil {
				in.alg = a
			}
		}
	}
	if in.alg == 0 {
		in.alg = checksum.CRC64NVME
	}
	in.md5Hash, in.done = rq.g.md5.hash(size)
	in.algHash = in.alg.New()
	return in, nil
}

// close gives back what hashing the body held.
func (in *integrity) close() { in.done() }

func (in *integrity) hashes() []hash.Hash { return []hash.Hash{in.md5Hash, in.algHash} }

// verify compares what was hashed with what the client sent, once the body
// has been read to its end (so trailers are in).
func (in *integrity) verify(rq *request) (md5sum, sum []byte, err error) {
	md5sum = in.md5Hash.Sum(nil)
	if in.md5 != nil && string(in.md5) != string(md5sum) {
		return nil, nil, ErrBadDigest
	}
	sum = in.algHash.Sum(nil)
	want := in.want
	if in.trailer != "" {
		tr := rq.auth.Trailer()
		v := tr.Get(in.trailer)
		if v == "" {
			return nil, nil, ErrInvalidRequest.with("The body did not end with the %s trailer it declared.", in.trailer)
		}
		if want, err = in.alg.Decode(v); err != nil {
			return nil, nil, ErrInvalidRequest.with("%v", err)
		}
	}
	if want != nil && string(want) != string(sum) {
		return nil, nil, ErrBadDigest.with("The %s you specified did not match the calculated checksum.", in.alg)
	}
	return md5sum, sum, nil
}

// checksumHeaders writes an entry's checksum into an answer: the value,
// and whether it is the whole object's or composite of parts.
func checksumHeaders(h http.Header, c Checksum) {
	if c.Alg == 0 {
		return
	}
	name := c.Alg.Header()
	if c.Parts > 0 {
		h.Set(name, checksum.FormatComposite(c.Sum, c.Parts))
		h.Set("x-amz-checksum-type", "COMPOSITE")
		return
	}
	h.Set(name, checksum.Encode(c.Sum))
	h.Set("x-amz-checksum-type", "FULL_OBJECT")
}

func checksumMode(h http.Header) bool {
	return strings.EqualFold(h.Get("x-amz-checksum-mode"), "ENABLED")
}

var errNoLength = errors.New("no length")
