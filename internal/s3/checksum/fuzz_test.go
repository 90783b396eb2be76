package checksum

import (
	"bytes"
	"net/http"
	"testing"
)

// FuzzDecode feeds header values and names to every decoder: none may
// panic, and whatever one accepts must encode back to the same text (so no
// two values mean one checksum).
func FuzzDecode(f *testing.F) {
	for _, a := range All {
		f.Add(a.Header(), Encode(a.Sum([]byte("seed"))))
		f.Add(a.Header(), FormatComposite(a.Sum(nil), 3))
	}
	f.Add("Content-MD5", "DLF1ucDxtqgxw5niaXcmYQ==")
	f.Add("x-amz-checksum-crc32", "AAAAAA=")
	f.Add("x-amz-checksum-crc32", "AAAAAB==")
	f.Add("x-amz-checksum-", "-10000")
	f.Fuzz(func(t *testing.T, name, value string) {
		for _, a := range All {
			if sum, err := a.Decode(value); err == nil {
				if len(sum) != a.Size() || Encode(sum) != value {
					t.Fatalf("%s: Decode(%q) = %x", a, value, sum)
				}
			}
			if sum, n, err := a.DecodeComposite(value); err == nil {
				if n < 1 || n > MaxParts || FormatComposite(sum, n) != value {
					t.Fatalf("%s: DecodeComposite(%q) = %x, %d", a, value, sum, n)
				}
			}
		}
		if sum, err := DecodeContentMD5(value); err == nil && Encode(sum) != value {
			t.Fatalf("DecodeContentMD5(%q) = %x", value, sum)
		}
		if a, ok := FromHeader(name); ok && !bytes.EqualFold([]byte(a.Header()), []byte(name)) {
			t.Fatalf("FromHeader(%q) = %s", name, a)
		}
		h := http.Header{http.CanonicalHeaderKey(name): {value}}
		if a, sum, err := FromHeaders(h); err == nil && a != 0 {
			if Encode(sum) != value || !bytes.EqualFold([]byte(a.Header()), []byte(name)) {
				t.Fatalf("FromHeaders(%q: %q) = %s %x", name, value, a, sum)
			}
		}
		if a, err := ParseAlgorithm(name); err == nil && !bytes.EqualFold([]byte(a.String()), []byte(name)) {
			t.Fatalf("ParseAlgorithm(%q) = %s", name, a)
		}
	})
}
