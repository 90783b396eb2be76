package s3gw

import (
	"net/netip"
	"strings"
)

// validBucketName applies S3's rules for new buckets: 3 to 63 characters
// of lower-case letters, digits, '.' and '-', beginning and ending with a
// letter or digit, no "..", not shaped like an IPv4 address, none of the
// reserved prefixes and suffixes.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) || strings.Contains(name, "..") {
		return false
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return false
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	for _, s := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(name, s) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
