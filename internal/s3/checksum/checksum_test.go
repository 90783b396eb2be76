package checksum

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc64"
	"math/rand/v2"
	"net/http"
	"testing"
)

// Known answers: the CRC catalogue's check values (the checksum of
// "123456789"), FIPS 180 vectors, the checksums of nothing as S3 reports them,
// and the trailer example of S3's SigV4 streaming documentation (the CRC32C
// of 66,560 bytes of 'a' is sOO8/Q==).
func TestKnownAnswers(t *testing.T) {
	cases := []struct {
		alg   Algorithm
		data  []byte
		value string // base64, as in the header
		hex   string // the same, in hex, where a catalogue gives it so
	}{
		{CRC32, []byte("123456789"), "", "cbf43926"},
		{CRC32C, []byte("123456789"), "", "e3069283"},
		{CRC64NVME, []byte("123456789"), "", "ae8b14860a799888"},
		{SHA1, []byte("abc"), "", "a9993e364706816aba3e25717850c26c9cd0d89d"},
		{SHA256, []byte("abc"), "", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{CRC32, nil, "AAAAAA==", ""},
		{CRC32C, nil, "AAAAAA==", ""},
		{CRC64NVME, nil, "AAAAAAAAAAA=", ""},
		{SHA1, nil, "2jmj7l5rSw0yVb/vlWAYkK/YBwk=", ""},
		{SHA256, nil, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", ""},
		{CRC32C, bytes.Repeat([]byte("a"), 66560), "sOO8/Q==", ""},
	}
	for _, c := range cases {
		sum := c.alg.Sum(c.data)
		if c.hex != "" && hex.EncodeToString(sum) != c.hex {
			t.Errorf("%s(%q) = %x, want %s", c.alg, c.data, sum, c.hex)
		}
		if c.value != "" && Encode(sum) != c.value {
			t.Errorf("%s(%d bytes) = %s, want %s", c.alg, len(c.data), Encode(sum), c.value)
		}
		if len(sum) != c.alg.Size() {
			t.Errorf("%s: %d bytes, Size %d", c.alg, len(sum), c.alg.Size())
		}
		back, err := c.alg.Decode(Encode(sum))
		if err != nil || !bytes.Equal(back, sum) {
			t.Errorf("%s: Decode(Encode) = %x, %v", c.alg, back, err)
		}
		h := c.alg.New()
		h.Write(c.data)
		if err := c.alg.Check(h, Encode(sum)); err != nil {
			t.Errorf("%s: Check: %v", c.alg, err)
		}
	}
}

// TestStreaming hashes random data in random pieces and compares with one
// Sum; and CRC64NVME with hash/crc64 and the NVMe polynomial, an
// implementation independent of minio/crc64nvme.
func TestStreaming(t *testing.T) {
	table := crc64.MakeTable(0x9A6C9329AC4BC9B5)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		data := make([]byte, rng.IntN(1<<16))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		for _, a := range All {
			h := a.New()
			for rest := data; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(5000))
				h.Write(rest[:n])
				rest = rest[n:]
			}
			if got, want := h.Sum(nil), a.Sum(data); !bytes.Equal(got, want) {
				t.Fatalf("%s: streamed %x, whole %x", a, got, want)
			}
		}
		want := binary.BigEndian.AppendUint64(nil, crc64.Checksum(data, table))
		if got := CRC64NVME.Sum(data); !bytes.Equal(got, want) {
			t.Fatalf("CRC64NVME of %d bytes: %x, hash/crc64 says %x", len(data), got, want)
		}
	}
}

// TestCombine checks the FULL_OBJECT CRC of random splits against the CRC
// of the whole.
func TestCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		data := make([]byte, rng.IntN(100_000))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		for _, a := range []Algorithm{CRC32, CRC32C, CRC64NVME} {
			// Cut into parts, combine their CRCs in order.
			var acc []byte
			rest := data
			for first := true; first || len(rest) > 0; first = false {
				n := min(len(rest), rng.IntN(30_000))
				part := a.Sum(rest[:n])
				if acc == nil {
					acc = part
				} else {
					acc = a.Combine(acc, part, int64(n))
				}
				rest = rest[n:]
			}
			if want := a.Sum(data); !bytes.Equal(acc, want) {
				t.Fatalf("%s: combined %x, whole %x (%d bytes)", a, acc, want, len(data))
			}
		}
	}
	// A huge length must not loop or overflow.
	CRC64NVME.Combine(CRC64NVME.Sum(nil), CRC64NVME.Sum(nil), 1<<62)
}

func TestComposite(t *testing.T) {
	parts := [][]byte{[]byte("part one"), []byte("part two"), bytes.Repeat([]byte{7}, 5000)}
	for _, a := range All {
		var sums [][]byte
		var concat []byte
		for _, p := range parts {
			s := a.Sum(p)
			sums = append(sums, s)
			concat = append(concat, s...)
		}
		sum := a.Composite(sums)
		if !bytes.Equal(sum, a.Sum(concat)) {
			t.Fatalf("%s: composite is not the checksum of the concatenated checksums", a)
		}
		v := FormatComposite(sum, len(parts))
		if v != base64.StdEncoding.EncodeToString(sum)+"-3" {
			t.Fatalf("%s: %s", a, v)
		}
		back, n, err := a.DecodeComposite(v)
		if err != nil || n != 3 || !bytes.Equal(back, sum) {
			t.Fatalf("%s: DecodeComposite(%s) = %x, %d, %v", a, v, back, n, err)
		}
		for _, bad := range []string{Encode(sum), Encode(sum) + "-0", Encode(sum) + "-01", Encode(sum) + "-10001", Encode(sum) + "-", Encode(sum) + "-x", "-3", Encode(sum) + "-3-3"} {
			if _, _, err := a.DecodeComposite(bad); !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s: DecodeComposite(%q) = %v", a, bad, err)
			}
		}
	}
}

