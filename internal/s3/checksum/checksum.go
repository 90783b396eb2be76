// Package checksum implements the object checksums of S3: the
// x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256} algorithms, their
// header values, the checksums of multipart uploads, and Content-MD5 with
// the multipart ETag. It is pure: no IO, no clock, nothing of cairn.
//
// # Use it for / do not use it for
//
// Use it in the S3 gateway to hash a body in the same pass that stores it
// (New returns a streaming hash.Hash), to parse and check the checksum
// headers and trailers clients send, and to compute what a completed
// multipart upload reports. Do not use it for cairn's own data integrity
// (the OSDs keep crc32c per 4 KiB block), nor to authenticate anything:
// CRCs detect accidents, not forgery.
//
// # Values
//
// A header value is the standard, padded base64 of the big-endian checksum:
// 4 bytes for the CRC32s, 8 for CRC64NVME, 20 for SHA1, 32 for SHA256. The
// CRCs are the reflected ones with all-ones initial value and final XOR:
// CRC32 is IEEE (zlib's), CRC32C is Castagnoli (iSCSI), CRC64NVME is the
// NVMe polynomial 0xAD93D23594C93659 (reflected 0x9A6C9329AC4BC9B5). Their
// check values (the checksum of "123456789") are 0xCBF43926, 0xE3069283 and
// 0xAE8B14860A799888.
//
// # Multipart uploads
//
// S3 reports one of two checksums for an object assembled from parts:
//
//   - COMPOSITE (any algorithm): the checksum of the concatenated binary
//     checksums of the parts, in part order, followed by "-N" for N parts
//     (Composite, FormatComposite, DecodeComposite).
//   - FULL_OBJECT (the CRCs only; the only kind CRC64NVME has): the CRC of
//     the whole object, computed from the parts' CRCs and lengths without
//     reading the data again (Combine).
//
// The multipart ETag is built like a composite checksum from the parts' MD5
// digests, in hex (MultipartETag).
//
// # Speed
//
// CRC32 and CRC32C come from hash/crc32, which uses the CPU's carry-less
// multiply and CRC32 instructions. CRC64NVME comes from
// github.com/minio/crc64nvme (Apache-2.0, a dependency of minio-go, kept by
// MinIO), which folds with PCLMULQDQ/VPCLMULQDQ on amd64 and PMULL on arm64:
// hash/crc64 with the NVMe table computes the same values (the tests check
// that) but its byte-table slicing is several times slower, too slow to hash
// every upload in line (BenchmarkCRC64NVME shows both). SHA1 and SHA256
// come from crypto/sha1 and crypto/sha256 (SHA-NI where the CPU has it).
package checksum

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"

	"github.com/minio/crc64nvme"
)

// Algorithm is one of S3's checksum algorithms.
type Algorithm uint8

const (
	CRC32 Algorithm = iota + 1
	CRC32C
	CRC64NVME
	SHA1
	SHA256
)

// All lists the algorithms, in the order S3 documents them.
var All = []Algorithm{CRC32, CRC32C, CRC64NVME, SHA1, SHA256}

// MaxParts is the largest part count of a multipart upload.
const MaxParts = 10000

var (
	// ErrInvalid is matched by every error of a malformed value or name
	// (S3 answers InvalidRequest or InvalidArgument, 400).
	ErrInvalid = errors.New("checksum: invalid")
	// ErrMismatch is matched by Check's error when the data's checksum
	// differs (S3 answers BadDigest, 400).
	ErrMismatch = errors.New("checksum: mismatch")
)

var names = [...]string{"", "CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"}
var sizes = [...]int{0, 4, 4, 8, 20, 32}

func (a Algorithm) valid() bool { return a >= CRC32 && a <= SHA256 }

// String is the algorithm's name as S3 spells it in x-amz-checksum-algorithm
// and in XML: "CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256".
func (a Algorithm) String() string {
	if !a.valid() {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return names[a]
}

// Header is the name of the header (or trailer) that carries the value,
// e.g. "x-amz-checksum-crc32c".
func (a Algorithm) Header() string { return "x-amz-checksum-" + strings.ToLower(a.String()) }

// Size is the checksum's length in bytes.
func (a Algorithm) Size() int {
	if !a.valid() {
		return 0
	}
	return sizes[a]
}

// IsCRC reports whether the algorithm is a CRC, which has a FULL_OBJECT
// multipart checksum.
func (a Algorithm) IsCRC() bool { return a == CRC32 || a == CRC32C || a == CRC64NVME }

// ParseAlgorithm reads an algorithm name as clients send it in
// x-amz-checksum-algorithm or x-amz-sdk-checksum-algorithm: any case.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := CRC32; a <= SHA256; a++ {
		if strings.EqualFold(s, names[a]) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown checksum algorithm %.32q", ErrInvalid, s)
}

