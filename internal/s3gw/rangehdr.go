package s3gw

import (
	"strconv"
	"strings"
)

// byteRange is a satisfiable range of an object: [Start, Start+Length).
type byteRange struct{ Start, Length uint64 }

// parseRange reads a Range header against an object of size bytes: one
// range, "bytes=a-b", "bytes=a-" or "bytes=-n". It returns ok false when
// the header is absent, malformed or names several ranges (S3 then serves
// the whole object, as HTTP allows), and ErrInvalidRange when it is well
// formed but not satisfiable.
func parseRange(h string, size uint64) (byteRange, bool, error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") || len(spec) > 64 {
		return byteRange{}, false, nil
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return byteRange{}, false, nil
	}
	num := func(s string) (uint64, bool) {
		if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil
	}
	if first == "" { // suffix: the last n bytes
		n, ok := num(last)
		if !ok {
			return byteRange{}, false, nil
		}
		if n == 0 || size == 0 {
			return byteRange{}, false, ErrInvalidRange
		}
		n = min(n, size)
		return byteRange{size - n, n}, true, nil
	}
	a, ok := num(first)
	if !ok {
		return byteRange{}, false, nil
	}
	end := size - 1
	if last != "" {
		b, ok := num(last)
		if !ok || b < a {
			return byteRange{}, false, nil
		}
		end = min(b, size-1)
	}
	if a >= size {
		return byteRange{}, false, ErrInvalidRange
	}
	return byteRange{a, end - a + 1}, true, nil
}