// TestMultipartETag: the ETag of two parts "a" and "b" is the MD5 of their
// two MD5 digests, "-2".
func TestMultipartETag(t *testing.T) {
	a, b := md5.Sum([]byte("a")), md5.Sum([]byte("b"))
	want := md5.Sum(append(a[:], b[:]...))
	if got := MultipartETag([][]byte{a[:], b[:]}); got != hex.EncodeToString(want[:])+"-2" {
		t.Fatalf("got %s", got)
	}
	// A known value: md5("a") = 0cc175b9c0f1b6a831c399e269772661.
	if hex.EncodeToString(a[:]) != "0cc175b9c0f1b6a831c399e269772661" {
		t.Fatal("md5")
	}
	if v, err := DecodeContentMD5(base64.StdEncoding.EncodeToString(a[:])); err != nil || !bytes.Equal(v, a[:]) {
		t.Fatalf("DecodeContentMD5: %x %v", v, err)
	}
	for _, bad := range []string{"", "DLF1ucDxtqgxw5niaXcmYQ", "DLF1ucDxtqgxw5niaXcmYQ==\n", "DLF1ucDxtqgxw5niaXcmYR==", "0cc175b9c0f1b6a831c399e269772661"} {
		if _, err := DecodeContentMD5(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("DecodeContentMD5(%q) = %v", bad, err)
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	good := Encode(CRC32.Sum([]byte("x")))
	for _, bad := range []string{"", "AAAAAA=", "AAAAAA", "AAAAAAA=", "AAAAAA==AAAAAA==", "AAAA AA=", "AAAAAB==", Encode(SHA1.Sum(nil))} {
		if _, err := CRC32.Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Decode(%q) = %v", bad, err)
		}
	}
	h := CRC32.New()
	h.Write([]byte("y"))
	if err := CRC32.Check(h, good); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Check of other data: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, a := range All {
		if b, err := ParseAlgorithm(a.String()); err != nil || b != a {
			t.Fatalf("ParseAlgorithm(%s) = %v, %v", a, b, err)
		}
		if b, ok := FromHeader(http.CanonicalHeaderKey(a.Header())); !ok || b != a {
			t.Fatalf("FromHeader(%s) = %v, %v", a.Header(), b, ok)
		}
	}
	if a, err := ParseAlgorithm("crc64nvme"); err != nil || a != CRC64NVME {
		t.Fatal("lower case")
	}
	for _, bad := range []string{"", "CRC", "MD5", "SHA512", "crc32 "} {
		if _, err := ParseAlgorithm(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseAlgorithm(%q) = %v", bad, err)
		}
	}
	for _, name := range []string{"X-Amz-Checksum-Mode", "X-Amz-Checksum-Type", "X-Amz-Checksum-Algorithm", "X-Amz-Checksum-", "Content-MD5"} {
		if _, ok := FromHeader(name); ok {
			t.Fatalf("FromHeader(%s) found a checksum", name)
		}
	}
}

func TestFromHeaders(t *testing.T) {
	v := Encode(CRC32C.Sum([]byte("data")))
	h := http.Header{}
	if a, sum, err := FromHeaders(h); a != 0 || sum != nil || err != nil {
		t.Fatal("no header")
	}
	h.Set("X-Amz-Checksum-Mode", "ENABLED")
	h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	h.Set("X-Amz-Checksum-Crc32c", v)
	h.Set("X-Amz-Sdk-Checksum-Algorithm", "crc32c")
	if a, sum, err := FromHeaders(h); a != CRC32C || Encode(sum) != v || err != nil {
		t.Fatalf("FromHeaders = %v %x %v", a, sum, err)
	}
	h.Set("X-Amz-Sdk-Checksum-Algorithm", "SHA256")
	if _, _, err := FromHeaders(h); !errors.Is(err, ErrInvalid) {
		t.Fatal("algorithm header disagrees")
	}
	h.Del("X-Amz-Sdk-Checksum-Algorithm")
	h.Set("X-Amz-Checksum-Sha1", Encode(SHA1.Sum(nil)))
	if _, _, err := FromHeaders(h); !errors.Is(err, ErrInvalid) {
		t.Fatal("two checksums")
	}
	h.Del("X-Amz-Checksum-Sha1")
	h.Add("X-Amz-Checksum-Crc32c", v)
	if _, _, err := FromHeaders(h); !errors.Is(err, ErrInvalid) {
		t.Fatal("one checksum twice")
	}
	h.Set("X-Amz-Checksum-Crc32c", "nope")
	if _, _, err := FromHeaders(h); !errors.Is(err, ErrInvalid) {
		t.Fatal("malformed value")
	}
}