// FromHeader returns the algorithm whose header is name (any case), e.g.
// "X-Amz-Checksum-Crc32".
func FromHeader(name string) (Algorithm, bool) {
	const prefix = "x-amz-checksum-"
	if len(name) <= len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
		return 0, false
	}
	a, err := ParseAlgorithm(name[len(prefix):])
	return a, err == nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// New returns a streaming hash of the algorithm; its Sum is the big-endian
// checksum. It panics on an invalid Algorithm (a programmer's error).
func (a Algorithm) New() hash.Hash {
	switch a {
	case CRC32:
		return crc32.NewIEEE()
	case CRC32C:
		return crc32.New(castagnoli)
	case CRC64NVME:
		return crc64nvme.New()
	case SHA1:
		return sha1.New()
	case SHA256:
		return sha256.New()
	}
	panic("checksum: invalid algorithm " + a.String())
}

// Sum returns the checksum of data.
func (a Algorithm) Sum(data []byte) []byte {
	h := a.New()
	h.Write(data)
	return h.Sum(nil)
}

// Encode returns the header value of a checksum: its standard base64.
func Encode(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }

// Decode parses a header value of the algorithm: padded standard base64 of
// exactly Size bytes.
func (a Algorithm) Decode(value string) ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: algorithm %d", ErrInvalid, a)
	}
	if base64.StdEncoding.EncodedLen(a.Size()) != len(value) {
		return nil, fmt.Errorf("%w: %s value is %d characters, want %d", ErrInvalid, a, len(value), base64.StdEncoding.EncodedLen(a.Size()))
	}
	sum, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil || len(sum) != a.Size() {
		return nil, fmt.Errorf("%w: %s value is not base64 of %d bytes", ErrInvalid, a, a.Size())
	}
	return sum, nil
}

// Check compares the checksum of what h hashed with a header value.
func (a Algorithm) Check(h hash.Hash, value string) error {
	want, err := a.Decode(value)
	if err != nil {
		return err
	}
	if got := h.Sum(nil); string(got) != string(want) {
		return fmt.Errorf("%w: the %s you specified did not match the calculated checksum", ErrMismatch, a)
	}
	return nil
}

// FromHeaders finds the checksum a request carries: its single
// x-amz-checksum-<algorithm> header (x-amz-checksum-type and
// x-amz-checksum-mode are not checksums). It returns 0 and no error when
// there is none, and ErrInvalid when there are several, or one header twice,
// or a malformed value. If x-amz-sdk-checksum-algorithm or
// x-amz-checksum-algorithm names an algorithm, the header must be that one.
func FromHeaders(h http.Header) (Algorithm, []byte, error) {
	var found Algorithm
	var value string
	for name, vals := range h {
		a, ok := FromHeader(name)
		if !ok {
			continue
		}
		if found != 0 || len(vals) != 1 {
			return 0, nil, fmt.Errorf("%w: more than one x-amz-checksum header", ErrInvalid)
		}
		found, value = a, vals[0]
	}
	for _, name := range []string{"X-Amz-Sdk-Checksum-Algorithm", "X-Amz-Checksum-Algorithm"} {
		if v := h.Values(name); len(v) > 0 {
			named, err := ParseAlgorithm(v[0])
			if err != nil || len(v) != 1 {
				return 0, nil, fmt.Errorf("%w: %s", ErrInvalid, name)
			}
			if found != 0 && named != found {
				return 0, nil, fmt.Errorf("%w: %s names %s but the request carries %s", ErrInvalid, name, named, found.Header())
			}
		}
	}
	if found == 0 {
		return 0, nil, nil
	}
	sum, err := found.Decode(value)
	if err != nil {
		return 0, nil, err
	}
	return found, sum, nil
}

// Composite returns the COMPOSITE checksum of a multipart upload: the
// checksum of the parts' binary checksums concatenated in part order.
func (a Algorithm) Composite(parts [][]byte) []byte {
	h := a.New()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// FormatComposite returns the header value of a composite checksum of n
// parts: "<base64>-<n>".
func FormatComposite(sum []byte, n int) string { return Encode(sum) + "-" + strconv.Itoa(n) }

// DecodeComposite parses "<base64>-<n>", n from 1 to MaxParts without
// leading zeros.
func (a Algorithm) DecodeComposite(value string) (sum []byte, n int, err error) {
	b64, count, ok := strings.Cut(value, "-")
	if !ok || count == "" || len(count) > 5 || count[0] == '0' {
		return nil, 0, fmt.Errorf("%w: composite %s value needs a part count", ErrInvalid, a)
	}
	n, err = strconv.Atoi(count)
	if err != nil || n < 1 || n > MaxParts {
		return nil, 0, fmt.Errorf("%w: composite %s part count", ErrInvalid, a)
	}
	sum, err = a.Decode(b64)
	if err != nil {
		return nil, 0, err
	}
	return sum, n, nil
}

// Combine returns the FULL_OBJECT checksum of a CRC algorithm: the CRC of
// A followed by B, from the CRC of A, the CRC of B and B's length. Folding
// it over the parts gives the whole object's CRC. It panics for a non-CRC
// algorithm or sums of the wrong size (programmer's errors).
func (a Algorithm) Combine(sumA, sumB []byte, lenB int64) []byte {
	if !a.IsCRC() || len(sumA) != a.Size() || len(sumB) != a.Size() || lenB < 0 {
		panic("checksum: Combine needs two CRC sums of the algorithm's size")
	}
	if a == CRC64NVME {
		c := combine(&nvme, binary.BigEndian.Uint64(sumA), binary.BigEndian.Uint64(sumB), lenB)
		return binary.BigEndian.AppendUint64(nil, c)
	}
	g := &ieee
	if a == CRC32C {
		g = &iscsi
	}
	c := combine(g, uint64(binary.BigEndian.Uint32(sumA)), uint64(binary.BigEndian.Uint32(sumB)), lenB)
	return binary.BigEndian.AppendUint32(nil, uint32(c))
}

// gf2 is a reflected CRC polynomial with its table of x^(2^k) mod p, for
// combining CRCs as zlib's crc32_combine does (in O(log n)).
type gf2 struct {
	poly, top uint64     // reflected polynomial; top is the bit of x^0
	x2n       [67]uint64 // x^(2^k) mod p: k up to 3+63 for any int64 byte count
}

var (
	ieee  = newGF2(0xEDB88320, 32)
	iscsi = newGF2(0x82F63B78, 32)
	nvme  = newGF2(0x9A6C9329AC4BC9B5, 64)
)

func newGF2(poly uint64, width uint) gf2 {
	g := gf2{poly: poly, top: 1 << (width - 1)}
	p := g.top >> 1 // x^1
	g.x2n[0] = p
	for k := 1; k < len(g.x2n); k++ {
		p = g.mul(p, p)
		g.x2n[k] = p
	}
	return g
}

// mul returns a·b mod p.
func (g *gf2) mul(a, b uint64) uint64 {
	var p uint64
	for m := g.top; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ g.poly
		} else {
			b >>= 1
		}
	}
	return p
}

// x8n returns x^(8n) mod p: the operator that appends n zero bytes.
func (g *gf2) x8n(n int64) uint64 {
	p := g.top // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = g.mul(g.x2n[k], p)
		}
	}
	return p
}

func combine(g *gf2, crcA, crcB uint64, lenB int64) uint64 {
	return g.mul(g.x8n(lenB), crcA) ^ crcB
}

// DecodeContentMD5 parses a Content-MD5 header: base64 of 16 bytes (S3
// answers InvalidDigest otherwise).
func DecodeContentMD5(value string) ([]byte, error) {
	if len(value) != base64.StdEncoding.EncodedLen(md5.Size) {
		return nil, fmt.Errorf("%w: Content-MD5 is not base64 of 16 bytes", ErrInvalid)
	}
	sum, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil || len(sum) != md5.Size {
		return nil, fmt.Errorf("%w: Content-MD5 is not base64 of 16 bytes", ErrInvalid)
	}
	return sum, nil
}

// MultipartETag returns the ETag S3 gives an object completed from parts
// (without its quotes): the hex MD5 of the parts' binary MD5s concatenated
// in part order, then "-" and the part count.
func MultipartETag(partMD5s [][]byte) string {
	h := md5.New()
	for _, p := range partMD5s {
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(partMD5s))
}
